#!/usr/bin/env bash
# profile_plane.sh SHAPE MODE W [OUT] — where a server's time goes on one
# data plane: a shardcastd on the local shards of the bench dataset SHAPE
# (build/bench-data/datasets/SHAPE, made by bench/steady.sh or run.sh)
# with --data-plane MODE (auto | stream) reads epoch 0 (which indexes the
# shards), then `perf record -g` follows it while `shardcast bench -n W`
# reads epochs 1-3. Prints each epoch's throughput, the server's CPU ticks,
# and writes OUT (default perf-SHAPE-MODE.data) for `perf report`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${SHARDCAST_BUILD:-$ROOT/build}"
DS="$BUILD/bench-data/datasets/$1"
MODE="$2"
W="$3"
OUT="${4:-perf-$1-$MODE.data}"
[ -d "$DS" ] || { echo "no dataset $DS (run bench/steady.sh --quick first)" >&2; exit 2; }
SD="$(mktemp -d)"
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$SD"' EXIT
"$BUILD/shardcastd" --listen 127.0.0.1 --port 0 --job j --source "$DS" \
  --state-dir "$SD/state" --data-plane "$MODE" --shuffle-buffer 1000 \
  >"$SD/out" 2>"$SD/err" &
PID=$!
for _ in $(seq 100); do grep -q listening "$SD/out" 2>/dev/null && break; sleep 0.1; done
URL="http://$(grep -o 'listening=[^ ]*' "$SD/out" | cut -d= -f2)"
"$BUILD/shardcast" bench --server "$URL" --job j --epoch 0 -n "$W" >/dev/null
C0=$(awk '{print $14+$15}' "/proc/$PID/stat")
perf record -F 2000 -g -p "$PID" -o "$OUT" -- sleep 1000 2>/dev/null &
PP=$!
for e in 1 2 3; do
  "$BUILD/shardcast" bench --server "$URL" --job j --epoch "$e" -n "$W" 2>&1 |
    grep -E 'throughput' | head -1
done
kill -INT "$PP"
wait "$PP" 2>/dev/null || true
C1=$(awk '{print $14+$15}' "/proc/$PID/stat")
echo "server cpu ticks (1/$(getconf CLK_TCK) s) over epochs 1-3: $((C1 - C0))"
