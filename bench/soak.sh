#!/usr/bin/env bash
# soak.sh — the hardening soak benchmark (not in CI): 16 consumers stream an
# epoch quietly, then again while 1,000 idle connections, an epoch-opening
# loop and random hostile requests hit the same server. Prints JSON:
# exactly-once and throughput of both runs, the server's peak RSS and
# threads, and the bound counters. See bench/soak.py for the options.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec /usr/bin/python3 "$ROOT/bench/soak.py" --build "${SHARDCAST_BUILD:-$ROOT/build}" "$@"
