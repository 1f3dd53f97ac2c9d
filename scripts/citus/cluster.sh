#!/usr/bin/env bash
# A local 3-node Citus cluster (coordinator + 2 workers) on PostgreSQL 15, for scripts/test-citus
# and trials (docs/citus.md, "The test cluster").
#
#   cluster.sh start   DIR [PORT_C PORT_W1 PORT_W2]   initdb (first time) and start the nodes
#   cluster.sh stop    DIR                            pg_ctl stop (fast) every node in DIR
#   cluster.sh status  DIR
#   cluster.sh createdb DIR DBNAME                    create DBNAME on every node with the
#                                                     citus extension; workers added from the
#                                                     coordinator (idempotent)
#   cluster.sh dropdb  DIR DBNAME                     drop it on every node
#
# Ports default to 9700 9701 9702; they are remembered in DIR/ports. Nodes live in DIR/c,
# DIR/w1, DIR/w2 with logs DIR/{c,w1,w2}.log. Everything runs as the OS user `postgres`
# (via runuser when started as root). Listens on 127.0.0.1 only, trust auth for
# 127.0.0.1 and the local socket (a trial cluster: never expose it).
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGUSER_OS=${PGUSER_OS:-postgres}
NODES=(c w1 w2)

as_pg() {
    if [ "$(id -un)" = "$PGUSER_OS" ]; then "$@"; else runuser -u "$PGUSER_OS" -- "$@"; fi
}

usage() { sed -n '2,17p' "$0" >&2; exit 2; }

[ $# -ge 2 ] || usage
cmd=$1; dir=$2; shift 2

ports_of() {
    if [ -f "$dir/ports" ]; then cat "$dir/ports"; else echo "9700 9701 9702"; fi
}

psql_node() { # port db sql...
    local port=$1 db=$2; shift 2
    as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"
}

case "$cmd" in
start)
    ports=("${1:-9700}" "${2:-9701}" "${3:-9702}")
    if [ -f "$dir/ports" ] && [ "$(cat "$dir/ports")" != "${ports[*]}" ] && [ $# -gt 0 ]; then
        echo "DIR $dir was initialised with ports $(cat "$dir/ports")" >&2; exit 1
    fi
    [ -f "$dir/ports" ] && read -r -a ports < "$dir/ports"
    mkdir -p "$dir"; chown "$PGUSER_OS" "$dir"
    echo "${ports[*]}" > "$dir/ports"
    for i in 0 1 2; do
        n=${NODES[$i]}; p=${ports[$i]}; d="$dir/$n"
        if [ ! -f "$d/PG_VERSION" ]; then
            as_pg "$PGBIN/initdb" -D "$d" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
            cat >> "$d/postgresql.conf" <<EOF
# citus trial
listen_addresses = '127.0.0.1'
port = $p
unix_socket_directories = '$dir'
shared_preload_libraries = 'citus'
autovacuum = on
max_connections = 300
log_line_prefix = '%m [%p] %q%u@%d '
log_min_error_statement = error
EOF
            cat > "$d/pg_hba.conf" <<EOF
local all all trust
host  all all 127.0.0.1/32 trust
EOF
        fi
        if as_pg "$PGBIN/pg_ctl" -D "$d" status >/dev/null 2>&1; then
            echo "$n already running on $p"
        else
            as_pg "$PGBIN/pg_ctl" -D "$d" -l "$dir/$n.log" -w -t 60 start >/dev/null
            echo "$n started on 127.0.0.1:$p"
        fi
    done
    ;;
stop)
    for n in "${NODES[@]}"; do
        d="$dir/$n"
        if [ -f "$d/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$d" status >/dev/null 2>&1; then
            as_pg "$PGBIN/pg_ctl" -D "$d" -m fast -w stop >/dev/null && echo "$n stopped"
        fi
    done
    ;;
status)
    for n in "${NODES[@]}"; do as_pg "$PGBIN/pg_ctl" -D "$dir/$n" status | head -1 || true; done
    ;;
createdb)
    db=${1:?DBNAME}
    read -r -a ports <<< "$(ports_of)"
    for p in "${ports[@]}"; do
        if [ -z "$(psql_node "$p" postgres -tAc "select 1 from pg_database where datname='$db'")" ]; then
            psql_node "$p" postgres -c "create database \"$db\""
        fi
        psql_node "$p" "$db" -c "create extension if not exists citus"
    done
    psql_node "${ports[0]}" "$db" -c "select citus_set_coordinator_host('127.0.0.1', ${ports[0]})"
    for p in "${ports[1]}" "${ports[2]}"; do
        psql_node "${ports[0]}" "$db" -tAc "select citus_add_node('127.0.0.1', $p)
            where not exists (select 1 from pg_dist_node where nodename='127.0.0.1' and nodeport=$p)" >/dev/null
    done
    psql_node "${ports[0]}" "$db" -c "select nodeid, nodename, nodeport, noderole, isactive from pg_dist_node order by nodeid"
    ;;
dropdb)
    db=${1:?DBNAME}
    read -r -a ports <<< "$(ports_of)"
    for p in "${ports[@]}"; do psql_node "$p" postgres -c "drop database if exists \"$db\" with (force)"; done
    ;;
*) usage ;;
esac
