#!/usr/bin/python3
"""Tables and targets of the throttled-store benchmark, from its
results.json (bench/throttle/throttle.py writes both).

  throttle_report.py results.json     re-render results.md on stdout

summarize(results) -> the medians and targets (stored in results.json as
"summary"); render(results) -> the markdown report.
"""

import json
import statistics
import sys

LABELS = {
    "baseline": "baseline (boto3 + tarfile in every worker)",
    "shardcast": "shardcast, no cache",
    "shardcast-cache": "shardcast, cache >= dataset",
    "shardcast-cache50": "shardcast, cache = 50% of dataset",
}


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _msum(m, name, **labels):
    tot = 0.0
    for k, v in (m or {}).items():
        if k.split("{", 1)[0] != name:
            continue
        if all('%s="%s"' % (lk, lv) in k for lk, lv in labels.items()):
            tot += v
    return tot


def epoch_figures(rec, ep):
    """Per-epoch figures of one run (all of its jobs together)."""
    jobs = list(ep["jobs"].values())
    store = ep["store"]
    srv = ep.get("server") or {}
    samples = sum(j["samples"] for j in jobs)
    wall = max(j["epoch_s"] for j in jobs)
    client_retries = sum(j["clients"]["retries"] for j in jobs)
    fig = {
        "epoch_s": wall,
        "job_epoch_s": [j["epoch_s"] for j in jobs],
        "ttfs_s": min([j["ttfs_s"] for j in jobs if j["ttfs_s"] is not None] or [None]),
        "samples": samples,
        "samples_per_s": samples / wall if wall else None,
        "store_requests": store["requests"],
        "store_gets": store["by_method"].get("GET", 0),
        "store_heads": store["by_method"].get("HEAD", 0),
        "store_503": store["throttled"],
        "store_200": store["by_status"].get("200", 0),
        "store_206": store["by_status"].get("206", 0),
        "store_404": store["by_status"].get("404", 0),
        "store_bytes": store["bytes"],
        "store_shard_bytes": store.get("shard_bytes"),
        "client_retries": client_retries,
        "client_gave_up": sum(j["clients"]["gave_up"] for j in jobs),
        "client_reconnects": sum(j["clients"]["reconnects"] for j in jobs),
    }
    if rec["contender"] != "baseline":
        fig["server_fetch_requests"] = _msum(srv, "shardcast_fetch_requests_total")
        fig["server_fetch_retries"] = _msum(srv, "shardcast_fetch_retries_total")
        fig["server_fetch_throttles"] = _msum(srv, "shardcast_fetch_throttles_total")
        fig["server_fetch_errors"] = _msum(srv, "shardcast_fetch_errors_total")
        if any(k.startswith("shardcast_cache_") for k in srv):
            fig["cache_hit_bytes"] = _msum(srv, "shardcast_cache_bytes_total", result="hit")
            fig["cache_miss_bytes"] = _msum(srv, "shardcast_cache_bytes_total", result="miss")
            fig["cache_store_bytes"] = _msum(srv, "shardcast_cache_store_bytes_total")
            fig["cache_evictions"] = _msum(srv, "shardcast_cache_evictions_total")
        fig["retries"] = fig["server_fetch_retries"]
    else:
        fig["retries"] = client_retries
    return fig


