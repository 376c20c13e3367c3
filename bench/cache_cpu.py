#!/usr/bin/python3
"""What a shard-cache hit costs the server, against reading the store.

One dataset is served four ways by shardcastd: local files, HTTP from nginx
with no cache, HTTP with the shard cache on disk (state_dir/cache) and in
memory. Each server runs E epochs read by W concurrent consumers (the
Python client); the server's CPU time (utime + stime from /proc) is taken
around each epoch and divided by the payload bytes delivered. With the
cache, epoch 0 fills it (misses) and later epochs are hits. The ways are
run in turn, R rounds, and the report gives medians (core-seconds per GB
of payload) and the hit / store-read ratio measured in the same rounds.

    /usr/bin/python3 bench/cache_cpu.py [--rounds 3] [--epochs 4]
        [--data DIR | --size BYTES --samples-per-shard N]
        [--compare OTHER_SHARDCASTD] [--plane auto|stream]
        [--out bench/results/cache-cpu-DATE]

What the cache's block checks cost: --compare names a second shardcastd
built without them (e.g. from the commit before they came); its cache
ways run in the same rounds, and the report adds the hits' cost with
checks against without. --size 1024 measures small samples (the checks'
edge blocks and extra reads weigh most there).

Needs nginx and a built shardcastd (SHARDCAST_BIN or build/shardcastd).
Nothing but 127.0.0.1 is used.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "clients" / "python"))
from shardcast import StreamReader, stream_url  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid):
    f = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TCK


class Nginx:
    def __init__(self, root, work):
        self.port = free_port()
        conf = Path(work) / "nginx.conf"
        tmp = {k: Path(work) / k for k in ("b", "p", "f", "u", "s")}
        user = "user root;\n" if os.geteuid() == 0 else ""
        conf.write_text(user + (
            "daemon off; worker_processes 1; pid %s/nginx.pid;\n"
            "error_log %s/error.log;\nevents { worker_connections 512; }\n"
            "http { access_log off; sendfile on; keepalive_requests 100000;\n"
            " client_body_temp_path %s; proxy_temp_path %s;\n"
            " fastcgi_temp_path %s; uwsgi_temp_path %s; scgi_temp_path %s;\n"
            " server { listen 127.0.0.1:%d; root %s; } }\n") % (
                work, work, tmp["b"], tmp["p"], tmp["f"], tmp["u"], tmp["s"],
                self.port, root))
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([exe, "-c", str(conf), "-p", str(work)],
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def read_epoch(url, epoch, world):
    """Payload bytes of the epoch, W consumers at once."""
    got = [0] * world

    def rank(r):
        with StreamReader(stream_url(url, "train", epoch, r, world)) as rd:
            for s in rd:
                got[r] += sum(len(v) for v in s.values()
                              if isinstance(v, (bytes, bytearray)))

    ts = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(got)


def run_way(binary, source, extra, epochs, world, plane):
    """[(epoch, payload bytes, server cpu s, wall s)] of one server."""
    p = subprocess.Popen(
        [binary, "--job", "train", "--source", source, "--port", "0",
         "--seed", "1", "--prefetch", "false", "--log-level", "warn",
         "--data-plane", plane, *extra], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True)
    line = p.stdout.readline()
    if not line.startswith("listening="):
        p.kill()
        raise RuntimeError("server did not start")
    url = "http://" + line.strip().split("=", 1)[1]
    out = []
    try:
        for e in range(epochs):
            c0, t0 = cpu_s(p.pid), time.time()
            b = read_epoch(url, e, world)
            out.append((e, b, cpu_s(p.pid) - c0, time.time() - t0))
    finally:
        p.terminate()
        p.wait()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--data", help="dataset directory (default: generate "
                    "16 shards x --samples-per-shard samples of ~--size)")
    ap.add_argument("--size", type=int, default=102400)
    ap.add_argument("--samples-per-shard", type=int, default=100)
    ap.add_argument("--compare", help="another shardcastd (without the "
                    "cache's block checks) whose cache ways run alongside")
    ap.add_argument("--plane", default="auto", choices=("auto", "stream"))
    ap.add_argument("--out", default=str(
        REPO / "bench" / "results" /
        ("cache-cpu-" + datetime.date.today().isoformat())))
    a = ap.parse_args()
    binary = os.environ.get("SHARDCAST_BIN") or str(REPO / "build" /
                                                    "shardcastd")
    work = Path(tempfile.mkdtemp(prefix="cache-cpu-"))
    try:
        data = a.data
        if not data:
            data = str(work / "data")
            subprocess.run(["/usr/bin/python3",
                            str(REPO / "tests" / "tools" / "mkwds.py"),
                            "--out", data, "--shards", "16",
                            "--samples-per-shard", str(a.samples_per_shard),
                            "--size", str(a.size), "--seed", "7",
                            "--prefix", "shard"],
                           check=True, stdout=subprocess.DEVNULL)
        shards = sorted(f for f in os.listdir(data) if f.endswith(".tar"))
        ng = Nginx(data, work)
        try:
            http = " :: ".join("http://127.0.0.1:%d/%s" % (ng.port, s)
                               for s in shards)
            disk = ["--cache-bytes", "64GiB", "--cache-dir", ""]
            mem = ["--cache-bytes", "64GiB"]
            ways = {
                "file": (binary, data, []),
                "http": (binary, http, []),
                "http+cache(disk)": (binary, http, disk),
                "http+cache(memory)": (binary, http, mem),
            }
            if a.compare:
                ways["http+cache(disk) no checks"] = (a.compare, http, disk)
                ways["http+cache(memory) no checks"] = (a.compare, http, mem)
            rows = {k: [] for k in ways}
            for rnd in range(a.rounds):
                for wi, (name, (exe, src, extra)) in enumerate(ways.items()):
                    extra = list(extra)
                    if "--cache-dir" in extra:
                        d = work / ("cache-%d-%d" % (rnd, wi))
                        extra[extra.index("--cache-dir") + 1] = str(d)
                    res = run_way(exe, src, extra, a.epochs, a.world,
                                  a.plane)
                    rows[name].extend(dict(round=rnd, epoch=e, bytes=b,
                                           cpu_s=c, wall_s=w)
                                      for e, b, c, w in res)
                    print("round %d %-20s %s" % (rnd, name, " ".join(
                        "%.2f" % (c / (b / 1e9)) for _, b, c, _ in res)),
                        flush=True)
        finally:
            ng.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(name, pred):
        v = [r["cpu_s"] / (r["bytes"] / 1e9) for r in rows[name]
             if pred(r["epoch"])]
        return statistics.median(v) if v else None

    summary = {
        "file": med("file", lambda e: True),
        "http (store read)": med("http", lambda e: True),
        "cache disk, epoch 0 (fill)": med("http+cache(disk)", lambda e: e == 0),
        "cache disk, later epochs (hits)": med("http+cache(disk)",
                                               lambda e: e > 0),
        "cache memory, epoch 0 (fill)": med("http+cache(memory)",
                                            lambda e: e == 0),
        "cache memory, later epochs (hits)": med("http+cache(memory)",
                                                 lambda e: e > 0),
    }
    if a.compare:
        summary["cache disk, hits, no checks"] = med(
            "http+cache(disk) no checks", lambda e: e > 0)
        summary["cache memory, hits, no checks"] = med(
            "http+cache(memory) no checks", lambda e: e > 0)
    ratio = {k: v / summary["http (store read)"] for k, v in summary.items()}
    cost = {}
    if a.compare:
        # The checks' cost: per round, hits with checks over hits without
        # (the same round: the machine's load alike), then the median.
        for kind in ("disk", "memory"):
            per = []
            for rnd in range(a.rounds):
                def cps(name):
                    v = [r["cpu_s"] / (r["bytes"] / 1e9) for r in rows[name]
                         if r["round"] == rnd and r["epoch"] > 0]
                    return statistics.median(v) if v else None
                w = cps("http+cache(%s)" % kind)
                wo = cps("http+cache(%s) no checks" % kind)
                if w and wo:
                    per.append(w / wo - 1)
            cost[kind] = statistics.median(per) if per else None
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"rounds": a.rounds, "epochs": a.epochs, "world": a.world,
         "size": a.size, "samples_per_shard": a.samples_per_shard,
         "plane": a.plane, "summary_core_s_per_gb": summary,
         "ratio_to_store_read": ratio, "checks_cost": cost,
         "rows": rows}, indent=1))
    lines = ["| way | server core-s per GB (median) | x store read |",
             "|---|--:|--:|"]
    for k, v in summary.items():
        lines.append("| %s | %.2f | %.2f |" % (k, v, ratio[k]))
    for kind, v in cost.items():
        if v is not None:
            lines.append("| checks' cost, %s hits (median of rounds) | "
                         "%+.1f%% | |" % (kind, 100 * v))
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
