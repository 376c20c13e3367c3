#!/usr/bin/env bash
# bench/objects.sh — the small-objects benchmark (issue 17): shardcast's
# object-set sources (s3://bucket/prefix/?objects=N) against the loader a
# PyTorch user writes for small objects (DataLoader workers GETting with
# boto3) and against parallel curl of the same objects (the ceiling), all
# from s3rver on 127.0.0.1.
#
#   bench/objects.sh           full run: 10,000 samples = 20,000 objects
#                              (~1 GB), W = 4 and 16, ?objects=100 and 1000,
#                              3 alternating runs, a perf profile of
#                              shardcastd; results in
#                              bench/results/objects-<date>/ (~40 minutes on
#                              2 cores)
#   bench/objects.sh --quick   300 samples, W = 2, one run (~40 s; the smoke
#                              test tests/bench/test_objects_smoke.py)
#
# Steps: install what is missing (scripts/deps.sh, bench/deps.sh, s3rver),
# build into build/ (scripts/build.sh), then bench/objects.py (see its
# --help), niced by 10: the machine may be shared. Other options go to
# bench/objects.py, plus:
#   --skip-deps    do not install packages
#   --skip-build   use the binaries already in --build (default build/)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main objects.sh objects.py 10 "$@"
