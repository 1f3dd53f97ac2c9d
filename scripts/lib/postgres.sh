# shellcheck shell=bash
# Sourced by scripts/run and scripts/test. Do not execute.
#
# ensure_database [DBNAME]
#   Ends with DATABASE_URL exported and pointing at a PostgreSQL server that answers.
#   1. DATABASE_URL set and its server answers      -> used unchanged (DBNAME is ignored).
#   2. Local server on 127.0.0.1:5432 answers        -> postgres://postgres@127.0.0.1:5432/DBNAME
#   3. Otherwise a private cluster in <repo>/.pgdata -> postgres://postgres@127.0.0.1:55432/DBNAME
#      (port: CB_PG_PORT). PostgreSQL server binaries are installed with apt-get when
#      missing and running as root.
#   DBNAME defaults to $CB_DB_NAME, else channel_bridge. Returns non-zero (after a message on
#   stderr) when no server can be provided. Status lines go to stderr; nothing to stdout.
#
# Needs only bash and coreutils: no psql. pg_isready is used when present; otherwise a
# PostgreSQL SSLRequest is sent through bash's /dev/tcp (for a unix-socket URL: the socket
# file must exist).
#
# The private cluster keeps running after the script ends (the next run reuses it). Stop it
# from the repository root with
#   /usr/lib/postgresql/<version>/bin/pg_ctl -D "$PWD/.pgdata" stop
# (prefixed with `runuser -u postgres --` when you are root); delete .pgdata to start afresh.
# When root and a parent of the checkout is private (e.g. /root), the postgres user cannot
# reach .pgdata, so the cluster lives in /var/lib/postgresql/channel-bridge/<id> and .pgdata
# is a link to it: delete that directory too to start afresh.

_CB_PG_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_CB_REPO_ROOT=$(cd "$_CB_PG_LIB_DIR/../.." && pwd)

_cb_say() { printf 'postgres: %s\n' "$*" >&2; }

# Percent-decode a URL component (enough for %2F-style socket paths).
_cb_urldecode() {
  printf '%b' "${1//%/\\x}"
}

# Sets _cb_host, _cb_port, _cb_user and _cb_db from a postgres:// URL. Returns 1 if the URL
# is not one. The host is a name, an address or a directory (unix socket).
_cb_parse_url() {
  local url=$1 rest authority query hostport param key value userinfo
  _cb_host=''
  _cb_port=''
  _cb_user=''
  _cb_db=''
  case $url in
    postgres://* | postgresql://*) rest=${url#*://} ;;
    *) return 1 ;;
  esac
  rest=${rest%%#*}
  query=''
  if [[ $rest == *\?* ]]; then
    query=${rest#*\?}
    rest=${rest%%\?*}
  fi
  authority=${rest%%/*}
  [[ $rest == */* ]] && _cb_db=$(_cb_urldecode "${rest#*/}")
  hostport=${authority##*@}
  if [[ $authority == *@* ]]; then
    userinfo=${authority%@*}
    _cb_user=$(_cb_urldecode "${userinfo%%:*}")
  fi
  # Several hosts (a,b:5433) are allowed by libpq; check the first one.
  hostport=${hostport%%,*}
  if [[ $hostport == \[* ]]; then
    _cb_host=${hostport#\[}
    _cb_host=${_cb_host%%\]*}
    [[ $hostport == *\]:* ]] && _cb_port=${hostport##*\]:}
  elif [[ $hostport == *:* ]]; then
    _cb_host=${hostport%%:*}
    _cb_port=${hostport#*:}
  else
    _cb_host=$hostport
  fi
  _cb_host=$(_cb_urldecode "$_cb_host")
  local IFS='&'
  for param in $query; do
    key=${param%%=*}
    value=$(_cb_urldecode "${param#*=}")
    case $key in
      host) _cb_host=${value%%,*} ;;
      port) _cb_port=${value%%,*} ;;
      user) _cb_user=$value ;;
      dbname) _cb_db=$value ;;
      *) ;;
    esac
  done
  [[ -n $_cb_port ]] || _cb_port=${PGPORT:-5432}
  if [[ -z $_cb_host ]]; then
    _cb_host=${PGHOST:-}
  fi
  if [[ -z $_cb_host ]]; then
    # Same default as libpq on Debian and as sqlx: a local socket if one exists, else localhost.
    local dir
    for dir in /var/run/postgresql /run/postgresql /tmp /private/tmp; do
      if [[ -S $dir/.s.PGSQL.$_cb_port ]]; then
        _cb_host=$dir
        break
      fi
    done
    [[ -n $_cb_host ]] || _cb_host=localhost
  fi
  return 0
}

