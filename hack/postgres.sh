#!/usr/bin/env bash
# Starts and stops a throwaway PostgreSQL server for tests and demos.
#   hack/postgres.sh start DIR [PORT]   initdb (once) and start; prints the DSN
#   hack/postgres.sh stop DIR
#   hack/postgres.sh dsn DIR
# PostgreSQL refuses to run as root, so as root it runs as the `postgres` user.
# Trust authentication on 127.0.0.1 only; the unix socket lives inside DIR.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

bindir() {
  local d
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir; return
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  die "no PostgreSQL server binaries found: install them (apt-get install postgresql)"
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start|stop|dsn DIR [PORT]"
BIN=$(bindir)

case "$cmd" in
start)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "user 'postgres' does not exist: install PostgreSQL from Debian's packages, or create the user"
    chown postgres "$dir"
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_pg "$BIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
      || die "initdb failed; see $dir/initdb.log"
  fi
  port=${3:-$(cat "$dir/port" 2>/dev/null || free_port)}
  echo "$port" >"$dir/port"
  if ! as_pg "$BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    as_pg "$BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=300" start >/dev/null \
      || die "PostgreSQL did not start; see $dir/postgres.log"
  fi
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  ;;
stop)
  [ -d "$dir/data" ] || exit 0
  as_pg "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  ;;
dsn)
  [ -f "$dir/port" ] || die "no server in $dir: run '$0 start $dir' first"
  echo "postgres://postgres@127.0.0.1:$(cat "$dir/port")/postgres?sslmode=disable"
  ;;
*)
  die "unknown command $cmd: use start, stop or dsn"
  ;;
esac