def summarize(results):
    runs = results["runs"]
    ds = results["dataset"]
    out = {"workloads": {}, "targets": []}
    for wl in ("epochs", "jobs", "rates"):
        per = {}
        for rec in runs:
            if rec["workload"] != wl:
                continue
            key = rec["contender"]
            if wl == "rates":
                key = "%s@%g" % (rec["contender"], rec["rate"])
            c = per.setdefault(key, {"runs": 0, "ok": 0, "contender": rec["contender"],
                                     "rate": rec.get("rate"),
                                     "errors": [], "epochs": {}})
            c["runs"] += 1
            if rec["ok"]:
                c["ok"] += 1
            elif rec.get("error"):
                c["errors"].append(rec["error"][:400])
            if not rec["ok"]:
                continue
            for ep in rec["epochs"]:
                f = epoch_figures(rec, ep)
                for k, v in f.items():
                    if isinstance(v, list):
                        continue
                    c["epochs"].setdefault(ep["epoch"], {}).setdefault(k, []).append(v)
        for c in per.values():
            c["median"] = {e: {k: median(v) for k, v in d.items()}
                           for e, d in c["epochs"].items()}
            c["all"] = c.pop("epochs")
        out["workloads"][wl] = per

    def med(wl, cont, epoch, key):
        try:
            return out["workloads"][wl][cont]["median"][epoch][key]
        except KeyError:
            return None

    def target(name, want, value, met, note=""):
        out["targets"].append({"target": name, "want": want, "value": value,
                               "met": met, "note": note})

    ep = results["config"]["epochs"]
    b_t = med("epochs", "baseline", 0, "epoch_s")
    for cont in ("shardcast", "shardcast-cache"):
        s_t = med("epochs", cont, 0, "epoch_s")
        if b_t and s_t:
            r = b_t / s_t
            target("epoch time, baseline / %s, one epoch at %dx%d" % (
                cont, results["config"]["nodes"], results["config"]["workers"]),
                ">= 3", round(r, 2), r >= 3)
    b_503 = med("epochs", "baseline", 0, "store_503")
    for cont in ("shardcast", "shardcast-cache"):
        s_503 = med("epochs", cont, 0, "store_503")
        if b_503 is not None and s_503 is not None:
            name = "503s at the store, baseline / %s, one epoch" % cont
            if not b_503:
                target(name, ">= 10", "baseline got no 503 (%g vs %g)"
                       % (b_503, s_503), None, "not throttled: no verdict")
                continue
            r = b_503 / s_503 if s_503 else float("inf")
            target(name, ">= 10",
                   "%s (%g vs %g)" % ("inf" if r == float("inf") else round(r, 2),
                                      b_503, s_503), r >= 10)
    for e in range(1, ep):
        v = med("epochs", "shardcast-cache", e, "store_shard_bytes")
        if v is not None:
            target("cache >= dataset: shard bytes read from the store in epoch %d"
                   % (e + 1), "0", int(v), v == 0)
    v = med("jobs", "shardcast-cache", 0, "store_shard_bytes")
    if v is not None:
        extra = v - ds["tar_bytes"]
        target("cache >= dataset: %d concurrent jobs, shard bytes read beyond "
               "one copy of the dataset" % results["config"]["jobs"], "<= 0",
               int(extra), extra <= 0,
               "store read %.2f x the dataset" % (v / ds["tar_bytes"]))
    for e in range(1, ep):
        v = med("epochs", "shardcast-cache50", e, "store_shard_bytes")
        if v is not None:
            frac = v / ds["tar_bytes"]
            target("cache = 50%%: epoch %d reads from the store" % (e + 1),
                   "<= 55% of the dataset", "%.1f%%" % (100 * frac), frac <= 0.55)
    return out


def _f(v, fmt="%.1f", none="–"):
    if v is None:
        return none
    return fmt % v


def _mb(v):
    return _f(v / 1e6 if v is not None else None, "%.0f")


