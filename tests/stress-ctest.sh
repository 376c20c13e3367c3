#!/usr/bin/env bash
# stress-ctest.sh — the C tests under load: COPIES copies of the whole C
# suite (ctest's tests, but the conformance ones) run at once, RUNS times in
# a row. A test that waits for a time instead of a state fails here sooner
# or later; this is how a flaky one is found and how a fix is shown.
#
#   tests/stress-ctest.sh [RUNS=20] [COPIES=4] [BUILD_DIR=build]
#
# Each copy runs every test command of the build directory (the fixture
# set-ups run once, first) one after the
# other, with the environment and working directory ctest would give it
# (the tests keep their files in directories of their own, mkdtemp). Prints one
# line per run and a summary; exits non-zero when any test failed, and
# names it with its output.
set -euo pipefail
RUNS="${1:-20}"
COPIES="${2:-4}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$(cd "${3:-$ROOT/build}" && pwd)"
PY=/usr/bin/python3
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The test commands, their working directories and environments, from
# ctest itself.
(cd "$BUILD" && ctest -N -LE conformance --show-only=json-v1) > "$WORK/tests.json"
"$PY" - "$WORK/tests.json" "$WORK/tests.sh" <<'EOF'
import json, shlex, sys
tests = json.load(open(sys.argv[1]))["tests"]
# Fixture set-ups (they write the shared fixtures the others read) run
# once, before the copies; the copies run every other test.
with open(sys.argv[2], "w") as out, open(sys.argv[2] + ".setup", "w") as setup:
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = " ".join(shlex.quote(e) for e in props.get("ENVIRONMENT", []))
        wd = props.get("WORKING_DIRECTORY", ".")
        cmd = " ".join(shlex.quote(a) for a in t["command"])
        line = "%s\t%s\t%s\t%s\n" % (t["name"], wd, env, cmd)
        (setup if props.get("FIXTURES_SETUP") else out).write(line)
EOF
while IFS=$'\t' read -r name wd env cmd; do
  if ! (cd "$wd" && eval "env $env $cmd") > "$WORK/setup.out" 2>&1; then
    echo "stress-ctest: the fixture set-up $name failed:" >&2
    tail -n 20 "$WORK/setup.out" >&2
    exit 1
  fi
done < "$WORK/tests.sh.setup"
ntests=$(wc -l < "$WORK/tests.sh")
echo "stress-ctest: $ntests tests x $COPIES copies at once x $RUNS runs ($BUILD)"

# one_copy K: every test once; a failure leaves its output in fail.K.NAME
one_copy() {
  local k="$1" name wd env cmd
  while IFS=$'\t' read -r name wd env cmd; do
    # ctest's own limit: a hung test is a failure, not a stalled run
    if ! (cd "$wd" && eval "timeout 300 env $env $cmd") > "$WORK/out.$k" 2>&1; then
      cp "$WORK/out.$k" "$WORK/fail.$k.$name"
    fi
  done < "$WORK/tests.sh"
}

failures=0
for run in $(seq 1 "$RUNS"); do
  t0=$SECONDS
  for k in $(seq 1 "$COPIES"); do
    one_copy "$k" &
  done
  wait
  n=0
  for f in "$WORK"/fail.*; do
    [ -e "$f" ] || continue
    n=$((n + 1))
    echo "---- run $run: FAILED ${f##*/fail.}" >&2
    tail -n 20 "$f" >&2
    rm -f "$f"
  done
  failures=$((failures + n))
  echo "run $run/$RUNS: $((COPIES * ntests)) test runs, $n failed, $((SECONDS - t0)) s"
done
echo "stress-ctest: $((RUNS * COPIES * ntests)) test runs, $failures failed, $SECONDS s"
[ "$failures" -eq 0 ]
