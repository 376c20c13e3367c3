#!/usr/bin/env bash
# bench/steady.sh — the steady state of a long-running server: one
# shardcastd per (shape, W, variant) reads several epochs in turn; medians
# of the server's CPU per sample, page faults and samples/s over the epochs
# after the first two (bench/steady.py). About 3 minutes on 2 cores;
# results in bench/results/steady/. Options as bench/run.sh (--skip-deps,
# --skip-build, --build, --quick) plus bench/steady.py's (--epochs,
# --repeat, --workers, --out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main steady.sh steady.py 0 "$@"
