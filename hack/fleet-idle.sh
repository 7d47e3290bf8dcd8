#!/usr/bin/env bash
# fleet-idle.sh: what an idle fleet costs a muster-server binary. Starts it on
# a fresh SQLite data dir, joins COUNT simulated agents (`muster-agent
# simulate` in its own process: each with its connection, plan watch,
# heartbeats and tunnel), then prints the server's RSS and CPU over four
# 30-second windows after the last join.
#
#   hack/fleet-idle.sh SERVER [COUNT] [simulate flags...]
#   e.g. hack/fleet-idle.sh bin/muster-server 5000
#        hack/fleet-idle.sh bin/muster-server 5000 --no-tunnels
set -euo pipefail
server=$1 count=${2:-5000}
shift $(($# < 2 ? $# : 2))
agent=${MUSTER_AGENT_BIN:-bin/muster-agent}
port=${PORT:-19653}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

"$server" --data-dir "$work/data" --https-port "$port" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 >"$work/server.log" 2>&1 &
pid=$!
until curl -sfk "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do kill -0 "$pid" || { cat "$work/server.log"; exit 1; }; sleep 0.2; done
(umask 077; "$server" token create --data-dir "$work/data" >"$work/token")
"$agent" simulate --server "https://127.0.0.1:$port" --token-file "$work/token" --count "$count" --concurrency 100 "$@" >"$work/sim.log" 2>&1 &
sim=$!
until grep -q "joined $count/$count" "$work/sim.log"; do
  if ! kill -0 "$sim" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; then tail "$work/sim.log" "$work/server.log"; exit 1; fi
  sleep 1
done
ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
line=""
for t in 30 60 90 120; do
  c0=$(ticks); sleep 30; c1=$(ticks)
  rss=$(awk '/VmRSS/{print int($2/1024)}' "/proc/$pid/status")
  line="$line ${t}s: $rss MiB, $(awk -v d=$((c1 - c0)) -v hz="$hz" 'BEGIN{printf "%.2f", d/hz/30}') cores;"
done
echo "$count agents $*, after the last join:$line"
