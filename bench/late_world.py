#!/usr/bin/python3
"""Worlds that come late, and more worlds than the staging follows
(bench/late_world.sh).

One shardcastd per run reads the bench dataset of a shape from nginx (a
brace pattern over http, no shard cache, the server flags of
bench/run.sh, everything else default). World 2 (two consumers) reads
epoch 0 whole; then world 1 (one consumer) reads epoch 0 again. By then
the staging has let go of every shard, so the late world's shards are
fetched again for it. Then worlds 1-5 read epoch 1 at once (five worlds:
the staging follows four). Every read is `shardcast bench --verify`
against the manifest (exactly once per world).

With --other-build the two trees alternate run by run (A, B, A, B...),
one server each: the medians of both come from one run. Reported per
tree and shape: the late world's samples/s, the five worlds' samples/s
(the sum over the worlds of samples delivered, over the wall time of all
five), the bytes nginx sent in the run against the dataset's (epochs 0
and 1: 2.00 when every shard is read once per epoch), and the staging's
counters after the run (shards fetched again, readers told to come
back, streams of the feed and of the plan).

Output: results.json and results.md in --out.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402

REPO = os.path.dirname(HERE)
FORMAT = 1


def cli_read(build, url, epoch, world, manifest):
    """`shardcast bench` of every rank of world at once: (samples,
    samples/s, exactly once)."""
    p = subprocess.run([os.path.join(build, "shardcast"), "bench", "--server", url,
                        "--job", "j", "--epoch", str(epoch), "--world", str(world),
                        "-n", str(world), "--verify", manifest, "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("shardcast bench (world %d) exit %d: %s" % (
            world, p.returncode, p.stderr.decode()[-1500:]))
    r = json.loads(p.stdout)
    return r["samples"], r["samples_per_s"], bool(r.get("verify", {}).get("ok"))


def store_bytes(nginx):
    """Bytes nginx has sent so far (its request log: method, URI, status,
    body bytes)."""
    total = 0
    try:
        with open(nginx.log_path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and parts[-1].isdigit():
                    total += int(parts[-1])
    except FileNotFoundError:
        pass
    return total


def one_server(build, nginx, ds, workdir):
    sent0 = store_bytes(nginx)
    proc, port, log = bench.start_job_server(build, ds, workdir, nginx.url)
    try:
        url = "http://127.0.0.1:%d" % port
        manifest = os.path.join(ds.path, "manifest.json")
        ok = True
        _, _, o = cli_read(build, url, 0, 2, manifest)
        ok &= o
        n, late, o = cli_read(build, url, 0, 1, manifest)
        ok &= o
        got = {}

        def world(w):
            try:
                got[w] = cli_read(build, url, 1, w, manifest)
            except Exception as e:  # noqa: BLE001 (reported below)
                got[w] = e
        ts = [threading.Thread(target=world, args=(w,)) for w in range(1, 6)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        for w, r in got.items():
            if isinstance(r, Exception):
                raise r
            ok &= r[2]
        five = sum(r[0] for r in got.values()) / wall
        with urllib.request.urlopen(url + "/v1/jobs/j", timeout=30) as f:
            st = json.load(f)
        sg, dp = st.get("staging") or {}, st.get("data_plane") or {}
        # nginx logs a request when it is done: the server's are by now
        # (the streams ended), but the log write may trail a little.
        time.sleep(0.5)
        return {"late_samples_per_s": late, "five_worlds_samples_per_s": five,
                "store_bytes": store_bytes(nginx) - sent0,
                "exactly_once": ok, "restages": sg.get("restages"),
                "restages_ranged": sg.get("restages_ranged"),
                "refused": sg.get("refused"), "revived": sg.get("revived"),
                "fetched_bytes": sg.get("fetched_bytes"),
                "peak_bytes": sg.get("peak_bytes"),
                "thinned_bytes": sg.get("thinned_bytes"),
                "feed_streams": dp.get("feed_streams"),
                "plan_streams": dp.get("plan_streams")}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def markdown(doc):
    out = bench.md_head("Late worlds and a fifth world (bench/late_world.sh)", doc,
                        "runs: %d per tree, alternating; medians" % doc["runs"]) + [
           "| shape | tree | late world 1 samples/s | 5 worlds samples/s | "
           "store bytes / dataset | staged peak MB | thinned MB | restages | "
           "refused | feed streams | plan streams | exactly-once |",
           "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in doc["rows"]:
        out.append("| %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f | %s | %s | %s | %s | %s |" % (
            r["shape"], r["tree"], r["late"], r["five"], r["fetched_x"],
            r.get("peak", 0) / 1e6, r.get("thinned", 0) / 1e6,
            r["restages"], r["refused"], r["feed_streams"], r["plan_streams"],
            "yes" if r["exactly_once"] else "NO"))
    out += ["", "Every run (late world 1 samples/s):", ""]
    for r in doc["rows"]:
        out.append("- %s %s: %s" % (r["shape"], r["tree"], ", ".join(
            "%.0f" % x["late_samples_per_s"] for x in r["runs"])))
    return "\n".join(out) + "\n"


def summary(r):
    return ("late %.0f/s, five worlds %.0f/s, restages %s, refused %s, feed %s, "
            "exactly-once %s" % (r["late_samples_per_s"], r["five_worlds_samples_per_s"],
                                 r["restages"], r["refused"], r["feed_streams"],
                                 r["exactly_once"]))


def medians(rs, dataset_bytes):
    med = statistics.median
    return {
        "late": med(r["late_samples_per_s"] for r in rs),
        "five": med(r["five_worlds_samples_per_s"] for r in rs),
        # epochs 0 and 1, two reads of the dataset at the least
        "fetched_x": med(r["store_bytes"] / dataset_bytes for r in rs),
        "peak": med(r.get("peak_bytes") or 0 for r in rs),
        "thinned": med(r.get("thinned_bytes") or 0 for r in rs),
        "restages": med(r["restages"] or 0 for r in rs),
        "refused": med(r["refused"] or 0 for r in rs),
        "feed_streams": med(r["feed_streams"] or 0 for r in rs),
        "plan_streams": med(r["plan_streams"] or 0 for r in rs),
        "exactly_once": all(r["exactly_once"] for r in rs)}


def main(argv=None):
    return bench.tree_main(argv, __doc__, REPO, "late-world", "shardcast-late-",
                           lambda b, nginx, ds, workdir, shape:
                           one_server(b, nginx, ds, workdir),
                           summary, medians, FORMAT, markdown)


if __name__ == "__main__":
    sys.exit(main())
