#!/usr/bin/env bash
# bench/run.sh — shardcast's benchmark, from a fresh Debian 12 machine.
#
#   bench/run.sh            full run: two dataset shapes, W = 1, 4, 16, 64,
#                           every contender, 3 alternating runs; results in
#                           bench/results/<date>/ and a copy in
#                           bench/results/latest/ (about 25 minutes on 2 cores)
#   bench/run.sh --quick    tiny datasets, W = 2, one run (under a minute);
#                           results in build/bench-quick/<date>/
#
# Steps: install what is missing (scripts/deps.sh, bench/deps.sh, s3rver),
# build into build/ (scripts/build.sh), then bench/bench.py, which generates
# the datasets (cached in build/bench-data/), starts nginx, s3rver and the
# counting proxy on 127.0.0.1, runs the contenders and writes results.json,
# results.md and results.png. Other options are passed to bench/bench.py
# (see bench/bench.py --help), plus:
#   --skip-deps    do not install packages (the smoke test uses this)
#   --skip-build   use the binaries already in --build (default build/)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main run.sh bench.py 0 "$@"
