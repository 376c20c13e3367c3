#!/usr/bin/env bash
# stress-pytest.sh — the Python suites under load: COPIES copies of the
# server and integration suites (or the pytest paths given) run at once
# beside HOGS processes that keep a CPU busy each, ROUNDS times in a row.
# A test that waits for a time instead of a state, or reads a state the
# server reaches asynchronously without waiting for it, fails here sooner
# or later; this is how a flaky one is found and how a fix is shown
# (docs/development.md, "Tests wait for states"). Kept out of .ci/run: one
# round of two copies of the default paths beside two hogs takes about
# three times the suite's own time on 2 cores.
#
#   tests/stress-pytest.sh [ROUNDS=3] [COPIES=2] [HOGS=2] [PYTEST_ARGS...]
#
# The build is $SHARDCAST_BUILD (default build/). Each copy has its own
# --basetemp. Prints a line per copy and round (passed, failed) and the
# failing tests with the round and copy; exits non-zero when any failed.
set -uo pipefail
ROUNDS="${1:-3}"
COPIES="${2:-2}"
HOGS="${3:-2}"
shift $(( $# < 3 ? $# : 3 ))
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=/usr/bin/python3
BUILD="${SHARDCAST_BUILD:-$ROOT/build}"
export SHARDCAST_BUILD="$BUILD" SHARDCAST_BIN="$BUILD/shardcastd"
export PYTHONPATH="$ROOT/clients/python${PYTHONPATH:+:$PYTHONPATH}"
if [ $# -eq 0 ]; then
  set -- "$ROOT/tests/server" "$ROOT/tests/integration"
fi
WORK="$(mktemp -d)"
hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
  wait "${hogs[@]}" 2>/dev/null
  hogs=()
}
trap 'stop_hogs; rm -rf "$WORK"' EXIT

echo "stress-pytest: $COPIES copies x $ROUNDS rounds beside $HOGS CPU hogs: $*"
total_fail=0
total_pass=0
for r in $(seq 1 "$ROUNDS"); do
  for h in $(seq 1 "$HOGS"); do
    "$PY" -c 'while True: pass' &
    hogs+=($!)
  done
  pids=()
  for c in $(seq 1 "$COPIES"); do
    "$PY" -m pytest -q -p no:cacheprovider -rfE --basetemp "$WORK/tmp.$r.$c" "$@" \
      > "$WORK/out.$r.$c" 2>&1 < /dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  stop_hogs
  for c in $(seq 1 "$COPIES"); do
    line="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$WORK/out.$r.$c" | tail -1)"
    pass=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
    fail=$(echo "$line" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s += $1} END {print s + 0}')
    [ -z "$fail" ] && fail=0
    [ -z "$pass" ] && pass=0
    total_pass=$((total_pass + pass))
    total_fail=$((total_fail + fail))
    echo "round $r copy $c: ${line:-no summary (see below)}"
    if [ "$fail" -ne 0 ] || [ -z "$line" ]; then
      grep -E '^(FAILED|ERROR) ' "$WORK/out.$r.$c" | sed "s/^/  round $r copy $c: /"
      grep -E '^E  ' "$WORK/out.$r.$c" | head -n 40 | sed "s/^/    /"
      [ -z "$line" ] && tail -n 20 "$WORK/out.$r.$c" && total_fail=$((total_fail + 1))
    fi
  done
done
echo "stress-pytest: $total_pass passed, $total_fail failed over $ROUNDS rounds x $COPIES copies beside $HOGS hogs"
[ "$total_fail" -eq 0 ]
