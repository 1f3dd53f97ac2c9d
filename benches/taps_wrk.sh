#!/usr/bin/env bash
# Taps alone, measured by an independent client (docs/benchmarks.md#taps): Debian's `wrk` posts
# Telegram `callback_query` updates, each a tap on a different stored answer's button (its own
# update id and callback id, `callback_data` = `<token>.<index>`), to the real `serve` binary
# with the worker off, so every request is a verified webhook whose tap is looked up by its
# token, recorded as a turn, its answer's choice made and the closing edit queued. Prints wrk's
# figures and what the database then holds.
#
#   benches/taps_wrk.sh [CONNECTIONS] [SECONDS] [ANSWERS]     (defaults 64, 10 and 200000)
#
# The answers are bulk-loaded first as the database owner, as the gateway stores an answer
# that offered choices (an `executed` turn of one of 64 linked users and its `sent` reply
# part with `choices` and `choice_token`, src/db/messages.rs `offer_choices`). Each wrk
# thread taps its own share of the answers in order; a thread that runs out starts over,
# and those taps are second taps (recorded, not dispatched: `choice_already_made`), which
# the summary shows. DATABASE_URL names a server where a throwaway database
# `cb_taps_<pid>` is created and dropped at the end (postgres://postgres@127.0.0.1:5432/postgres
# by default). Needs `wrk` and `psql`; builds the release binary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf 'taps_wrk: %s\n' "$*" >&2; }

connections=${1:-64}
seconds=${2:-10}
answers=${3:-200000}
threads=2
users=64
source benches/wrk_common.sh
wrk_setup cb_taps
wrk_provision taps 7000000001:unused $users

# Answer i: user u = 1 + i % 64 (sender 400000000 + u, linked to user-u) asked (update id
# 500000000 + i) and was answered with message 1000000000 + i offering Approve / Reject
# under the token t<i, 9 digits>.
started=$(date +%s%N)
psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q <<SQL
set synchronous_commit = off;
insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
    platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
    request_content, response_content, decision, status, attempts, received_at,
    completed_at, delivered_at, updated_at, metadata)
select '$tenant', (lpad(to_hex((extract(epoch from ts) * 1000)::int8), 12, '0') || '7'
                   || substr(m, 1, 3) || '8' || substr(m, 4, 15))::uuid,
       '$connector', 'telegram', (500000000 + i)::text, (2 * (i / $users) + 1)::text,
       (400000001 + i % $users)::text, (400000001 + i % $users)::text, 'user-' || (1 + i % $users),
       'user:user-' || (1 + i % $users), 'Can I get a refund?', 'Approve the refund?', 'respond',
       'executed', 1, ts, ts + interval '1 second', ts + interval '1200 milliseconds',
       ts + interval '1200 milliseconds',
       jsonb_build_object('chat_type', 'private', 'chat_title', null, 'username', null,
                          'first_name', 'User', 'date', floor(extract(epoch from ts))::int8,
                          'message_thread_id', null, 'caption', null)
  from (select i, md5('telegram' || i) as m,
               now() - interval '2 hours' + i * interval '10 milliseconds' as ts
          from generate_series(0, $answers - 1) as i) g;
insert into channel_replies (tenant_id, message_id, part_index, content, status,
    platform_message_id, attempts, created_at, updated_at, sent_at, sending_since,
    choices, choice_token)
select tenant_id, id, 0, response_content, 'sent', (1000000000 + i)::text, 1, completed_at,
       delivered_at, delivered_at, completed_at,
       jsonb_build_object('token', 't' || lpad(i::text, 9, '0'),
           'items', jsonb_build_array(
               jsonb_build_object('id', 'approve', 'label', 'Approve', 'style', 'primary',
                                  'value', jsonb_build_object('refund', i), 'toast', 'Approved'),
               jsonb_build_object('id', 'reject', 'label', 'Reject', 'style', 'danger')),
           'reusable', false),
       't' || lpad(i::text, 9, '0')
  from (select *, idempotency_key::int8 - 500000000 as i from channel_messages) m;
vacuum (analyze);
checkpoint;
SQL
say "$answers answers offering choices loaded in $(( ($(date +%s%N) - started) / 1000000 )) ms"

wrk_serve

cat > "$work/taps.lua" <<LUA
-- Thread k taps answers k*share, k*share + 1, … (set by setup(); a global of its Lua state).
local counter = 0
local threads = {}
local share = math.floor($answers / $threads)
function setup(thread)
  thread:set("first", #threads * share)
  table.insert(threads, thread)
end
wrk.method = "POST"
wrk.path = "/v1/hooks/$tenant/$connector"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Telegram-Bot-Api-Secret-Token"] = "$secret"
function request()
  local i = first + counter % share
  local update = 700000000 + first + counter
  counter = counter + 1
  local sender = 400000001 + i % $users
  local token = string.format("t%09d", i)
  local body = string.format('{"update_id":%d,"callback_query":{"id":"cb%d","from":{"id":%d,"is_bot":false,"first_name":"User","language_code":"en"},"message":{"message_id":%d,"from":{"id":7000000001,"is_bot":true,"first_name":"Bench bot","username":"bench_bot"},"chat":{"id":%d,"first_name":"User","type":"private"},"date":1718000003,"text":"Approve the refund?","reply_markup":{"inline_keyboard":[[{"text":"Approve","callback_data":"%s.0"},{"text":"Reject","callback_data":"%s.1"}]]}},"chat_instance":"-5358271390871234567","data":"%s.%d"}}', update, update, sender, 1000000000 + i, sender, token, token, token, i % 2)
  return wrk.format(nil, nil, nil, body)
end
LUA
say "wrk -t$threads -c$connections -d${seconds}s --latency: Telegram taps against serve (worker off) on 127.0.0.1:$port"
wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency -s "$work/taps.lua" "http://127.0.0.1:$port" | tee "$work/wrk.txt"
sleep 1
psql "$DATABASE_URL" -At <<'SQL' | while IFS='|' read -r what n; do say "$what: $n"; done
select 'tap turns recorded', count(*) from channel_messages where action is not null;
select 'tap turns by status', string_agg(status || ' ' || n, ', ')
  from (select status, count(*) n from channel_messages where action is not null group by status) s;
select 'answers tapped', count(distinct action->>'message_id') from channel_messages where action is not null;
select 'answers chosen', count(*) from channel_replies where chosen is not null;
select 'closing edits queued', count(*) from channel_replies where edit_of is not null;
SQL
say "serve log: $(grep -c ERROR "$work/serve.log" || true) error lines, $(grep -c WARN "$work/serve.log" || true) warning lines"
if grep -q "Non-2xx" "$work/wrk.txt"; then say "some responses were not 2xx"; exit 1; fi
