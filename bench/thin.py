#!/usr/bin/python3
"""Staged shards thinned while they are read (bench/thin.sh).
One shardcastd per run reads the bench dataset of a shape from nginx (a
brace pattern over http, no shard cache, the server flags of
bench/run.sh) with a shuffle buffer that spans many shards and a
--stage-bytes well below the dataset: per shape, images 1,000 samples
and 128 MiB, tokens 4,000 samples and 16 MiB. World 4 reads epoch 0 (the
first pass) and then epoch 1, each rank a `shardcast bench --verify`
consumer. Reported per tree and shape: samples/s of each epoch, the
staging's peak (its own count) and the most shared memory the machine
held above where it started (/proc/meminfo Shmem, sampled every 20 ms:
the memfds' pages, counted by the kernel), what thinning gave back, the
bytes nginx sent against the dataset's, and shards fetched again.
With --other-build the two trees alternate run by run.
Output: results.json and results.md in --out.
"""
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from late_world import cli_read, store_bytes  # noqa: E402

REPO = os.path.dirname(HERE)
FORMAT = 1
FLAGS = {"images": ("1000", "128MiB"), "tokens": ("4000", "16MiB")}
WORLD = 4


def shmem():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    return 0


def one_server(build, nginx, ds, workdir, shape):
    buf, stage = FLAGS[shape]
    sent0 = store_bytes(nginx)
    base = shmem()
    top = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            top[0] = max(top[0], shmem())
            time.sleep(0.02)

    proc, port, log = bench.start_job_server(
        build, ds, workdir, nginx.url,
        extra=("--shuffle-buffer", buf, "--stage-bytes", stage))
    th = threading.Thread(target=sample)
    th.start()
    try:
        url = "http://127.0.0.1:%d" % port
        manifest = os.path.join(ds.path, "manifest.json")
        rates, ok = [], True
        for epoch in (0, 1):
            _, rate, o = cli_read(build, url, epoch, WORLD, manifest)
            rates.append(rate)
            ok &= o
        with urllib.request.urlopen(url + "/v1/jobs/j", timeout=30) as f:
            st = json.load(f)
        sg, dp = st.get("staging") or {}, st.get("data_plane") or {}
        time.sleep(0.5)  # (nginx's log write may trail the streams' END)
        return {"epoch0_samples_per_s": rates[0], "epoch1_samples_per_s": rates[1],
                "store_bytes": store_bytes(nginx) - sent0, "exactly_once": ok,
                "peak_bytes": sg.get("peak_bytes"),
                "shmem_peak_bytes": top[0] - base,
                "thinned_bytes": sg.get("thinned_bytes"),
                "restages": sg.get("restages"),
                "detaches": sg.get("detaches"),
                "feed_streams": dp.get("feed_streams")}
    finally:
        done.set()
        th.join()
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def markdown(doc):
    out = bench.md_head("Staged shards thinned while they are read (bench/thin.sh)", doc,
                        "runs: %d per tree, alternating; medians; world %d; "
                        "images: --shuffle-buffer 1000 --stage-bytes 128MiB, tokens: "
                        "--shuffle-buffer 4000 --stage-bytes 16MiB" % (doc["runs"], WORLD)) + [
           "| shape | tree | epoch 0 samples/s | epoch 1 samples/s | staged peak MB | "
           "shmem peak MB | thinned MB | store bytes / dataset | restages | detaches | "
           "feed streams | exactly-once |",
           "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in doc["rows"]:
        out.append("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f | %s | %s | %s | %s |" % (
            r["shape"], r["tree"], r["epoch0"], r["epoch1"], r["peak"] / 1e6,
            r["shmem"] / 1e6, r["thinned"] / 1e6, r["fetched_x"], r["restages"],
            r["detaches"], r["feed_streams"], "yes" if r["exactly_once"] else "NO"))
    out += ["", "Every run (epoch 0 samples/s; staged peak MB):", ""]
    for r in doc["rows"]:
        out.append("- %s %s: %s" % (r["shape"], r["tree"], ", ".join(
            "%.0f; %.0f" % (x["epoch0_samples_per_s"], (x["peak_bytes"] or 0) / 1e6)
            for x in r["runs"])))
    return "\n".join(out) + "\n"


def summary(r):
    return ("epoch 0 %.0f/s, epoch 1 %.0f/s, peak %.0f MB, shmem %.0f MB, thinned %.0f MB, "
            "exactly-once %s" % (r["epoch0_samples_per_s"], r["epoch1_samples_per_s"],
                                 (r["peak_bytes"] or 0) / 1e6, r["shmem_peak_bytes"] / 1e6,
                                 (r["thinned_bytes"] or 0) / 1e6, r["exactly_once"]))


def medians(rs, dataset_bytes):
    med = statistics.median
    return {
        "epoch0": med(r["epoch0_samples_per_s"] for r in rs),
        "epoch1": med(r["epoch1_samples_per_s"] for r in rs),
        "peak": med(r["peak_bytes"] or 0 for r in rs),
        "shmem": med(r["shmem_peak_bytes"] for r in rs),
        "thinned": med(r["thinned_bytes"] or 0 for r in rs),
        "fetched_x": med(r["store_bytes"] / dataset_bytes for r in rs),
        "restages": med(r["restages"] or 0 for r in rs),
        "detaches": med(r["detaches"] or 0 for r in rs),
        "feed_streams": med(r["feed_streams"] or 0 for r in rs),
        "exactly_once": all(r["exactly_once"] for r in rs)}


def main(argv=None):
    return bench.tree_main(argv, __doc__, REPO, "thin", "shardcast-thin-",
                           lambda b, nginx, ds, workdir, shape:
                           one_server(b, nginx, ds, workdir, shape.name),
                           summary, medians, FORMAT, markdown)


if __name__ == "__main__":
    sys.exit(main())
