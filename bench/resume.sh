#!/usr/bin/env bash
# bench/resume.sh — both ranks of world 2 resume at 90% of an epoch over
# the HTTP store: plain tars on a restarted server, gzipped shards on the
# same server and on a restarted one (bench/resume.py). A few minutes per
# tree on 2 cores; results in bench/results/resume/. Options as
# bench/run.sh (--skip-deps, --skip-build, --build, --quick) plus
# bench/resume.py's (--other-build, --runs, --shapes, --cases, --out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main resume.sh resume.py 0 "$@"
