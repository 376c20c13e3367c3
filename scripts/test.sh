#!/usr/bin/env bash
# test.sh — the whole shardcast test suite, from a fresh Debian 12 machine.
#
#  1. installs missing Debian packages (scripts/deps.sh) and s3rver (npm);
#  2. builds with warnings as errors into build/ and runs ctest;
#  3. builds with AddressSanitizer + UBSan into build-asan/ and runs ctest;
#  4. runs the Python suites with pytest against the build/ binaries, and
#     the server integration suite again against the sanitizer build.
# Exit status is non-zero when anything fails, including a pytest run that
# collected no tests (pytest exit code 5).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
JOBS="$(nproc)"

"$ROOT/scripts/deps.sh"
"$ROOT/scripts/s3rver-install.sh" >/dev/null
# npm tools of the Kubernetes manifest tests (schema validator, TypeScript)
"$ROOT/tests/k8s/install.sh" >/dev/null

echo "== build (warnings as errors)"
"$ROOT/scripts/build.sh" "$ROOT/build" -DSHARDCAST_WERROR=ON
echo "== ctest"
(cd "$ROOT/build" && ctest --output-on-failure -j"$JOBS")

echo "== build (ASan + UBSan)"
"$ROOT/scripts/build.sh" "$ROOT/build-asan" -DSHARDCAST_WERROR=ON \
  -DSHARDCAST_SANITIZE=ON
echo "== ctest (ASan + UBSan)"
(cd "$ROOT/build-asan" && \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j"$JOBS")

run_pytest() {
  local rc=0
  "$PY" -m pytest -q -p no:cacheprovider "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: $*" >&2
    return 1
  fi
  return "$rc"
}

export SHARED_DIR="${SHARED_DIR:-$ROOT/../shared}"
export PYTHONPATH="$ROOT/clients/python${PYTHONPATH:+:$PYTHONPATH}"

echo "== pytest"
SHARDCAST_BUILD="$ROOT/build" SHARDCAST_BIN="$ROOT/build/shardcastd" \
  SHARDCAST_REQUIRE_ACCEL=1 run_pytest "$ROOT/tests" "$ROOT/clients/python/tests"

echo "== pytest (server under ASan + UBSan)"
SHARDCAST_BUILD="$ROOT/build-asan" SHARDCAST_BIN="$ROOT/build-asan/shardcastd" \
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_pytest "$ROOT/tests/integration" "$ROOT/tests/server/test_seek.py"

echo "== all tests passed"
