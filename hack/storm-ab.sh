#!/usr/bin/env bash
# storm-ab.sh: an interleaved A/B of the registration storm rate of two
# muster-server binaries (A, B, A, B, ...), each run on a fresh SQLite data
# dir, scraped every second on /metrics as Prometheus would, with
# `muster-agent simulate` joining COUNT agents. Timings on a shared machine
# are noisy: interleaving spreads the noise over both.
#
#   hack/storm-ab.sh A_SERVER B_SERVER [ROUNDS] [COUNT] [CONCURRENCY]
#   e.g. hack/storm-ab.sh /tmp/base-server bin/muster-server 3 500 100
set -euo pipefail
a=$1 b=$2 rounds=${3:-3} count=${4:-500} concurrency=${5:-100}
agent=${MUSTER_AGENT_BIN:-bin/muster-agent}
port=${PORT:-19643}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

run() { # run LABEL BINARY
  local label=$1 bin=$2 dir="$work/$1-$RANDOM"
  "$bin" --data-dir "$dir" --https-port "$port" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 >"$dir.log" 2>&1 &
  local pid=$!
  until curl -sfk "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do kill -0 "$pid" || { cat "$dir.log"; exit 1; }; sleep 0.2; done
  (while kill -0 "$pid" 2>/dev/null; do
     curl -sf --cacert "$dir/tls/ca.crt" --cert "$dir/tls/admin.crt" --key "$dir/tls/admin.key" \
       "https://127.0.0.1:$port/metrics" >/dev/null 2>&1 || true
     sleep 1
   done) &
  local scraper=$!
  (umask 077; "$bin" token create --data-dir "$dir" >"$dir.token")
  "$agent" simulate --server "https://127.0.0.1:$port" --token-file "$dir.token" \
    --count "$count" --concurrency "$concurrency" >"$dir.sim" 2>&1 &
  local sim=$! deadline=$((SECONDS + 300))
  until grep -q 'join latency' "$dir.sim" || ! kill -0 "$sim" 2>/dev/null || [ $SECONDS -gt $deadline ]; do sleep 0.5; done
  kill "$sim" 2>/dev/null || true
  wait "$sim" 2>/dev/null || true
  kill "$pid" "$scraper" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "$label: $(grep -E 'joined|latency' "$dir.sim" | tr '\n' ' ')"
}

for _ in $(seq "$rounds"); do
  run A "$a"
  run B "$b"
done