_cb_find_pg_isready() {
  local p
  p=$(command -v pg_isready 2>/dev/null) && { printf '%s\n' "$p"; return 0; }
  while IFS= read -r p; do
    [[ -x $p ]] && { printf '%s\n' "$p"; return 0; }
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin/pg_isready | sort -rV)
  return 1
}

# _cb_answers HOST PORT [USER [DB]]: 0 if a PostgreSQL server answers there. USER and DB
# only keep pg_isready from leaving "role does not exist" lines in the server log.
_cb_answers() {
  local host=$1 port=$2 user=${3:-} db=${4:-} isready rc
  local -a who=()
  [[ -n $user ]] && who+=(-U "$user")
  [[ -n $db ]] && who+=(-d "$db")
  if isready=$(_cb_find_pg_isready); then
    rc=0
    "$isready" -q -h "$host" -p "$port" "${who[@]}" -t 3 >/dev/null 2>&1 || rc=$?
    # 0: accepting; 1: rejecting (e.g. starting up); 2: no response; 3: bad parameters.
    [[ $rc -eq 0 ]] && return 0
    [[ $rc -eq 3 ]] || return 1
  fi
  if [[ $host == /* ]]; then
    [[ -S $host/.s.PGSQL.$port ]]
    return
  fi
  # No pg_isready: speak just enough of the protocol to know a PostgreSQL server is there
  # (a bare TCP connect also succeeds against proxies and other services). Send an
  # SSLRequest; a PostgreSQL server answers with the single byte S or N.
  local probe
  # shellcheck disable=SC2016 # $0, $1 and $r are expanded by the inner bash, on purpose.
  probe='exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "\x00\x00\x00\x08\x04\xd2\x16\x2f" >&3 || exit 1
    IFS= read -r -n 1 -t 3 r <&3 || exit 1
    [[ $r == S || $r == N ]]'
  if command -v timeout >/dev/null 2>&1; then
    timeout 4 bash -c "$probe" "$host" "$port" >/dev/null 2>&1
  else
    bash -c "$probe" "$host" "$port" >/dev/null 2>&1
  fi
}

# Echoes the bin directory holding initdb and pg_ctl; prefers VERSION ($1) when given,
# else the highest /usr/lib/postgresql/*/bin, else PATH.
_cb_find_pg_bin() {
  local want=${1:-} dir p
  if [[ -n $want && -x /usr/lib/postgresql/$want/bin/initdb && -x /usr/lib/postgresql/$want/bin/pg_ctl ]]; then
    printf '%s\n' "/usr/lib/postgresql/$want/bin"
    return 0
  fi
  while IFS= read -r dir; do
    if [[ -x $dir/initdb && -x $dir/pg_ctl ]]; then
      printf '%s\n' "$dir"
      return 0
    fi
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV)
  p=$(command -v initdb 2>/dev/null) || return 1
  dir=$(dirname "$p")
  [[ -x $dir/pg_ctl ]] || return 1
  printf '%s\n' "$dir"
}

# Runs a command as the server's owner: the postgres user when we are root (initdb and
# pg_ctl refuse to run as root), ourselves otherwise.
_cb_as_owner() {
  if [[ $(id -u) -ne 0 ]]; then
    "$@"
  elif command -v runuser >/dev/null 2>&1; then
    runuser -u postgres -- "$@"
  else
    local q
    q=$(printf '%q ' "$@")
    su -s /bin/sh postgres -c "$q"
  fi
}

_cb_install_postgres() {
  if [[ $(id -u) -ne 0 ]]; then
    _cb_say "PostgreSQL server binaries (initdb, pg_ctl) not found, and no server answers."
    _cb_say "Install them, e.g. on Debian/Ubuntu: sudo apt-get install postgresql"
    _cb_say "or point DATABASE_URL at a running server."
    return 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    _cb_say "PostgreSQL server binaries not found and apt-get is not available."
    _cb_say "Install the PostgreSQL server (Debian package: postgresql) or set DATABASE_URL."
    return 1
  fi
  _cb_say "installing PostgreSQL server binaries: apt-get install postgresql"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -q >&2 ||
    ! apt-get install -y -q --no-install-recommends postgresql >&2; then
    _cb_say "apt-get install postgresql failed"
    return 1
  fi
}

# Quote a value for postgresql.conf.
_cb_conf_quote() {
  local v=${1//\'/\'\'}
  printf "'%s'" "$v"
}

# Starts (initialising if needed) the private cluster; sets _cb_port to the port it listens on.
_cb_private_cluster() {
  local data="$_CB_REPO_ROOT/.pgdata" port=${CB_PG_PORT:-55432} bin version='' status=0 pidport sockdir log

  if [[ -f $data/PG_VERSION ]]; then
    version=$(<"$data/PG_VERSION")
  fi
  if ! bin=$(_cb_find_pg_bin "$version"); then
    _cb_install_postgres || return 1
    bin=$(_cb_find_pg_bin "$version") || {
      _cb_say "PostgreSQL server binaries still not found after installing (looked in /usr/lib/postgresql/*/bin and PATH)"
      return 1
    }
  fi
  if [[ -n $version && ! -x /usr/lib/postgresql/$version/bin/pg_ctl && $bin == /usr/lib/postgresql/* ]]; then
    _cb_say "warning: $data was created by PostgreSQL $version but only $bin is available;"
    _cb_say "starting it may fail: delete $data to start afresh (its data is lost)"
  fi

  if [[ $(id -u) -eq 0 ]]; then
    if ! id -u postgres >/dev/null 2>&1; then
      _cb_say "creating system user postgres"
      useradd --system --user-group --home-dir /var/lib/postgresql --no-create-home \
        --shell /usr/sbin/nologin postgres || return 1
    fi
    if ! runuser -u postgres -- test -x "$_CB_REPO_ROOT" 2>/dev/null; then
      # A parent of the checkout is private (e.g. /root): keep the cluster where the postgres
      # user can reach it, one directory per checkout, and link .pgdata to it.
      if [[ -L $data ]]; then
        data=$(readlink -f "$data") || return 1
      elif [[ -e $data ]]; then
        _cb_say "the postgres user cannot reach $data (a parent directory is private);"
        _cb_say "delete it (a link to a reachable directory is made instead) or set DATABASE_URL"
        return 1
      else
        local id
        id=$(printf '%s' "$_CB_REPO_ROOT" | cksum | cut -d' ' -f1) || return 1
        mkdir -p "/var/lib/postgresql/channel-bridge/$id" || return 1
        chown postgres: /var/lib/postgresql/channel-bridge "/var/lib/postgresql/channel-bridge/$id" || return 1
        ln -s "/var/lib/postgresql/channel-bridge/$id" "$data" || return 1
        data=/var/lib/postgresql/channel-bridge/$id
      fi
      _cb_say "the postgres user cannot reach $_CB_REPO_ROOT: cluster data in $data (linked from .pgdata)"
    fi
  fi

  if [[ ! -f $data/PG_VERSION ]]; then
    if [[ -d $data && -n $(ls -A "$data" 2>/dev/null) ]]; then
      _cb_say "$data exists but holds no cluster (PG_VERSION missing): delete it and retry"
      return 1
    fi
    mkdir -p "$data" || return 1
    chmod 700 "$data" || return 1
    [[ $(id -u) -ne 0 ]] || chown postgres: "$data" || return 1
    _cb_say "initialising private cluster in $data ($bin)"
    log=$(mktemp) || return 1
    # C.UTF-8 ships with glibc on Debian; fall back to the C locale where it is missing.
    if ! _cb_as_owner "$bin/initdb" -D "$data" --auth=trust -U postgres --encoding=UTF8 \
      --locale=C.UTF-8 >"$log" 2>&1 &&
      ! _cb_as_owner "$bin/initdb" -D "$data" --auth=trust -U postgres --encoding=UTF8 \
        --no-locale >>"$log" 2>&1; then
      cat "$log" >&2
      rm -f "$log"
      _cb_say "initdb failed"
      return 1
    fi
    rm -f "$log"
    printf "\n# channel-bridge private cluster: listen address, port and socket (rewritten on every start)\ninclude_if_exists = 'channel_bridge.conf'\n" \
      >>"$data/postgresql.conf"
  fi

  # Running already (maybe on another port)? Then use it as it is.
  _cb_as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1 || status=$?
  if [[ $status -eq 0 ]]; then
    pidport=$(sed -n 4p "$data/postmaster.pid" 2>/dev/null)
    _cb_port=${pidport:-$port}
    _cb_say "private cluster in $data already running (port $_cb_port)"
    return 0
  fi

  # The socket path must fit in sun_path (107 bytes); otherwise listen on TCP only.
  sockdir=$data
  if [[ ${#data} -gt 90 ]]; then
    sockdir=''
  fi
  {
    printf '# Written by scripts/lib/postgres.sh on every start (port: set CB_PG_PORT).\n'
    printf 'listen_addresses = %s\n' "$(_cb_conf_quote 127.0.0.1)"
    printf 'port = %s\n' "$port"
    printf 'unix_socket_directories = %s\n' "$(_cb_conf_quote "$sockdir")"
    printf 'max_connections = 200\n'
  } >"$data/channel_bridge.conf" || return 1
  [[ $(id -u) -ne 0 ]] || chown postgres: "$data/channel_bridge.conf" || return 1

  _cb_say "starting private cluster in $data on 127.0.0.1:$port (log: $data/server.log)"
  if ! _cb_as_owner "$bin/pg_ctl" -D "$data" -w -t 60 -l "$data/server.log" start >/dev/null; then
    _cb_say "pg_ctl start failed; last lines of $data/server.log:"
    tail -n 20 "$data/server.log" >&2 2>/dev/null
    return 1
  fi
  _cb_port=$port
}

ensure_database() {
  local db=${1:-${CB_DB_NAME:-channel_bridge}}
  local _cb_host _cb_port _cb_user _cb_db

  if [[ -n ${DATABASE_URL:-} ]]; then
    if ! _cb_parse_url "$DATABASE_URL"; then
      _cb_say "DATABASE_URL is not a postgres:// URL; using it unchecked"
      export DATABASE_URL
      return 0
    fi
    if _cb_answers "$_cb_host" "$_cb_port" "$_cb_user" "$_cb_db"; then
      _cb_say "using DATABASE_URL (server at $_cb_host:$_cb_port answers)"
      export DATABASE_URL
      return 0
    fi
    _cb_say "DATABASE_URL is set but nothing answers at $_cb_host:$_cb_port;"
    _cb_say "falling back to the private cluster in $_CB_REPO_ROOT/.pgdata"
  else
    if _cb_answers 127.0.0.1 5432 postgres postgres; then
      export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
      _cb_say "using the local server on 127.0.0.1:5432: $DATABASE_URL"
      return 0
    fi
    _cb_say "DATABASE_URL unset and nothing answers on 127.0.0.1:5432; using the private cluster"
  fi

  _cb_private_cluster || return 1
  if ! _cb_answers 127.0.0.1 "$_cb_port" postgres postgres; then
    _cb_say "private cluster started but 127.0.0.1:$_cb_port does not answer (see $_CB_REPO_ROOT/.pgdata/server.log)"
    return 1
  fi
  export DATABASE_URL="postgres://postgres@127.0.0.1:$_cb_port/$db"
  _cb_say "using the private cluster: $DATABASE_URL"
}