def render(results):
    s = results.get("summary") or summarize(results)
    cfg = results["config"]
    ds = results["dataset"]
    L = []
    L.append("# shardcast throttled-store benchmark, %s\n" % results["date"])
    L.append("Command: `%s` (%.0f s). Tree %s%s.\n" % (
        results["command"], results.get("session_s", 0),
        results["tree"].get("commit", "?")[:7],
        " (uncommitted: %s)" % ", ".join(results["tree"]["uncommitted"])
        if results["tree"].get("uncommitted") else ""))
    m = results.get("machine", {})
    L.append("Machine: %s cores, %s; load average at start %s, at the end %s.\n" % (
        m.get("nproc", "?"), m.get("cpu_model", "?"),
        ", ".join("%.2f" % x for x in m.get("loadavg_start", [])),
        ", ".join("%.2f" % x for x in m.get("loadavg_end", [])) or "?"))
    loads = sorted(r["loadavg_1m"] for r in results["runs"] if "loadavg_1m" in r)
    if loads:
        L.append("Load average (1 min) when the runs started: %.1f to %.1f, "
                 "median %.1f (other work shares the machine).\n"
                 % (loads[0], loads[-1], median(loads)))
    L.append("Store: s3rver behind the token-bucket proxy, %g requests/s "
             "(burst %g), %s per connection; 503 SlowDown above. Dataset: %d "
             "shards x %d samples of ~%d KiB = %d samples, %.0f MB. Baseline "
             "boto3 retries: mode %s, max_attempts %d. Medians of %d round(s); "
             "contenders alternate.\n" % (
                 cfg["rate"], cfg["burst"],
                 "%.0f MB/s" % (cfg["conn_bps"] / 1e6) if cfg["conn_bps"] else "no cap",
                 ds["shape"]["shards"], ds["shape"]["samples_per_shard"],
                 ds["shape"]["size"] // 1024, ds["samples"], ds["tar_bytes"] / 1e6,
                 cfg["baseline_retry_mode"], cfg["baseline_max_attempts"],
                 cfg["runs"]))
    na = {c: v["reason"] for c, v in results["available"].items() if not v["ok"]}
    for c, why in na.items():
        L.append("- `%s`: not available: %s\n" % (c, why))
    if na:
        L.append("")

    wl = s["workloads"].get("epochs", {})
    if wl:
        L.append("## One epoch, %d nodes x %d workers\n" % (cfg["nodes"], cfg["workers"]))
        L.append("First epoch of the epochs workload (fresh server, empty cache). "
                 "Store figures include everything from the run's start (the "
                 "workers' listings, the server's listing). Retries: boto3's "
                 "RetryAttempts summed over the workers (baseline), shardcastd's "
                 "`shardcast_fetch_retries_total` (shardcast).\n")
        L.append("| contender | runs ok | epoch s | samples/s | x baseline | "
                 "503s at store | retries | store requests (GET) | store MB | "
                 "first batch s |")
        L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        b_t = wl.get("baseline", {}).get("median", {}).get(0, {}).get("epoch_s")
        for cont, c in wl.items():
            e0 = c["median"].get(0, {})
            t = e0.get("epoch_s")
            L.append("| %s | %d/%d | %s | %s | %s | %s | %s | %s (%s) | %s | %s |" % (
                LABELS.get(cont, cont), c["ok"], c["runs"], _f(t),
                _f(e0.get("samples_per_s"), "%.0f"),
                _f(b_t / t if b_t and t else None, "%.2f"),
                _f(e0.get("store_503"), "%.0f"), _f(e0.get("retries"), "%.0f"),
                _f(e0.get("store_requests"), "%.0f"),
                _f(e0.get("store_gets"), "%.0f"), _mb(e0.get("store_bytes")),
                _f(e0.get("ttfs_s"), "%.2f")))
        L.append("")
        L.append("Store requests of that epoch by method and answer (medians):\n")
        L.append("| contender | LIST/GET 200 | GET 206 (ranged) | 404 | 503 | HEAD |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for cont, c in wl.items():
            e0 = c["median"].get(0, {})
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                LABELS.get(cont, cont), _f(e0.get("store_200"), "%.0f"),
                _f(e0.get("store_206"), "%.0f"), _f(e0.get("store_404"), "%.0f"),
                _f(e0.get("store_503"), "%.0f"), _f(e0.get("store_heads"), "%.0f")))
        L.append("")
        L.append("## %d epochs, %d nodes x %d workers\n" % (
            cfg["epochs"], cfg["nodes"], cfg["workers"]))
        L.append("Per epoch (1 / 2 / ...): wall time, shard bytes read from the "
                 "store (GET answers of .tar objects), 503s and requests at the "
                 "store. One server for the whole run (epochs follow each other; "
                 "no prefetch).\n")
        L.append("| contender | epoch s | total s | shard MB from store | 503s | "
                 "store requests | cache hit MB |")
        L.append("|---|---|--:|---|---|---|---|")
        for cont, c in wl.items():
            eps = sorted(c["median"])
            def row(key, fmt):
                return " / ".join(fmt(c["median"][e].get(key)) for e in eps)
            tot = None
            if eps and all(c["median"][e].get("epoch_s") for e in eps):
                tot = sum(c["median"][e]["epoch_s"] for e in eps)
            L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                LABELS.get(cont, cont), row("epoch_s", _f), _f(tot),
                row("store_shard_bytes", _mb),
                row("store_503", lambda v: _f(v, "%.0f")),
                row("store_requests", lambda v: _f(v, "%.0f")),
                row("cache_hit_bytes", _mb) if cont != "baseline" else "–"))
        L.append("")

    wj = s["workloads"].get("jobs", {})
    if wj:
        L.append("## %d concurrent jobs on one dataset, %d nodes x %d workers each\n"
                 % (cfg["jobs"], cfg["job_nodes"], cfg["job_workers"]))
        L.append("Both jobs start at once (different seeds); wall time until the "
                 "last job's epoch ends.\n")
        L.append("| contender | runs ok | wall s | samples/s (all jobs) | "
                 "503s at store | retries | store requests (HEAD) | shard MB from "
                 "store | x dataset |")
        L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for cont, c in wj.items():
            e0 = c["median"].get(0, {})
            sb = e0.get("store_shard_bytes")
            L.append("| %s | %d/%d | %s | %s | %s | %s | %s (%s) | %s | %s |" % (
                LABELS.get(cont, cont), c["ok"], c["runs"], _f(e0.get("epoch_s")),
                _f(e0.get("samples_per_s"), "%.0f"), _f(e0.get("store_503"), "%.0f"),
                _f(e0.get("retries"), "%.0f"), _f(e0.get("store_requests"), "%.0f"),
                _f(e0.get("store_heads"), "%.0f"),
                _mb(sb), _f(sb / ds["tar_bytes"] if sb is not None else None, "%.2f")))
        L.append("")

    wr = s["workloads"].get("rates", {})
    if wr:
        conts = []
        for c in wr.values():
            if c["contender"] not in conts:
                conts.append(c["contender"])
        rates = sorted({c["rate"] for c in wr.values()},
                       key=lambda r: float("inf") if r == 0 else r, reverse=True)
        L.append("## One epoch against the store's rate, %d nodes x %d workers\n"
                 % (cfg["nodes"], cfg["workers"]))
        L.append("The store's request rate R (burst R; 0: no limit). Each cell: "
                 "epoch s / 503s at the store / store requests.\n")
        L.append("| R (req/s) | " + " | ".join(LABELS.get(c, c) for c in conts) + " |")
        L.append("|--:|" + "---|" * len(conts))
        for r in rates:
            cells = []
            for cont in conts:
                c = wr.get("%s@%g" % (cont, r))
                e0 = c["median"].get(0, {}) if c else {}
                if not c or not e0:
                    cells.append("failed" if c else "–")
                    continue
                cells.append("%s / %s / %s" % (_f(e0.get("epoch_s")),
                                               _f(e0.get("store_503"), "%.0f"),
                                               _f(e0.get("store_requests"), "%.0f")))
            L.append("| %s | %s |" % ("no limit" if r == 0 else "%g" % r,
                                       " | ".join(cells)))
        L.append("")

    errs = [(wlname, cont, e) for wlname, w in s["workloads"].items()
            for cont, c in w.items() for e in c["errors"]]
    if errs:
        L.append("## Failed runs\n")
        for wlname, cont, e in errs:
            L.append("- %s / %s: `%s`" % (wlname, cont, e.replace("`", "'").replace("\n", " ")[:400]))
        L.append("")

    L.append("## Targets (issue 14)\n")
    L.append("| target | want | measured | met |")
    L.append("|---|---|---|---|")
    for t in s["targets"]:
        verdict = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
        L.append("| %s | %s | %s | %s |" % (t["target"], t["want"], t["value"],
                                            verdict
                                            + (" (%s)" % t["note"] if t["note"] else "")))
    if not s["targets"]:
        L.append("| (no target could be evaluated: contenders missing) | | | |")
    L.append("")
    return "\n".join(L) + "\n"


def main(argv):
    with open(argv[1]) as f:
        results = json.load(f)
    results["summary"] = summarize(results)
    sys.stdout.write(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
