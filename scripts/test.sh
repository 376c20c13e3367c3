#!/usr/bin/env bash
# test.sh — the whole shardcast test suite, from a fresh Debian 12 machine.
#
#  1. installs missing Debian packages (scripts/deps.sh) and s3rver (npm);
#  2. builds with warnings as errors into build/ and runs ctest;
#  3. builds with AddressSanitizer + UBSan into build-asan/ and runs ctest;
#  4. runs the Python suites with pytest against the build/ binaries, and
#     the server integration suite again against the sanitizer build;
#  5. the upstream conformance layer: the tests that read the upstream
#     corpora of $SHARED_DIR/testdata (default ../shared beside the
#     repository: webdataset's test shards, Amazon's SigV4 test suites),
#     with both builds, when they are there. Without them it does not run,
#     and the summary says so and why.
# Everything else needs nothing beside the repository: the tests generate
# their fixtures (tests/tools/mkfixtures.py, tests/tools/mksigv4.py).
# Every stage runs, also after an earlier one failed (a stage whose build
# failed is reported as not run). Exit status is non-zero when anything
# fails, including a pytest run that collected no tests (pytest exit code
# 5). A summary of every stage is printed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
JOBS="$(nproc)"
# pytest processes (pytest-xdist): the suites wait on servers, sockets and
# child processes about half of their time, so one more than the cores
# keeps them busy, at most 8 (SHARDCAST_PYTEST_WORKERS=N; 1: serial).
PYTEST_WORKERS="${SHARDCAST_PYTEST_WORKERS:-$((JOBS + 1 > 8 ? 8 : JOBS + 1))}"
if ! [[ "$PYTEST_WORKERS" =~ ^[0-9]{1,3}$ ]]; then
  echo "test.sh: SHARDCAST_PYTEST_WORKERS must be a count of 0 to 999" \
    "processes, not '$PYTEST_WORKERS'" >&2
  exit 2
fi

export SHARED_DIR="${SHARED_DIR:-$ROOT/../shared}"
export PYTHONPATH="$ROOT/clients/python${PYTHONPATH:+:$PYTHONPATH}"
UPSTREAM="$(realpath -m "$SHARED_DIR")/testdata"
missing=()
for corpus in wds sigv4; do
  [ -d "$UPSTREAM/$corpus" ] || missing+=("$UPSTREAM/$corpus")
