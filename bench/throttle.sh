#!/usr/bin/env bash
# bench/throttle.sh — the throttled-store benchmark (issue 14), from a fresh
# Debian 12 machine.
#
#   bench/throttle.sh           full run: 4 nodes x 8 DataLoader workers,
#                               3 epochs, 2 concurrent jobs and a sweep of the
#                               store's request rate, baseline (boto3) against
#                               shardcast with the cache off and on, 3
#                               alternating rounds; results in
#                               bench/results/throttle-<date>/
#   bench/throttle.sh --quick   tiny dataset, 2 x 2 workers, one round (what
#                               the smoke test runs); results in
#                               build/throttle-quick/<date>/
#
# Steps: install what is missing (scripts/deps.sh, bench/deps.sh, s3rver),
# build into build/ (scripts/build.sh), then bench/throttle/throttle.py,
# which generates the dataset (cached in build/throttle-data/), starts
# s3rver and the token-bucket proxy (bench/throttle/tbproxy.py) on
# 127.0.0.1, runs the contenders and writes results.json and results.md.
# Everything runs under
# nice -n 10. Other options go to throttle.py (see its --help), plus:
#   --skip-deps    do not install packages (the smoke test uses this)
#   --skip-build   use the binaries already in --build (default build/)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main throttle.sh throttle/throttle.py 10 "$@"
