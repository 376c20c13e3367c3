#!/usr/bin/env bash
# bench/python_planes.sh — the Python readers (ShardcastDataset in a torch
# DataLoader, every sample verified) on both data planes, shards in the
# server's cache: --data-plane stream against auto (bench/python_planes.py).
# A few minutes per shape on 2 cores; results in
# bench/results/planes-python/. Options as bench/run.sh (--skip-deps,
# --skip-build, --build, --quick) plus bench/python_planes.py's (--shape,
# --workers, --epochs, --rounds, --data, --out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

. "$ROOT/bench/prepare.sh"
bench_main python_planes.sh python_planes.py 0 "$@"
