#!/usr/bin/env bash
# bench/thin.sh — staged shards thinned while they are read: a shuffle
# buffer spanning many shards and a staging budget below the dataset,
# over the HTTP store (bench/thin.py). About 3 minutes on 2 cores per
# tree and run; results in bench/results/thin/. Options as bench/run.sh
# (--skip-deps, --skip-build, --build, --quick) plus bench/thin.py's
# (--other-build, --runs, --shapes, --out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main thin.sh thin.py 0 "$@"
