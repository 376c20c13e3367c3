#!/usr/bin/env bash
# run.sh — benchmark of the epoch engine alone on local shards (no HTTP):
# samples/s and MB/s for ~1 KiB and ~100 KiB samples, against the raw speed
# of reading the same bytes with cat and with libarchive. Writes
# bench/engine/results.json and results.md. Usage: bench/engine/run.sh [RUNS]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
"$ROOT/scripts/deps.sh"
"$ROOT/scripts/build.sh" "$ROOT/build"
exec /usr/bin/python3 "$ROOT/bench/engine/engine_bench.py" --build "$ROOT/build" \
  --runs "${1:-3}" --out "$ROOT/bench/engine"
