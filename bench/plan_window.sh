#!/usr/bin/env bash
# An epoch of 10^8 samples planned with a window, over a synthetic index
# (metadata only): the index's memory per sample, a fresh plan's time to a
# reader at 90%, what the plan holds, a resume behind the window.
# Usage: bench/plan_window.sh [BUILD_DIR] [SAMPLES] [SHUFFLE_BUFFER]
# (BUILD_DIR: a built tree, default build/; writes nothing but stdout)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
samples=${2:-100000000}
buffer=${3:-10000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -std=gnu11 -I "$root/include" -I "$root/shardio" -I "$build/include" \
  "$root/bench/plan_window.c" -Wl,--start-group "$build/libshardio.a" \
  "$build/libshardcast_wire.a" -Wl,--end-group \
  $(pkg-config --libs libcurl openssl libarchive libxml-2.0 jansson libzstd zlib) \
  -lpthread -lm -o "$out/plan_window"
echo "tree $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, $(date -u +%Y-%m-%d)"
"$out/plan_window" "$samples" "$buffer"
