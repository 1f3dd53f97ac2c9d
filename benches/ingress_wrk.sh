#!/usr/bin/env bash
# Ingress alone, measured by an independent client (docs/benchmarks.md): Debian's `wrk` posts
# signed Telegram updates (each a new update_id and message_id, from 64 linked users) to the
# real `serve` binary, with the worker off, so every request is a verified webhook recorded as
# a turn and queued. Prints wrk's figures and the turns recorded.
#
#   benches/ingress_wrk.sh [CONNECTIONS] [SECONDS]      (defaults 256 and 15)
#
# DATABASE_URL names a server where a throwaway database `cb_ingress_<pid>` is created and
# dropped at the end (postgres://postgres@127.0.0.1:5432/postgres by default). Needs `wrk`
# (apt-get install wrk; installed when missing and we are root); builds the release binary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf 'ingress_wrk: %s\n' "$*" >&2; }

connections=${1:-256}
seconds=${2:-15}
threads=2
source benches/wrk_common.sh
wrk_setup cb_ingress
wrk_provision bench unused 64
wrk_serve

# Each wrk thread numbers its own updates from a different start: update_ids never repeat.
cat > "$work/telegram.lua" <<LUA
-- thread_base is set per thread by setup() (a global of that thread's Lua state).
local counter = 0
local threads = {}
function setup(thread)
  thread:set("thread_base", #threads * 100000000)
  table.insert(threads, thread)
end
wrk.method = "POST"
wrk.path = "/v1/hooks/$tenant/$connector"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Telegram-Bot-Api-Secret-Token"] = "$secret"
function request()
  counter = counter + 1
  local id = thread_base + counter
  local user = 400000001 + (id % 64)
  local body = string.format('{"update_id":%d,"message":{"message_id":%d,"from":{"id":%d,"is_bot":false,"first_name":"Bench","language_code":"en"},"chat":{"id":%d,"first_name":"Bench","type":"private"},"date":1718000000,"text":"What is on my calendar today?"}}', id, id, user, user)
  return wrk.format(nil, nil, nil, body)
end
LUA
say "wrk -t$threads -c$connections -d${seconds}s --latency against serve (worker off) on 127.0.0.1:$port"
wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency -s "$work/telegram.lua" "http://127.0.0.1:$port" | tee "$work/wrk.txt"
recorded=$(psql "$DATABASE_URL" -Atc "select count(*) from channel_messages")
say "turns recorded: $recorded"
if grep -q "Non-2xx" "$work/wrk.txt"; then say "some responses were not 2xx"; exit 1; fi
