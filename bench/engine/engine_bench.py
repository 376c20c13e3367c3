"""The epoch engine alone on local shards, against cat and libarchive.

For each sample shape it generates a deterministic dataset with
tests/tools/mkwds.py (page cache warm: every contender reads the same
files right after a warm-up read), then runs, alternating, RUNS times:
  cat        cat of every shard to /dev/null (the byte ceiling)
  libarchive sio_rawread: libarchive decodes every member, data discarded
  engine W=1 sio_epochs: the full epoch (permutation, K=4 interleave with
             read-ahead threads, 10,000-sample shuffle buffer, feed window)
             to one consumer
  engine W=16 the same epoch dealt to 16 consumer threads
and reports medians of samples/s and MB/s (payload bytes).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {
    "1KiB": dict(shards=32, per=6250, size=1024),      # 200k samples
    "100KiB": dict(shards=32, per=80, size=102400),    # 2560 samples, ~260 MB
}


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


def dataset(shape, base):
    d = os.path.join(base, shape)
    if not os.path.exists(os.path.join(d, "manifest.json")):
        p = SHAPES[shape]
        sh([sys.executable, os.path.join(ROOT, "tests/tools/mkwds.py"), "--out", d,
            "--shards", str(p["shards"]), "--samples-per-shard", str(p["per"]),
            "--size", str(p["size"]), "--seed", "7", "--prefix", shape.lower()])
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tar"))
    man = json.load(open(os.path.join(d, "manifest.json")))
    return d, files, man


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "bench-engine-data"))
    a = ap.parse_args()
    results = {"machine": {"nproc": os.cpu_count(), "platform": platform.platform(),
                           "cpu": next((l.split(":", 1)[1].strip() for l in
                                        open("/proc/cpuinfo") if l.startswith("model name")), "")},
               "shapes": {}}
    for shape in SHAPES:
        d, files, man = dataset(shape, a.data)
        nsamples = man["total_samples"]
        ondisk = sum(os.path.getsize(f) for f in files)
        for f in files:  # warm the page cache
            with open(f, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        runs = {k: [] for k in ["cat", "libarchive", "engine W=1", "engine W=16"]}
        for _ in range(a.runs):
            t = time.perf_counter()
            with open(os.devnull, "wb") as null:
                subprocess.run(["cat", *files], check=True, stdout=null)
            s = time.perf_counter() - t
            runs["cat"].append({"samples_per_s": nsamples / s, "mb_per_s": ondisk / s / 1e6,
                                "seconds": s})
            r = json.loads(sh([os.path.join(a.build, "sio_rawread"), *files]))
            runs["libarchive"].append({"samples_per_s": nsamples / r["seconds"],
                                       "mb_per_s": r["mb_per_s"], "seconds": r["seconds"]})
            for w in (1, 16):
                r = json.loads(sh([os.path.join(a.build, "sio_epochs"), d, "--epochs", "1",
                                   "--world", str(w), "--interleave", "4", "--buffer", "10000",
                                   "--buffer-bytes", str(256 << 20), "--threads", "2",
                                   "--partition", "none"]))
                assert r["samples"] == nsamples, r
                runs[f"engine W={w}"].append(r)
        med = {k: {"samples_per_s": statistics.median(x["samples_per_s"] for x in v),
                   "mb_per_s": statistics.median(x["mb_per_s"] for x in v)}
               for k, v in runs.items()}
        results["shapes"][shape] = {"samples": nsamples, "bytes_on_disk": ondisk,
                                    "median": med, "runs": runs}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ["| shape | contender | samples/s | MB/s | vs libarchive |",
             "|---|---|---:|---:|---:|"]
    for shape, r in results["shapes"].items():
        base = r["median"]["libarchive"]["samples_per_s"]
        for k, m in r["median"].items():
            lines.append(f"| {shape} | {k} | {m['samples_per_s']:,.0f} | "
                         f"{m['mb_per_s']:,.0f} | {m['samples_per_s'] / base:.2f}x |")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
