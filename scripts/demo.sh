#!/usr/bin/env bash
# demo.sh — run the main job: build shardcast, make a small local WebDataset,
# serve it with shardcastd and stream one epoch into a PyTorch DataLoader
# with 4 workers (1 rank x 4 workers = 4 consumers).
#
# Non-interactive; works from a fresh clone on Debian 12 (scripts/deps.sh
# installs what is missing). The dataset (16 shards x 500 samples, ~10 KB
# each, ~80 MB) is generated once under build/demo-data/. The server runs on
# a free port of 127.0.0.1 and is stopped when the demo ends, however it ends.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
DATA="$ROOT/build/demo-data"
JOB=demo
WORKERS=4

"$ROOT/scripts/deps.sh"
"$ROOT/scripts/build.sh"

if [ ! -f "$DATA/manifest.json" ]; then
  echo "demo: generating a WebDataset in $DATA"
  "$PY" "$ROOT/tests/tools/mkwds.py" --out "$DATA" --shards 16 \
    --samples-per-shard 500 --size 10000 --seed 1 --prefix demo
fi
TOTAL="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_samples"])' \
  "$DATA/manifest.json")"
# even-drop deals equal shares: the last TOTAL mod W samples are not sent.
EXPECT=$(( TOTAL - TOTAL % WORKERS ))

RUN="$(mktemp -d)"
PID=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$RUN"
}
trap cleanup EXIT

"$ROOT/build/shardcastd" --job "$JOB" --source "$DATA" --listen 127.0.0.1 \
  --port 0 --seed 1 >"$RUN/stdout" 2>"$RUN/stderr" &
PID=$!

ADDR=""
for _ in $(seq 300); do   # up to 30 s for the listening= line
  ADDR="$(sed -n 's/^listening=//p' "$RUN/stdout" | head -n 1)"
  [ -n "$ADDR" ] && break
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "demo: shardcastd exited before listening:" >&2
    cat "$RUN/stderr" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$ADDR" ]; then
  echo "demo: shardcastd printed no listening= line in 30 s:" >&2
  cat "$RUN/stderr" >&2
  exit 1
fi
echo "demo: shardcastd serving job '$JOB' ($TOTAL samples) on http://$ADDR"

rc=0
PYTHONPATH="$ROOT/clients/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PY" "$ROOT/clients/python/examples/demo.py" --url "http://$ADDR" --job "$JOB" \
  --workers "$WORKERS" --expect "$EXPECT" || rc=$?

kill -TERM "$PID"
srv_rc=0
wait "$PID" || srv_rc=$?
PID=""
if [ "$srv_rc" -ne 0 ]; then
  echo "demo: shardcastd exited with status $srv_rc after SIGTERM" >&2
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "demo: failed; server log tail:" >&2
  tail -n 20 "$RUN/stderr" >&2
fi
exit "$rc"
