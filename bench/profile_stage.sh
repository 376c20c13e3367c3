#!/usr/bin/env bash
# profile_stage.sh SHAPE W [OUT] — where a server's time goes when it stages
# remote shards: nginx on 127.0.0.1 serves the bench dataset SHAPE
# (build/bench-data/datasets/SHAPE), a shardcastd reads it as a brace
# pattern over http with no shard cache and --stage-bytes $STAGE_BYTES
# (1GiB unless set: every epoch planned, each shard fetched once into
# memory; below the dataset, shards are thinned), and `perf record -g`
# follows the server while `shardcast bench -n W` reads epochs 0-3. Prints
# each epoch's throughput and the server's CPU ticks, and writes OUT
# (default perf-stage-SHAPE.data) for `perf report`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${SHARDCAST_BUILD:-$ROOT/build}"
DS="$BUILD/bench-data/datasets/$1"
W="$2"
OUT="${3:-perf-stage-$1.data}"
[ -d "$DS" ] || { echo "no dataset $DS (run bench/steady.sh --quick first)" >&2; exit 2; }
SD="$(mktemp -d)"
NPORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$SD/ng"
cat >"$SD/ng/nginx.conf" <<CONF
$( [ "$(id -u)" = 0 ] && echo "user root;" )
daemon off;
worker_processes auto;
pid $SD/ng/nginx.pid;
error_log $SD/ng/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $SD/ng/b; proxy_temp_path $SD/ng/p;
  fastcgi_temp_path $SD/ng/f; uwsgi_temp_path $SD/ng/u; scgi_temp_path $SD/ng/s;
  sendfile on; tcp_nopush on;
  server { listen 127.0.0.1:$NPORT; root $DS; }
}
CONF
nginx -c "$SD/ng/nginx.conf" -p "$SD/ng" &
NG=$!
trap 'kill "$PID" "$NG" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$SD"' EXIT
N=$(ls "$DS" | grep -c '\.tar$')
NAME=$(ls "$DS" | grep '\.tar$' | head -1 | sed 's/-[0-9]*\.tar$//')
SRC="http://127.0.0.1:$NPORT/$NAME-{000000..$(printf %06d $((N - 1)))}.tar"
sleep 0.5
"$BUILD/shardcastd" --listen 127.0.0.1 --port 0 --job j --source "$SRC" \
  --stage-bytes "${STAGE_BYTES:-1GiB}" --shuffle-buffer 1000 >"$SD/out" 2>"$SD/err" &
PID=$!
for _ in $(seq 100); do grep -q listening "$SD/out" 2>/dev/null && break; sleep 0.1; done
URL="http://$(grep -o 'listening=[^ ]*' "$SD/out" | cut -d= -f2)"
C0=$(awk '{print $14+$15}' "/proc/$PID/stat")
perf record -F 2000 -g -p "$PID" -o "$OUT" -- sleep 1000 2>/dev/null &
PP=$!
for e in 0 1 2 3; do
  "$BUILD/shardcast" bench --server "$URL" --job j --epoch "$e" -n "$W" 2>&1 |
    grep -E 'throughput' | head -1
done
kill -INT "$PP"
wait "$PP" 2>/dev/null || true
C1=$(awk '{print $14+$15}' "/proc/$PID/stat")
echo "server cpu ticks (1/$(getconf CLK_TCK) s) over epochs 0-3: $((C1 - C0))"