done
if [ ${#missing[@]} -eq 0 ]; then
  CONFORMANCE="not reached (the script stopped before it)"
else
  CONFORMANCE="NOT RUN: ${missing[*]} not found (the upstream corpora are \
not beside this clone; set SHARED_DIR to a folder holding testdata/wds and \
testdata/sigv4 to run it). Everything else ran on generated fixtures."
fi

SUMMARY=()
finish() {
  local rc=$?
  echo "== summary"
  local line
  for line in "${SUMMARY[@]}"; do
    echo "   $line"
  done
  echo "   upstream conformance layer: $CONFORMANCE"
  if [ "$rc" -eq 0 ]; then
    echo "== all tests passed in ${SECONDS} s"
  else
    echo "== FAILED (exit status $rc) after ${SECONDS} s"
  fi
}
trap finish EXIT
# Stopped by a signal: the summary must not call the run a pass.
trap 'echo "== interrupted by a signal" >&2; exit 130' INT TERM HUP

# run_ctest LABEL DIR [ctest options]: ctest in DIR; its result line goes
# into the summary.
run_ctest() {
  local label="$1" dir="$2" log rc=0
  shift 2
  log="$(mktemp)"
  (cd "$dir" && ctest --output-on-failure -j"$JOBS" "$@") 2>&1 | tee "$log" || rc=$?
  SUMMARY+=("$label: $(grep -E 'tests passed|tests failed' "$log" | tail -n 1 || true)$(
    grep -q 'did not run' "$log" && echo " (some skipped, see above)" || true)")
  # The tests that failed, named in the summary (the end of a long log is
  # what a CI page shows).
  local failed
  while IFS= read -r failed; do
    SUMMARY+=("   $failed")
  done < <(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' | head -n 20)
  rm -f "$log"
  return "$rc"
}

# run_pytest LABEL [pytest arguments]: its result line goes into the
# summary; exit code 5 (nothing collected) is a failure.
run_pytest() {
  local label="$1" log rc=0
  shift
  log="$(mktemp)"
  local par=()
  # A file's tests run in one process (--dist loadfile): they share its
  # module fixtures (servers, nginx, datasets).
  if [ "$PYTEST_WORKERS" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
    par=(-n "$PYTEST_WORKERS" --dist loadfile)
  fi
  "$PY" -m pytest -q -p no:cacheprovider "${par[@]}" "$@" 2>&1 | tee "$log" || rc=$?
  SUMMARY+=("$label: $(tail -n 1 "$log")")
  # The tests that failed or errored, named (pytest's short summary).
  local failed
  while IFS= read -r failed; do
    SUMMARY+=("   ${failed:0:300}")
  done < <(grep -E '^(FAILED|ERROR) ' "$log" | head -n 20)
  rm -f "$log"
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: $*" >&2
    return 1
  fi
  return "$rc"
}

"$ROOT/scripts/deps.sh"
"$ROOT/scripts/s3rver-install.sh" >/dev/null
# npm tools of the Kubernetes manifest tests (schema validator, TypeScript)
"$ROOT/tests/k8s/install.sh" >/dev/null

if [ ${#missing[@]} -eq 0 ]; then
  echo "== upstream conformance layer: $UPSTREAM (runs after the other stages)"
else
  echo "== upstream conformance layer: $CONFORMANCE"
fi

# Every stage runs, also after one failed (a stage needing a build that
# failed is reported as not run); the script then exits non-zero.
FAILED=0
# stage LABEL CMD...: run one stage; a failure is recorded, not fatal.
stage() {
  local label="$1"
  shift
  if ! "$@"; then
    FAILED=1
    echo "== stage failed: $label" >&2
  fi
}
not_run() {
  SUMMARY+=("$1: NOT RUN ($2)")
  FAILED=1
}

BUILD_OK=1
ASAN_OK=1
echo "== build (warnings as errors)"
if ! "$ROOT/scripts/build.sh" "$ROOT/build" -DSHARDCAST_WERROR=ON \
    -DSHARED_DIR="$SHARED_DIR"; then
  BUILD_OK=0
  SUMMARY+=("build: FAILED")
  FAILED=1
fi
echo "== ctest"
if [ "$BUILD_OK" -eq 1 ]; then
  stage ctest run_ctest "ctest" "$ROOT/build" -LE conformance
else
  not_run ctest "the build failed"
fi

echo "== build (ASan + UBSan)"
if ! "$ROOT/scripts/build.sh" "$ROOT/build-asan" -DSHARDCAST_WERROR=ON \
    -DSHARDCAST_SANITIZE=ON -DSHARED_DIR="$SHARED_DIR"; then
  ASAN_OK=0
  SUMMARY+=("build (ASan + UBSan): FAILED")
  FAILED=1
fi
echo "== ctest (ASan + UBSan)"
if [ "$ASAN_OK" -eq 1 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    stage "ctest (ASan + UBSan)" run_ctest "ctest (ASan + UBSan)" \
    "$ROOT/build-asan" -LE conformance
else
  not_run "ctest (ASan + UBSan)" "the sanitizer build failed"
fi

echo "== pytest"
if [ "$BUILD_OK" -eq 1 ]; then
  SHARDCAST_BUILD="$ROOT/build" SHARDCAST_BIN="$ROOT/build/shardcastd" \
    SHARDCAST_REQUIRE_ACCEL=1 stage pytest run_pytest "pytest" \
    -m "not conformance" "$ROOT/tests" "$ROOT/clients/python/tests"
else
  not_run pytest "the build failed"
fi

echo "== pytest (server under ASan + UBSan)"
if [ "$ASAN_OK" -eq 1 ]; then
  SHARDCAST_BUILD="$ROOT/build-asan" SHARDCAST_BIN="$ROOT/build-asan/shardcastd" \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    stage "pytest (ASan)" run_pytest "pytest (server under ASan + UBSan)" \
    -m "not conformance" \
    "$ROOT/tests/integration" "$ROOT/tests/server/test_seek.py" \
    "$ROOT/tests/server/test_plan_golden.py" "$ROOT/tests/server/test_plan_faults.py" \
    "$ROOT/tests/server/test_feed_changes.py" "$ROOT/tests/server/test_stream_goldens.py" \
    "$ROOT/tests/server/test_plan_wait.py" "$ROOT/tests/server/test_first_pass.py" \
    "$ROOT/tests/server/test_staging.py" \
    "$ROOT/tests/server/test_plan_window.py" "$ROOT/tests/server/test_plan_cold.py" \
    "$ROOT/tests/server/test_replica_set.py" "$ROOT/tests/server/test_mix.py" \
    "$ROOT/tests/server/test_truncated.py" "$ROOT/tests/server/test_heartbeat.py" \
    "$ROOT/tests/server/test_losses.py" "$ROOT/tests/server/test_shutdown.py" \
    "$ROOT/tests/server/test_samples.py" \
    "$ROOT/tests/trust"
else
  not_run "pytest (server under ASan + UBSan)" "the sanitizer build failed"
fi

if [ ${#missing[@]} -eq 0 ]; then
  # The corpora are here: a conformance test that cannot find them fails
  # instead of skipping.
  export SHARDCAST_CONFORMANCE=require
  before="$FAILED"
  FAILED=0
  if [ "$BUILD_OK" -eq 1 ]; then
    echo "== upstream conformance layer: ctest"
    stage "conformance ctest" run_ctest "conformance ctest" "$ROOT/build" -L conformance
    echo "== upstream conformance layer: pytest"
    SHARDCAST_BUILD="$ROOT/build" SHARDCAST_BIN="$ROOT/build/shardcastd" \
      SHARDCAST_REQUIRE_ACCEL=1 stage "conformance pytest" run_pytest \
      "conformance pytest" -m conformance "$ROOT/tests" "$ROOT/clients/python/tests"
  else
    not_run "conformance (build/)" "the build failed"
  fi
  if [ "$ASAN_OK" -eq 1 ]; then
    echo "== upstream conformance layer: ctest (ASan + UBSan)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      stage "conformance ctest (ASan)" run_ctest "conformance ctest (ASan + UBSan)" \
      "$ROOT/build-asan" -L conformance
    echo "== upstream conformance layer: pytest (server under ASan + UBSan)"
    SHARDCAST_BUILD="$ROOT/build-asan" SHARDCAST_BIN="$ROOT/build-asan/shardcastd" \
      ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      stage "conformance pytest (ASan)" run_pytest \
      "conformance pytest (server under ASan + UBSan)" -m conformance \
      "$ROOT/tests/integration"
  else
    not_run "conformance (build-asan/)" "the sanitizer build failed"
  fi
  if [ "$FAILED" -eq 0 ]; then
    CONFORMANCE="ran on $UPSTREAM (the conformance lines above)"
  else
    CONFORMANCE="FAILED on $UPSTREAM (see the conformance lines above)"
  fi
  [ "$before" -eq 0 ] || FAILED=1
fi
exit "$FAILED"
