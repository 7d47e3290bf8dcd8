#!/usr/bin/env bash
# An HA deployment on one machine, for trying muster out: PostgreSQL, three
# muster-servers on 127.0.0.1, 127.0.0.2 and 127.0.0.3 sharing it and one
# server token, and agents joined through the first server.
#   hack/ha.sh start [DIR] [AGENTS]   (default DIR ./muster-ha, AGENTS 3)
#   hack/ha.sh stop [DIR]
#   hack/ha.sh status [DIR]
# Linux routes all of 127.0.0.0/8 to loopback, so no setup is needed.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
cmd=${1:-start}
dir=${2:-muster-ha}
agents=${3:-3}
# The servers' port: HA_PORT=9544 make ha runs beside another server on 9443.
port=${HA_PORT:-9443}
SERVER="$ROOT/bin/muster-server"
AGENT="$ROOT/bin/muster-agent"

die() { echo "ha.sh: $*" >&2; exit 1; }

server_up() {
  local i=$1
  for _ in $(seq 1 100); do
    curl -skf "https://127.0.0.$i:$port/readyz" >/dev/null 2>&1 && return 0
    sleep 0.3
  done
  return 1
}

case "$cmd" in
start)
  [ -x "$SERVER" ] && [ -x "$AGENT" ] || die "build first: make build"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # PostgreSQL runs as the postgres user and must reach its directory.
  chmod 0755 "$dir"
  dsn=$(hack/postgres.sh start "$dir/postgres")
  [ -f "$dir/token" ] || (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token")
  for i in 1 2 3; do
    [ -f "$dir/server$i.pid" ] && kill -0 "$(cat "$dir/server$i.pid")" 2>/dev/null && continue
    MUSTER_TOKEN=$(cat "$dir/token") nohup "$SERVER" --data-dir "$dir/server$i" \
      --bind-address "127.0.0.$i" --advertise-address "127.0.0.$i" --https-port "$port" \
      --datastore-endpoint "$dsn" >"$dir/server$i.log" 2>&1 &
    echo $! >"$dir/server$i.pid"
    # The first server seals the CA; the others start once it is there.
    [ "$i" = 1 ] && { server_up 1 || die "server 1 did not become ready; see $dir/server1.log"; }
  done
  for i in 2 3; do server_up "$i" || die "server $i did not become ready; see $dir/server$i.log"; done
  "$SERVER" --data-dir "$dir/server1" kubeconfig --output "$dir/admin.kubeconfig"
  # The join token goes to the agents in a 0600 file, never on their command lines.
  (umask 077; "$SERVER" --data-dir "$dir/server1" token create --ttl 1h 2>/dev/null | tail -1 >"$dir/join-token")
  for n in $(seq 1 "$agents"); do
    [ -f "$dir/agent$n.pid" ] && kill -0 "$(cat "$dir/agent$n.pid")" 2>/dev/null && continue
    nohup "$AGENT" --server "https://127.0.0.1:$port" --token-file "$dir/join-token" --node-name "ha-agent-$n" \
      --data-dir "$dir/agent$n" >"$dir/agent$n.log" 2>&1 &
    echo $! >"$dir/agent$n.pid"
  done
  cat <<MSG
HA deployment running in $dir:
  PostgreSQL   $dsn
  servers      https://127.0.0.1:$port https://127.0.0.2:$port https://127.0.0.3:$port (logs: $dir/server*.log)
  agents       $agents (logs: $dir/agent*.log)
Try:
  export KUBECONFIG=$dir/admin.kubeconfig
  kubectl get serverendpoints,controllerleases,machines
  kubectl --server https://127.0.0.2:$port get machines     # the same admin identity on every server
  kill -9 \$(cat $dir/server1.pid)                             # agents fail over; another server leads
Stop with: hack/ha.sh stop $dir
MSG
  ;;
stop)
  [ -d "$dir" ] || exit 0
  for f in "$dir"/agent*.pid "$dir"/server*.pid; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  sleep 3
  hack/postgres.sh stop "$dir/postgres"
  ;;
status)
  for f in "$dir"/server*.pid "$dir"/agent*.pid; do
    [ -f "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then s=running; else s=dead; fi
    echo "$(basename "$f" .pid): $s"
  done
  ;;
*) die "usage: $0 start|stop|status [DIR] [AGENTS]" ;;
esac
