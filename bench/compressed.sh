#!/usr/bin/env bash
# compressed.sh DIR [W] [REPEAT] — tar.gz shards (DIR) read by W consumers
# from a fresh shardcastd, epochs 0-2: the feed (--data-plane stream)
# against the plan over staging (--stage-bytes 4GiB: each shard
# decompressed once per epoch into memory), alternating, REPEAT times.
# Prints samples/s per epoch and the server's CPU ticks per epoch.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${SHARDCAST_BUILD:-$ROOT/build}"
DS="$1"
W="${2:-4}"
REPEAT="${3:-3}"
[ -d "$DS" ] || { echo "no dataset $DS" >&2; exit 2; }
run() {
  local name="$1"; shift
  local sd; sd="$(mktemp -d)"
  "$BUILD/shardcastd" --listen 127.0.0.1 --port 0 --job j --source "$DS" \
    --state-dir "$sd/state" --prefetch false "$@" >"$sd/out" 2>"$sd/err" &
  local pid=$!
  for _ in $(seq 100); do grep -q listening "$sd/out" 2>/dev/null && break; sleep 0.1; done
  local url="http://$(grep -o 'listening=[^ ]*' "$sd/out" | cut -d= -f2)"
  local line="$name"
  for e in 0 1 2; do
    local c0; c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
    local tp; tp=$("$BUILD/shardcast" bench --server "$url" --job j --epoch "$e" -n "$W" 2>&1 |
      awk '/^throughput/ {print $2; exit}')
    local c1; c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
    line="$line  e$e ${tp} samples/s $((c1 - c0)) ticks"
  done
  echo "$line"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$sd"
}
echo "dataset $DS, W=$W, $(nproc) CPUs, tree $(git -C "$ROOT" rev-parse --short HEAD)"
for i in $(seq "$REPEAT"); do
  run feed --data-plane stream
  run plan --stage-bytes 4GiB
done
