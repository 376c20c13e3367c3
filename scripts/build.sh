#!/usr/bin/env bash
# build.sh [DIR] [cmake options...] — configure and build shardcast.
# Default DIR is build/ at the repository root.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$ROOT/build}"
shift || true
cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$DIR" -j"$(nproc)"
