# What benches/ingress_wrk.sh and benches/taps_wrk.sh share; sourced by them, not run. They
# define `say` first.

# wrk (installed when missing and we are root), the release binary as $B, a throwaway
# database `<prefix>_<pid>` on DATABASE_URL's server as the new DATABASE_URL (dropped at
# exit, with the scratch directory $work and the `serve` of $pid), migrated, and a fresh
# CB_SECRETS_KEY.
wrk_setup() {
  server=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
  if ! command -v wrk >/dev/null; then
    [[ $(id -u) -eq 0 ]] || { say "wrk is missing: apt-get install wrk"; exit 1; }
    apt-get install -y -qq wrk >/dev/null
  fi
  cargo build --release --locked --quiet
  B=target/release/channel-bridge

  local base=${server%/*} query=''
  [[ $server == *\?* ]] && query="?${server#*\?}"
  db=${1}_$$
  export DATABASE_URL="$base/$db$query"
  work=$(mktemp -d)
  pid=''
  trap wrk_cleanup EXIT

  "$B" migrate >/dev/null
  export CB_EGRESS_ALLOW=127.0.0.1
  export CB_SECRETS_KEY=$("$B" secrets generate-key)
}

wrk_cleanup() {
  [[ -z $pid ]] || kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  psql "${server}" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
  rm -rf "$work"
}

json() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p"; }

# A tenant (slug $1) with a Telegram connector (outbound token $2) and $3 linked users
# (sender 400000000 + u is user-u); sets $tenant, $connector and the webhook $secret.
wrk_provision() {
  tenant=$("$B" tenant create --slug "$1" --agent-url http://127.0.0.1:9/agent | json tenant_id)
  secret=wrk-$RANDOM$RANDOM
  connector=$(CB_VERIFICATION_SECRET=$secret CB_OUTBOUND_TOKEN=$2 \
    "$B" connector add --tenant "$tenant" --platform telegram --bot-user-id 7000000001 | json connector_id)
  local user
  for user in $(seq 1 "$3"); do
    "$B" link add --tenant "$tenant" --platform telegram --platform-user-id "$((400000000 + user))" \
      --user-id "user-$user" >/dev/null
  done
}

# `serve` with the worker off on 127.0.0.1:$port, its pid in $pid, once it is healthy.
wrk_serve() {
  # Ports below the kernel's ephemeral range: outgoing connections take their local ports
  # there, so a port that nothing listens on may still be taken when we bind it.
  local ephemeral_low
  ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  (( ephemeral_low > 11000 )) || ephemeral_low=32768
  port=$((10000 + RANDOM % (ephemeral_low - 10000)))
  CB_WORKER=false RUST_LOG=warn "$B" serve --bind "127.0.0.1:$port" 2> "$work/serve.log" &
  pid=$!
  until "$B" healthcheck --url "http://127.0.0.1:$port" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { say "serve stopped:"; cat "$work/serve.log" >&2; exit 1; }
    sleep 0.2
  done
}
