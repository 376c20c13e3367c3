#!/usr/bin/env bash
# bench/late_world.sh — a world that comes after the others let go of
# every shard, and five worlds at once, over the HTTP store
# (bench/late_world.py). About 2 minutes on 2 cores per tree; results in
# bench/results/late-world/. Options as bench/run.sh (--skip-deps,
# --skip-build, --build, --quick) plus bench/late_world.py's
# (--other-build, --runs, --shapes, --out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main late_world.sh late_world.py 0 "$@"
