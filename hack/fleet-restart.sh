#!/usr/bin/env bash
# fleet-restart.sh: how fast a fleet comes back after its server is killed.
# Starts SERVER on a fresh SQLite data dir, joins SIMS x COUNT simulated agents
# (each `muster-agent simulate` process its own; one process of 10,000 runs
# out of file descriptors while reconnecting), waits until the server counts
# every agent connected, idles 60 s, kill -9s the server, starts it again with
# the same flags, and reads /metrics once a second for WATCH seconds. It
# prints, from the restart: when every agent was heard again (heartbeats),
# when every plan watch and every tunnel was open again, the server's RSS
# peak and its CPU.
#
#   [PROFILE=cpu.pprof] hack/fleet-restart.sh SERVER [COUNT] [SIMS] [WATCH]
#   e.g. hack/fleet-restart.sh bin/muster-server 5000 2 240
set -euo pipefail
server=$1 count=${2:-5000} sims=${3:-1} watch=${4:-240}
agent=${MUSTER_AGENT_BIN:-bin/muster-agent}
port=${PORT:-19663}
total=$((count * sims))
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

start() {
  "$server" --data-dir "$work/data" --https-port "$port" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 >>"$work/server.log" 2>&1 &
  pid=$!
}
# gauges prints: connected tunnels plan-watches 429s
gauges() {
  curl -sf --max-time 5 --cacert "$work/data/tls/ca.crt" --cert "$work/data/tls/admin.crt" --key "$work/data/tls/admin.key" \
    "https://127.0.0.1:$port/metrics" 2>/dev/null | awk '
    /^muster_agents_connected /{c=$2}
    /^muster_tunnels_open /{t=$2}
    /^apiserver_longrunning_requests\{/ && /resource="machineplans"/ && /verb="WATCH"/{w+=$2}
    /^apiserver_request_total\{/ && /code="429"/{r+=$2}
    END{if (c == "") exit 1; printf "%d %d %d %d\n", c, t, w, r}'
}
rss() { awk '/VmRSS/{print int($2/1024)}' "/proc/$pid/status"; }
ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)

start
until curl -sfk "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do kill -0 "$pid"; sleep 0.2; done
(umask 077; "$server" token create --data-dir "$work/data" >"$work/token")
began=$SECONDS
for s in $(seq "$sims"); do
  "$agent" simulate --server "https://127.0.0.1:$port" --token-file "$work/token" --count "$count" \
    --concurrency 100 --prefix "s$s" >"$work/sim$s.log" 2>&1 &
done
until [ "$(gauges | cut -d' ' -f1)" = "$total" ]; do sleep 2; [ $((SECONDS - began)) -lt 1200 ] || { echo "not all joined in 20 min"; exit 1; }; done
echo "joined and connected: $total agents in $((SECONDS - began)) s"
c0=$(ticks); sleep 60; c1=$(ticks)
idle=$(rss)
echo "idle: $idle MiB RSS, $(awk -v d=$((c1 - c0)) -v hz="$hz" 'BEGIN{printf "%.2f", d/hz/60}') cores"

kill -9 "$pid"; wait "$pid" 2>/dev/null || true
t0=$(date +%s.%N)
start
peak=0 heard="" watches="" tunnels="" r0="" answered="" profiling=""
cpu0=$(ticks)
while [ "$(awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN{print int(now - t0)}')" -lt "$watch" ]; do
  r=$(rss); [ "${r:-0}" -gt "$peak" ] && peak=$r
  if g=$(gauges); then
    read -r c t w n <<<"$g"
    at=$(awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN{printf "%.1f", now - t0}')
    r0=${r0:-$n}
    if [ -z "$answered" ]; then
      answered=$at
      if [ -n "${PROFILE:-}" ]; then # a 20 s CPU profile from the moment the server answers
        curl -sf --cacert "$work/data/tls/ca.crt" --cert "$work/data/tls/admin.crt" --key "$work/data/tls/admin.key" \
          "https://127.0.0.1:$port/debug/pprof/profile?seconds=20" -o "$PROFILE" &
        profiling=$!
      fi
    fi
    [ -z "$heard" ] && [ "$c" -ge "$total" ] && heard=$at
    [ -z "$watches" ] && [ "$w" -ge "$total" ] && watches=$at
    [ -z "$tunnels" ] && [ "$t" -ge "$total" ] && tunnels=$at
    echo "$at s: connected $c, watches $w, tunnels $t, 429s $((n - r0))" >>"$work/restart.log"
    [ -n "$heard" ] && [ -n "$watches" ] && [ -n "$tunnels" ] && break
  fi
  sleep 1
done
cpu=$(awk -v d=$(($(ticks) - cpu0)) -v hz="$hz" -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN{printf "%.2f", d/hz/(now - t0)}')
echo "restart -> the server answers /metrics: ${answered:-never} s"
echo "restart -> every agent heard: ${heard:-not within ${watch} s} s; every plan watch: ${watches:-not within ${watch} s} s; every tunnel: ${tunnels:-not within ${watch} s} s"
echo "restart: RSS peak $peak MiB ($(awk -v p="$peak" -v i="$idle" 'BEGIN{printf "%.2f", p/i}')x idle), $cpu cores on average"
for s in $(seq "$sims"); do grep -h "timed out\|errors" "$work/sim$s.log" | tail -2; done
awk 'NR <= 3 || NR % 10 == 0' "$work/restart.log"; tail -1 "$work/restart.log"
if [ -n "$profiling" ]; then wait "$profiling" && echo "CPU profile: $PROFILE" || echo "no CPU profile"; fi
