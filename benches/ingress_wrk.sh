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
server=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
if ! command -v wrk >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { say "wrk is missing: apt-get install wrk"; exit 1; }
  apt-get install -y -qq wrk >/dev/null
fi
cargo build --release --locked --quiet
B=target/release/channel-bridge

base=${server%/*}
query=''
[[ $server == *\?* ]] && query="?${server#*\?}"
db=cb_ingress_$$
export DATABASE_URL="$base/$db$query"
work=$(mktemp -d)
pid=''
cleanup() {
  [[ -z $pid ]] || kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  psql "${server}" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$B" migrate >/dev/null
export CB_EGRESS_ALLOW=127.0.0.1
export CB_SECRETS_KEY=$("$B" secrets generate-key)
json() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p"; }
tenant=$("$B" tenant create --slug bench --agent-url http://127.0.0.1:9/agent | json tenant_id)
secret=wrk-$RANDOM$RANDOM
connector=$(CB_VERIFICATION_SECRET=$secret CB_OUTBOUND_TOKEN=unused \
  "$B" connector add --tenant "$tenant" --platform telegram --bot-user-id 7000000001 | json connector_id)
for user in $(seq 1 64); do
  "$B" link add --tenant "$tenant" --platform telegram --platform-user-id "$((400000000 + user))" \
    --user-id "user-$user" >/dev/null
done

# Ports below the kernel's ephemeral range: outgoing connections take their local ports
# there, so a port that nothing listens on may still be taken when we bind it.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
(( ephemeral_low > 11000 )) || ephemeral_low=32768
port=$((10000 + RANDOM % (ephemeral_low - 10000)))
CB_WORKER=false RUST_LOG=warn "$B" serve --bind "127.0.0.1:$port" 2> "$work/serve.log" &
pid=$!
until "$B" healthcheck --url "http://127.0.0.1:$port" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { say "serve stopped:"; cat "$work/serve.log" >&2; exit 1; }
  sleep 0.2
done

# Each wrk thread numbers its own updates from a different start: update_ids never repeat.
cat > "$work/telegram.lua" <<LUA
-- `thread_base` is set per thread by setup() (a global of that thread's Lua state).
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
