# shellcheck shell=bash
# Sourced by scripts/run, scripts/test and scripts/test-setup; in bash you may source it too
# (`source scripts/lib/postgres.sh && ensure_database`) to get the scripts' DATABASE_URL in
# your shell. Do not execute.
#
# ensure_database [DBNAME]
#   Ends with DATABASE_URL exported and pointing at a PostgreSQL server we can log in to.
#   1. DATABASE_URL set: used unchanged when a login with it works (when only its database is
#      missing, a login to database postgres is enough: migrate creates it). When its server
#      does not answer or refuses the login, returns 1 with a message naming the URL (its
#      password masked). A URL you set is never replaced by another server.
#   2. DATABASE_URL unset: the local server on 127.0.0.1:5432 (port: CB_LOCAL_PG_PORT) when
#      user postgres logs in there without a password (trust) ->
#      postgres://postgres@127.0.0.1:5432/DBNAME. When it answers but refuses that login (a
#      stock Debian cluster asks for a password on TCP), one line says so and:
#   3. the private cluster in <repo>/.pgdata (directory: CB_PG_DIR; port: CB_PG_PORT, default
#      55432) -> postgres://postgres:<password>@127.0.0.1:55432/DBNAME. It is initialised and
#      started when needed; PostgreSQL server binaries are installed with apt-get when missing
#      and running as root.
#   DBNAME defaults to $CB_DB_NAME, else channel_bridge. Returns non-zero (after a message on
#   stderr) when no server can be provided. Status lines go to stderr; nothing to stdout.
#   Passwords are never printed, and never put on a command line (psql gets PGPASSWORD).
#
# How a login is tested: with psql when there is one (PATH, /usr/lib/postgresql/*/bin, or
# CB_PSQL=/path; CB_PSQL=none never uses it): `psql -w -c 'select 1'`. Without psql (a fresh
# machine has none until the postgresql package is installed), bash speaks the protocol's
# startup message through /dev/tcp: a login without a password is tested completely (until
# the server is ready for queries); a server that asks for a password counts as refusing a
# passwordless login, and for a DATABASE_URL it is accepted with a line saying the password
# was not checked. pg_isready (or an SSLRequest) tells "refuses" from "does not answer".
#
# The private cluster only lets its owner in: TCP logins (127.0.0.1 only) need the password
# generated at set-up and kept in <data>/channel_bridge.password (mode 0600; the exported
# DATABASE_URL holds it); the unix socket lies in the data directory, which only the
# cluster's owner can enter. A cluster made by an older version of this file (no password)
# is given one, restarting it once.
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
_CB_HBA_MARK='# channel-bridge private cluster (scripts/lib/postgres.sh)'

_cb_say() { printf 'postgres: %s\n' "$*" >&2; }

# Percent-decode a URL component.
_cb_urldecode() {
  local s=${1//\\/\\\\}
  printf '%b' "${s//%/\\x}"
}

# Sets _cb_host, _cb_port, _cb_user, _cb_pass, _cb_db and _cb_sslmode from a postgres:// URL.
# Returns 1 if the URL is not one. The host is a name, an address or a directory (unix socket).
_cb_parse_url() {
  local url=$1 rest authority query hostport param key value userinfo
  local -a params=()
  _cb_host=''
  _cb_port=''
  _cb_user=''
  _cb_pass=''
  _cb_db=''
  _cb_sslmode=''
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
    [[ $userinfo == *:* ]] && _cb_pass=$(_cb_urldecode "${userinfo#*:}")
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
  [[ -n $query ]] && IFS='&' read -r -a params <<<"$query"
  for param in "${params[@]}"; do
    key=${param%%=*}
    value=$(_cb_urldecode "${param#*=}")
    case $key in
      host) _cb_host=${value%%,*} ;;
      port) _cb_port=${value%%,*} ;;
      user) _cb_user=$value ;;
      password) _cb_pass=$value ;;
      dbname) _cb_db=$value ;;
      sslmode) _cb_sslmode=$value ;;
      *) ;;
    esac
  done
  [[ -n $_cb_port ]] || _cb_port=${PGPORT:-5432}
  [[ -n $_cb_sslmode ]] || _cb_sslmode=${PGSSLMODE:-}
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

