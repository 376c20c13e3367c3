#!/usr/bin/env bash
# bench/samples.sh — map-style access: GET /samples/{i} at random i over
# one kept-alive connection, a connection each, and the Python client's
# ShardcastMapDataset (bench/samples.py). About a minute per tree on 2
# cores; results in bench/results/samples/. Options as bench/run.sh
# (--skip-deps, --skip-build, --build, --quick) plus bench/samples.py's
# (--other-build, --runs, --requests, --shapes, --out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main samples.sh samples.py 0 "$@"