# _cb_url_edit URL MODE [DBNAME]: the URL with its password masked (MODE redact: ***, for
# messages), removed (MODE strip, for psql, which gets it in PGPASSWORD) or kept (MODE keep);
# with DBNAME, database DBNAME instead of the URL's (a dbname= parameter overrides the path).
_cb_url_edit() {
  local url=$1 mode=$2 db=${3:-} scheme rest query='' authority path userinfo param out
  local -a params=() kept=()
  case $url in
    *://*) ;;
    *)
      printf '%s\n' "$url"
      return 0
      ;;
  esac
  scheme=${url%%://*}
  rest=${url#*://}
  rest=${rest%%#*}
  if [[ $rest == *\?* ]]; then
    query=${rest#*\?}
    rest=${rest%%\?*}
  fi
  authority=${rest%%/*}
  path=${rest:${#authority}}
  if [[ $authority == *@* ]]; then
    userinfo=${authority%@*}
    if [[ $userinfo == *:* ]]; then
      case $mode in
        redact) userinfo="${userinfo%%:*}:***" ;;
        strip) userinfo=${userinfo%%:*} ;;
        *) ;;
      esac
    fi
    authority=$userinfo@${authority##*@}
  fi
  out=$scheme://$authority$path
  [[ -n $query ]] && IFS='&' read -r -a params <<<"$query"
  for param in "${params[@]}"; do
    case ${param%%=*} in
      password)
        case $mode in
          redact) kept+=('password=***') ;;
          strip) ;;
          *) kept+=("$param") ;;
        esac
        ;;
      *) kept+=("$param") ;;
    esac
  done
  [[ -z $db ]] || kept+=("dbname=$db")
  if [[ ${#kept[@]} -gt 0 ]]; then
    local IFS='&'
    out+="?${kept[*]}"
  fi
  printf '%s\n' "$out"
}

# Runs a command with a time limit when timeout(1) is there.
_cb_timeout() {
  local secs=$1
  shift
  if command -v timeout >/dev/null 2>&1; then
    timeout "$secs" "$@"
  else
    "$@"
  fi
}

_cb_find_pg_isready() {
  local p
  p=$(command -v pg_isready 2>/dev/null) && { printf '%s\n' "$p"; return 0; }
  while IFS= read -r p; do
    [[ -x $p ]] && { printf '%s\n' "$p"; return 0; }
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin/pg_isready | sort -rV)
  return 1
}

_cb_find_psql() {
  local p
  case ${CB_PSQL:-} in
    '') ;;
    none) return 1 ;;
    *)
      [[ -x $CB_PSQL ]] || return 1
      printf '%s\n' "$CB_PSQL"
      return 0
      ;;
  esac
  p=$(command -v psql 2>/dev/null) && { printf '%s\n' "$p"; return 0; }
  while IFS= read -r p; do
    [[ -x $p ]] && { printf '%s\n' "$p"; return 0; }
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin/psql | sort -rV)
  return 1
}

# _cb_answers HOST PORT [USER [DB]]: 0 if a PostgreSQL server answers there (whether or not
# it would let us in). USER and DB only keep pg_isready from leaving "role does not exist"
# lines in the server log.
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
  _cb_timeout 4 bash -c "$probe" "$host" "$port" >/dev/null 2>&1
}

# Run by a separate bash (under a time limit): sends a startup message (protocol 3.0) for
# USER and DB to HOST:PORT without SSL and reads the answer up to ReadyForQuery. Prints one
# line: `ok` (logged in without a password), `password N` (the server asks for one, method N),
# `error SQLSTATE MESSAGE` or `other` (not understood). Fails when nothing answers.
_cb_startup_probe() {
  local host=$1 port=$2 user=$3 db=$4 len hex n type mlen code i field value ch sqlstate='' msg=''
  local -a b
  export LC_ALL=C
  exec 3<>"/dev/tcp/$host/$port" || return 2
  len=$((4 + 4 + 5 + ${#user} + 1 + 9 + ${#db} + 1 + 1))
  printf -v hex '\\x%02x\\x%02x\\x%02x\\x%02x' $((len >> 24 & 255)) $((len >> 16 & 255)) \
    $((len >> 8 & 255)) $((len & 255))
  # shellcheck disable=SC2059 # hex holds the length's escapes, on purpose.
  { printf "$hex"; printf '\x00\x03\x00\x00user\x00%s\x00database\x00%s\x00\x00' "$user" "$db"; } >&3 ||
    return 2
  for ((n = 0; n < 100; n++)); do
    read -r -a b < <(dd bs=1 count=5 status=none <&3 | od -An -tu1 -v | tr '\n' ' ')
    [[ ${#b[@]} -eq 5 ]] || return 2
    type=${b[0]}
    mlen=$(((b[1] << 24) + (b[2] << 16) + (b[3] << 8) + b[4] - 4))
    if ((mlen < 0 || mlen > 65536)); then
      echo other
      return 0
    fi
    b=()
    if ((mlen > 0)); then
      read -r -a b < <(dd bs=1 count="$mlen" status=none <&3 | od -An -tu1 -v | tr '\n' ' ')
      [[ ${#b[@]} -eq $mlen ]] || return 2
    fi
    case $type in
      82) # R: authentication request; 0 is AuthenticationOk.
        code=$(((b[0] << 24) + (b[1] << 16) + (b[2] << 8) + b[3]))
        if [[ $code -ne 0 ]]; then
          echo "password $code"
          return 0
        fi
        ;;
      90) # Z: ReadyForQuery. Say goodbye (Terminate) so the server logs nothing.
        printf 'X\x00\x00\x00\x04' >&3
        echo ok
        return 0
        ;;
      69) # E: ErrorResponse, fields (type byte, C string) up to a zero byte.
        i=0
        while ((i < mlen && b[i] != 0)); do
          field=${b[i]}
          value=''
          for ((i = i + 1; i < mlen && b[i] != 0; i++)); do
            printf -v ch '\\x%02x' "${b[i]}"
            printf -v ch '%b' "$ch"
            value+=$ch
          done
          ((i += 1))
          case $field in
            67) sqlstate=$value ;; # C
            77) msg=$value ;;      # M
          esac
        done
        echo "error ${sqlstate:-?????} $msg"
        return 0
        ;;
      83 | 75 | 78 | 118) ;; # S ParameterStatus, K BackendKeyData, N Notice, v NegotiateProtocolVersion
      *)
        echo other
        return 0
        ;;
    esac
  done
  echo other
}

# _cb_login URL: can we log in with URL? 0: yes; 1: the server answers but refuses (why in
# _cb_why); 2: nothing answers (why in _cb_why); 3: the server answers and asks for a password
# that cannot be checked without psql (or psql is absent and the URL is a socket or needs SSL).
_cb_login() {
  local url=$1 psql out rc=0 reply nopass
  local _cb_host _cb_port _cb_user _cb_pass _cb_db _cb_sslmode
  _cb_why=''
  if ! _cb_parse_url "$url"; then
    _cb_why='not a postgres:// URL'
    return 1
  fi
  if psql=$(_cb_find_psql); then
    nopass=$(_cb_url_edit "$url" strip)
    # The password goes in the environment, never on a command line; -w: never prompt.
    if [[ -n $_cb_pass ]]; then
      out=$(PGPASSWORD=$_cb_pass PGCONNECT_TIMEOUT=5 _cb_timeout 15 "$psql" -X -w -A -t -q \
        -d "$nopass" -c 'select 1' 2>&1 >/dev/null) || rc=$?
    else
      out=$(PGCONNECT_TIMEOUT=5 _cb_timeout 15 "$psql" -X -w -A -t -q \
        -d "$nopass" -c 'select 1' 2>&1 >/dev/null) || rc=$?
    fi
    [[ $rc -eq 0 ]] && return 0
    out=${out%%$'\n'*}
    out=${out#psql: error: }
    out=${out#*failed: }
    [[ -z $_cb_pass ]] || out=${out//"$_cb_pass"/***}
    _cb_why=$(tr -s ' \t' '  ' <<<"${out:-psql exited with status $rc}")
    _cb_answers "$_cb_host" "$_cb_port" "$_cb_user" "$_cb_db" && return 1
    return 2
  fi
  if [[ $_cb_host == /* ]]; then
    if [[ -S $_cb_host/.s.PGSQL.$_cb_port ]]; then
      _cb_why="login not checked (no psql, and bash cannot open a unix socket)"
      return 3
    fi
    _cb_why="no socket $_cb_host/.s.PGSQL.$_cb_port"
    return 2
  fi
  case $_cb_sslmode in
    require | verify-ca | verify-full)
      if _cb_answers "$_cb_host" "$_cb_port"; then
        _cb_why="login not checked (no psql, and bash does not speak SSL)"
        return 3
      fi
      _cb_why="nothing answers at $_cb_host:$_cb_port"
      return 2
      ;;
  esac
  [[ -n $_cb_user ]] || _cb_user=${PGUSER:-$(id -un)}
  [[ -n $_cb_db ]] || _cb_db=$_cb_user
  rc=0
  reply=$(_cb_timeout 8 bash -c "$(declare -f _cb_startup_probe)"'; _cb_startup_probe "$@"' \
    probe "$_cb_host" "$_cb_port" "$_cb_user" "$_cb_db" 2>/dev/null) || rc=$?
  case $reply in
    ok) return 0 ;;
    password\ *)
      case ${reply#password } in
        3) _cb_why='the server asks for a password (password)' ;;
        5) _cb_why='the server asks for a password (md5)' ;;
        10) _cb_why='the server asks for a password (scram-sha-256)' ;;
        *) _cb_why="the server asks for credentials (authentication request ${reply#password })" ;;
      esac
      [[ -z $_cb_pass ]] || _cb_why+="; the password is not checked without psql"
      return 3
      ;;
    error\ *)
      reply=${reply#error }
      _cb_why="${reply#* } (SQLSTATE ${reply%% *})"
      return 1
      ;;
    other)
      _cb_why="something answers at $_cb_host:$_cb_port, but not like PostgreSQL"
      return 1
      ;;
  esac
  _cb_why="nothing answers at $_cb_host:$_cb_port"
  return 2
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

# Gives a file we wrote to the server's owner (when root; ourselves otherwise).
_cb_chown_owner() {
  [[ $(id -u) -ne 0 ]] || chown postgres: "$@"
}

_cb_install_postgres() {
  if [[ $(id -u) -ne 0 ]]; then
    _cb_say "PostgreSQL server binaries (initdb, pg_ctl) not found, and no server lets us in."
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

# _cb_is_postmaster_of PID DATA: 0 if PID is the postmaster of data directory DATA (a
# postgres process whose working directory is DATA), judged from /proc.
_cb_is_postmaster_of() {
  local pid=$1 data=$2 real comm cwd
  real=$(cd "$data" && pwd -P) || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || comm=''
  case $comm in
    postgres | postmaster | '') ;;
    *) return 1 ;;
  esac
  if cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) && [[ -n $cwd ]]; then
    [[ $cwd == "$real" ]]
    return
  fi
  # Not allowed to look (another user's process, hidepid): it can only be this cluster's
  # server if it runs as the data directory's owner.
  [[ $(stat -c %u "/proc/$pid" 2>/dev/null) == "$(stat -c %u "$data" 2>/dev/null)" ]]
}

# PIDs of the postgres processes working in data directory DATA (an old server's children).
_cb_pids_in() {
  local data=$1 real p pids=()
  real=$(cd "$data" && pwd -P) || return 0
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/cwd" 2>/dev/null) == "$real" ]] || continue
    case $(cat "$p/comm" 2>/dev/null) in
      postgres | postmaster) pids+=("${p#/proc/}") ;;
    esac
  done
  printf '%s\n' "${pids[*]}"
}

# _cb_server_state DATA BIN: is this data directory's server running? Echoes the PID from
# postmaster.pid. 0: running; 1: not running (no postmaster.pid, or its process is gone: the
# server removes such a file itself); 2: postmaster.pid names a live process that is not this
# cluster's server (a stale file, e.g. after a crash or reboot, its PID reused since).
_cb_server_state() {
  local data=$1 bin=$2 pid
  [[ -f $data/postmaster.pid ]] || return 1
  pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null) || pid=''
  pid=${pid#-}
  if [[ ! $pid =~ ^[0-9]+$ ]]; then
    printf '%s\n' "${pid:-?}"
    return 2
  fi
  printf '%s\n' "$pid"
  if [[ ! -d /proc/self ]]; then
    # No procfs: trust pg_ctl (which only asks whether the PID is alive).
    _cb_as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1 && return 0
    return 1
  fi
  [[ -d /proc/$pid ]] || return 1
  _cb_is_postmaster_of "$pid" "$data" && return 0
  return 2
}

# _cb_secure_cluster DATA BIN: with the server stopped, gives role postgres a new random
# password, writes it to DATA/channel_bridge.password (0600) and makes pg_hba.conf require it
# on TCP (socket: trust, but only the owner can enter DATA, where the socket is).
_cb_secure_cluster() {
  local data=$1 bin=$2 pw log pwfile=$1/channel_bridge.password
  pw=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n') || pw=''
  if [[ ! $pw =~ ^[0-9a-f]{48}$ ]]; then
    _cb_say "could not generate a password from /dev/urandom"
    return 1
  fi
  rm -f "$pwfile.new"
  (umask 077 && printf '%s\n' "$pw" >"$pwfile.new") || return 1
  chmod 600 "$pwfile.new" && _cb_chown_owner "$pwfile.new" || return 1
  log=$(mktemp) || return 1
  # Single-user mode reads the statement from stdin: the password is on no command line, and
  # log_min_error_statement keeps it out of the output should the statement fail.
  if ! printf "SET password_encryption = 'scram-sha-256';\nALTER ROLE postgres PASSWORD '%s';\n" "$pw" |
    _cb_as_owner "$bin/postgres" --single -D "$data" -c log_min_error_statement=panic postgres \
      >"$log" 2>&1 || grep -q -E 'ERROR|FATAL' "$log"; then
    grep -E 'ERROR|FATAL' "$log" >&2
    rm -f "$log" "$pwfile.new"
    _cb_say "could not set a password for role postgres in $data"
    return 1
  fi
  rm -f "$log"
  {
    printf '%s: TCP logins need the\n' "$_CB_HBA_MARK"
    printf '# password in channel_bridge.password; the socket is in this directory, which only the\n'
    printf "# cluster's owner can enter. Rewritten when that file is missing.\n"
    printf '# TYPE  DATABASE  USER  ADDRESS       METHOD\n'
    printf 'local   all       all                 trust\n'
    printf 'host    all       all   127.0.0.1/32  scram-sha-256\n'
    printf 'host    all       all   ::1/128       scram-sha-256\n'
  } >"$data/pg_hba.conf" || return 1
  _cb_chown_owner "$data/pg_hba.conf" || return 1
  mv -f "$pwfile.new" "$pwfile"
}

# _cb_private_cluster DBNAME: starts (initialising and securing if needed) the private
# cluster and exports DATABASE_URL for database DBNAME on it.
_cb_private_cluster() {
  local db=$1 data=${CB_PG_DIR:-$_CB_REPO_ROOT/.pgdata} port=${CB_PG_PORT:-55432}
  local bin version='' rc pid pidport sockdir log pwfile pw url shown secured=0 parent link
  [[ $data == /* ]] || data=$PWD/$data
  data=${data%/}

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
    parent=$(dirname "$data")
    if ! runuser -u postgres -- test -x "$parent" 2>/dev/null; then
      # A parent of the data directory is private (e.g. /root): keep the cluster where the
      # postgres user can reach it, one directory per data path, and link the path to it.
      link=$data
      if [[ -L $data ]]; then
        data=$(readlink -f "$data") || return 1
      elif [[ -e $data ]]; then
        _cb_say "the postgres user cannot reach $data (a parent directory is private);"
        _cb_say "delete it (a link to a reachable directory is made instead) or set DATABASE_URL"
        return 1
      else
        local id
        link=$data
        id=$(printf '%s' "$link" | cksum | cut -d' ' -f1) || return 1
        [[ $link != "$_CB_REPO_ROOT/.pgdata" ]] ||
          id=$(printf '%s' "$_CB_REPO_ROOT" | cksum | cut -d' ' -f1) || return 1
        mkdir -p "/var/lib/postgresql/channel-bridge/$id" || return 1
        chown postgres: /var/lib/postgresql/channel-bridge "/var/lib/postgresql/channel-bridge/$id" || return 1
        ln -s "/var/lib/postgresql/channel-bridge/$id" "$link" || return 1
        data=/var/lib/postgresql/channel-bridge/$id
      fi
      _cb_say "the postgres user cannot reach $parent: cluster data in $data (linked from $link)"
    fi
  fi
  pwfile=$data/channel_bridge.password

  if [[ ! -f $data/PG_VERSION ]]; then
    if [[ -d $data && -n $(ls -A "$data" 2>/dev/null) ]]; then
      _cb_say "$data exists but holds no cluster (PG_VERSION missing): delete it and retry"
      return 1
    fi
    mkdir -p "$data" || return 1
    chmod 700 "$data" || return 1
    _cb_chown_owner "$data" || return 1
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
  [[ -f $pwfile ]] && [[ $(head -n 1 "$data/pg_hba.conf" 2>/dev/null) == "$_CB_HBA_MARK"* ]] && secured=1

  rc=0
  pid=$(_cb_server_state "$data" "$bin") || rc=$?
  if [[ $rc -eq 2 ]]; then
    local others
    others=$(_cb_pids_in "$data")
    if [[ -n $others ]]; then
      _cb_say "$data/postmaster.pid names PID $pid, which is not its server, but PostgreSQL processes"
      _cb_say "still work in $data (PIDs $others): stop them, then run again"
      return 1
    fi
    _cb_say "$data/postmaster.pid names PID $pid, which is not this cluster's server (a stale file, e.g. after a crash): removing it"
    rm -f "$data/postmaster.pid" "$data"/.s.PGSQL.*.lock || return 1
  elif [[ $rc -eq 0 && $secured -eq 0 ]]; then
    _cb_say "the private cluster in $data has no password for TCP logins ($pwfile missing): restarting it once to set one"
    _cb_as_owner "$bin/pg_ctl" -D "$data" -w -t 60 -m fast stop >/dev/null || return 1
    rc=1
  fi

  if [[ $rc -eq 0 ]]; then
    pidport=$(sed -n 4p "$data/postmaster.pid" 2>/dev/null)
    port=${pidport:-$port}
    _cb_say "private cluster in $data already running (port $port)"
  else
    if [[ $secured -eq 0 ]]; then
      _cb_say "setting a password for TCP logins to the private cluster (kept in $pwfile)"
      _cb_secure_cluster "$data" "$bin" || return 1
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
      printf 'unix_socket_permissions = 0700\n'
      printf 'max_connections = 200\n'
    } >"$data/channel_bridge.conf" || return 1
    _cb_chown_owner "$data/channel_bridge.conf" || return 1

    _cb_say "starting private cluster in $data on 127.0.0.1:$port (log: $data/server.log)"
    if ! _cb_as_owner "$bin/pg_ctl" -D "$data" -w -t 60 -l "$data/server.log" start >/dev/null; then
      _cb_say "pg_ctl start failed; last lines of $data/server.log:"
      tail -n 20 "$data/server.log" >&2 2>/dev/null
      return 1
    fi
  fi

  pw=$(<"$pwfile") || return 1
  url="postgres://postgres:$pw@127.0.0.1:$port/$db"
  shown="postgres://postgres:***@127.0.0.1:$port/$db"
  rc=0
  _cb_login "postgres://postgres:$pw@127.0.0.1:$port/postgres" || rc=$?
  case $rc in
    0 | 3) ;;
    1)
      _cb_say "the private cluster on 127.0.0.1:$port refuses the password in $pwfile: $_cb_why"
      _cb_say "delete that file and run again (a new password is set; the cluster restarts)"
      return 1
      ;;
    *)
      _cb_say "private cluster started but 127.0.0.1:$port does not answer (see $data/server.log)"
      return 1
      ;;
  esac
  export DATABASE_URL=$url
  _cb_say "using the private cluster: $shown (password in $pwfile)"
}

ensure_database() {
  local db=${1:-${CB_DB_NAME:-channel_bridge}} local_port=${CB_LOCAL_PG_PORT:-5432}
  local _cb_host _cb_port _cb_user _cb_pass _cb_db _cb_sslmode _cb_why shown rc why

  if [[ -n ${DATABASE_URL:-} ]]; then
    if ! _cb_parse_url "$DATABASE_URL"; then
      _cb_say "DATABASE_URL is not a postgres:// URL; using it unchecked"
      export DATABASE_URL
      return 0
    fi
    shown=$(_cb_url_edit "$DATABASE_URL" redact)
    rc=0
    _cb_login "$DATABASE_URL" || rc=$?
    if [[ $rc -eq 1 && $_cb_db != postgres ]]; then
      # Maybe only the database is missing (migrate creates it): does the login itself work?
      why=$_cb_why
      _cb_login "$(_cb_url_edit "$DATABASE_URL" keep postgres)" && rc=4
      _cb_why=$why
    fi
    case $rc in
      0) _cb_say "using DATABASE_URL: $shown" ;;
      3) _cb_say "using DATABASE_URL: $shown (the server answers; $_cb_why)" ;;
      4) _cb_say "using DATABASE_URL: $shown (logs in to database postgres; $_cb_db: $_cb_why)" ;;
      2)
        _cb_say "DATABASE_URL is set, but no PostgreSQL server answers at $_cb_host:$_cb_port ($_cb_why): $shown"
        _cb_say "start that server, correct DATABASE_URL, or unset it to let the scripts choose a server"
        return 1
        ;;
      *)
        _cb_say "DATABASE_URL is set, but the server at $_cb_host:$_cb_port refuses the login ($_cb_why): $shown"
        _cb_say "correct DATABASE_URL (user, password, database), or unset it to let the scripts choose a server"
        return 1
        ;;
    esac
    export DATABASE_URL
    return 0
  fi

  rc=0
  _cb_login "postgres://postgres@127.0.0.1:$local_port/postgres" || rc=$?
  case $rc in
    0)
      export DATABASE_URL="postgres://postgres@127.0.0.1:$local_port/$db"
      _cb_say "using the local server on 127.0.0.1:$local_port: $DATABASE_URL"
      return 0
      ;;
    2) _cb_say "DATABASE_URL unset and nothing answers on 127.0.0.1:$local_port; using the private cluster" ;;
    *) _cb_say "the server on 127.0.0.1:$local_port refuses a passwordless login as postgres ($_cb_why); using the private cluster (set DATABASE_URL to use that server)" ;;
  esac
  _cb_private_cluster "$db"
}
