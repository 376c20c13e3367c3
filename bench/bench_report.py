"""Turns the benchmark's run records into medians, ratios and target
verdicts (summarize), and writes results.json, results.md and results.png
(write_all). The PNG needs matplotlib (python3-matplotlib, installed by
bench/deps.sh); without it the JSON and Markdown are still written and the
JSON says why there is no plot.

Also usable on its own to re-render a results.json:
    /usr/bin/python3 bench/bench_report.py bench/results/latest/results.json
"""

import json
import os
import re
import statistics
import sys

# Allowance for the server's fixed memory (code, libraries, libcurl and
# MHD state, allocator slack) on top of its configured buffers.
SERVER_FIXED_OVERHEAD_KIB = 64 * 1024
# GETs "do not grow with W": the largest W may use this many more GETs
# than the smallest (retries of a loaded store), and no more.
GETS_TOLERANCE = 0.02

TARGETS = {
    "tokens_py_vs_baseline": 20.0,
    "images_py_vs_ceiling": 0.60,
    "images_c_vs_ceiling": 0.80,
    # Issue 13, Python consumers.
    "py_vs_dl_ceiling": 0.90,
    "worker_cpu_vs_baseline": 0.25,
    "modes_tokens_vs_baseline": 20.0,
    "modes_images_vs_dl_ceiling": 1.0,
    # Issue 13, C consumers and the server.
    "tokens_c_vs_ceiling_w4": 0.60,
    "tokens_c_samples_per_s_w4": 250000.0,
    "one_stream_c_vs_curl": 0.60,
    "server_cpu_s_per_gb_images": 0.5,
    "server_cpu_us_per_sample_tokens": 5.0,
}
# The batched and tensor modes of the Python client.
MODE_CONTENDERS = ("shardcast-py-frames-batched", "shardcast-py-frames-tensor")


def _median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _get(rec, path):
    cur = rec
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


FIELDS = {
    "samples_per_s": "samples_per_s", "mb_per_s": "mb_per_s",
    "steady_samples_per_s": "steady_samples_per_s",
    "ttfs_s": "ttfs_s", "cpu_s": "cpu_s",
    "cpu_us_per_sample": "cpu_us_per_sample",
    "server_rss_kib": "rss.server_kib", "client_max_rss_kib": "rss.client_max_kib",
    "client_sum_rss_kib": "rss.client_sum_kib", "store_gets": "store.gets",
    "store_requests": "store.requests", "store_bytes": "store.bytes",
    "store_cpu_s": "store.cpu_s", "samples": "samples",
    "server_cpu_s": "cpu_by_role.shardcastd",
    "loader_main_cpu_s": "cpu_by_role.loader-main",
    "loader_main_epoch_cpu_s": "cpu_by_role.loader-main-epoch_cpu_s",
    "loader_main_verify_s": "cpu_by_role.loader-main-verify_s",
    "loader_workers_cpu_s": "cpu_by_role.loader-workers",
    "bench_cpu_s": "cpu_by_role.shardcast-bench",
}


def _parse_bytes(text):
    m = re.match(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", text or "", re.I)
    if not m:
        return None
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(m.group(1)) * mult[m.group(2).upper()]


def _server_default(results, flag):
    """The default of a server flag from its --help text, or None."""
    text = results.get("config", {}).get("server_help", "")
    m = re.search(r"--%s\b.*?\n\s*default: ([^;\n]+)" % re.escape(flag), text)
    return m.group(1).strip() if m else None


def summarize(results):
    """Adds results["summary"] (one entry per contender x shape x W) and
    results["targets"]."""
    cells = {}
    for r in results["runs"]:
        cells.setdefault((r["contender"], r["shape"], r["workers"]), []).append(r)
    info = {c["name"]: c for c in results["contenders"]}
    summary = []
    for (name, shape, w), recs in sorted(cells.items(),
                                         key=lambda kv: (kv[0][1], kv[0][2])):
        ok = [r for r in recs if r["status"] == "ok"]
        e = {"contender": name, "shape": shape, "workers": w,
             "source": info.get(name, {}).get("source"),
             "family": info.get(name, {}).get("family"),
             "runs": len(recs), "runs_ok": len(ok),
             "statuses": sorted({r["status"] for r in recs}),
             "reasons": sorted({r.get("reason", "")[:300] for r in recs
                                if r["status"] != "ok"})}
        for k, path in FIELDS.items():
            e[k] = _median([_get(r, path) for r in ok])
        sps = [r["samples_per_s"] for r in ok]
        e["samples_per_s_min"] = min(sps) if sps else None
        e["samples_per_s_max"] = max(sps) if sps else None
        verified = [r for r in ok if r.get("verify")]
        e["exactly_once"] = (all(r["verify"].get("ok") for r in verified)
                             if verified else None)
        e["exactly_once_runs"] = len(verified)
        e["verify_failures"] = sum(1 for r in recs if r["status"] == "failed"
                                   and "exactly-once" in r.get("reason", ""))
        ds = results["datasets"].get(shape, {})
        if e["store_bytes"] is not None and ds.get("tar_bytes"):
            e["read_amplification"] = e["store_bytes"] / ds["tar_bytes"]
        else:
            e["read_amplification"] = None
        summary.append(e)
    by = {(e["contender"], e["shape"], e["workers"]): e for e in summary}
    for e in summary:
        src = e["source"]
        ceil = by.get(("ceiling-curl" if src == "http" else "ceiling-curl-s3",
                       e["shape"], e["workers"]))
        base = by.get(("baseline-" + (src or "http"), e["shape"], e["workers"]))
        # The HTTP (nginx) ceiling is the machine's; also give it for S3 rows.
        nginx = by.get(("ceiling-curl", e["shape"], e["workers"]))
        e["x_ceiling"] = _ratio(e, ceil)
        e["x_nginx_ceiling"] = _ratio(e, nginx)
        e["x_baseline"] = _ratio(e, base)
        e["x_dl_ceiling"] = _ratio(e, by.get(("dataloader-ceiling", e["shape"],
                                              e["workers"])))
    results["summary"] = summary
    results["targets"] = _targets(results, by)
    return results


def _server_cpu_us(e):
    """shardcastd's CPU per delivered sample (µs), or None."""
    if not e or e.get("server_cpu_s") is None or not e.get("samples"):
        return None
    return e["server_cpu_s"] / e["samples"] * 1e6


def _server_cpu_per_gb(e):
    """shardcastd's core-seconds per GB (10^9 B) of payload delivered."""
    if not e or e.get("server_cpu_s") is None or not e.get("samples") or \
            not e.get("samples_per_s") or not e.get("mb_per_s"):
        return None
    gb = e["samples"] / e["samples_per_s"] * e["mb_per_s"] / 1e3
    return e["server_cpu_s"] / gb if gb else None


def _target(tid, contender, shape, w, e, measured, unit, higher=True):
    """One row of the targets table for TARGETS[tid]."""
    return {"id": tid, "contender": contender, "shape": shape, "workers": w,
            "measured": measured, "threshold": TARGETS[tid], "unit": unit,
            "met": _verdict(measured, TARGETS[tid], higher=higher),
            "note": _why_missing(e)}


def _server_targets(results, by):
    """Issue 13's targets for C consumers and the server's CPU."""
    out = []
    ws = results["config"]["workers"]
    c = "shardcast-c"
    if 4 in ws:
        e = by.get((c, "tokens", 4))
        out.append(_target("tokens_c_vs_ceiling_w4", c, "tokens", 4, e,
                           e and e.get("x_ceiling"), "x nginx ceiling samples/s"))
        out.append(_target("tokens_c_samples_per_s_w4", c, "tokens", 4, e,
                           e and e.get("samples_per_s"), "samples/s"))
    if 1 in ws:
        e = by.get((c, "images", 1))
        out.append(_target("one_stream_c_vs_curl", c, "images", 1, e,
                           e and e.get("x_ceiling"), "x one curl from nginx (W=1)"))
    for w in ws:
        e = by.get((c, "images", w))
        out.append(_target("server_cpu_s_per_gb_images", c, "images", w, e,
                           _server_cpu_per_gb(e),
                           "shardcastd core-seconds per GB delivered",
                           higher=False))
        e = by.get((c, "tokens", w))
        out.append(_target("server_cpu_us_per_sample_tokens", c, "tokens", w, e,
                           _server_cpu_us(e),
                           "shardcastd CPU µs per 1 KiB sample", higher=False))
    return out


def _worker_cpu_us(e):
    """DataLoader workers' CPU per sample (µs), or None."""
    if not e or e.get("loader_workers_cpu_s") is None or not e.get("samples"):
        return None
    return e["loader_workers_cpu_s"] / e["samples"] * 1e6


def _python_targets(results, by):
    """Issue 13's Python targets: every frames contender >= 0.9x the
    dataloader-ceiling at every W; its workers' CPU per sample <= 1/4 of the
    baseline workers'; the batched and tensor modes >= 20x the baseline at
    1 KiB and above the dataloader-ceiling at 100 KiB."""
    out = []
    ws = results["config"]["workers"]
    py = [c["name"] for c in results["contenders"]
          if c["family"] == "shardcast-py" and c["source"] == "http"
          and "frames" in c["name"]]
    for shape in results["datasets"]:
        for w in ws:
            for name in py:
                e = by.get((name, shape, w))
                v = e and e.get("x_dl_ceiling")
                out.append({"id": "py_vs_dl_ceiling", "contender": name, "shape": shape,
                            "workers": w, "measured": v,
                            "threshold": TARGETS["py_vs_dl_ceiling"],
                            "unit": "x dataloader-ceiling samples/s",
                            "met": _verdict(v, TARGETS["py_vs_dl_ceiling"]),
                            "note": _why_missing(e)})
                mine = _worker_cpu_us(e)
                base = _worker_cpu_us(by.get(("baseline-http", shape, w)))
                v = mine / base if mine is not None and base else None
                out.append({"id": "worker_cpu_vs_baseline", "contender": name,
                            "shape": shape, "workers": w, "measured": v,
                            "threshold": TARGETS["worker_cpu_vs_baseline"],
                            "unit": "client worker CPU/sample over the baseline "
                                    "worker's (%s vs %s µs)" % (
                                        "%.0f" % mine if mine is not None else "–",
                                        "%.0f" % base if base is not None else "–"),
                            "met": _verdict(v, TARGETS["worker_cpu_vs_baseline"],
                                            higher=False),
                            "note": _why_missing(e)})
                if name not in MODE_CONTENDERS:
                    continue
                if shape == "tokens":
                    v = e and e.get("x_baseline")
                    tid, unit = "modes_tokens_vs_baseline", "x baseline samples/s"
                else:
                    v = e and e.get("x_dl_ceiling")
                    tid, unit = "modes_images_vs_dl_ceiling", \
                        "x dataloader-ceiling samples/s (must exceed)"
                met = _verdict(v, TARGETS[tid])
                if tid == "modes_images_vs_dl_ceiling" and v is not None:
                    met = v > TARGETS[tid]
                out.append({"id": tid, "contender": name, "shape": shape,
                            "workers": w, "measured": v, "threshold": TARGETS[tid],
                            "unit": unit, "met": met, "note": _why_missing(e)})
    return out


def _ratio(e, ref):
    if ref is None or not ref.get("samples_per_s") or e.get("samples_per_s") is None:
        return None
    return e["samples_per_s"] / ref["samples_per_s"]


def _verdict(value, threshold, higher=True):
    if value is None:
        return None
    return value >= threshold if higher else value <= threshold


def _targets(results, by):
    out = []
    ws = results["config"]["workers"]
    py = [c["name"] for c in results["contenders"]
          if c["family"] == "shardcast-py" and c["source"] == "http"]
    for w in ws:
        for name in py:
            e = by.get((name, "tokens", w))
            v = e and e.get("x_baseline")
            out.append({"id": "tokens_py_vs_baseline", "contender": name,
                        "shape": "tokens", "workers": w, "measured": v,
                        "threshold": TARGETS["tokens_py_vs_baseline"],
                        "unit": "x baseline samples/s",
                        "met": _verdict(v, TARGETS["tokens_py_vs_baseline"]),
                        "note": _why_missing(e)})
        for name in py:
            e = by.get((name, "images", w))
            v = e and e.get("x_ceiling")
            out.append({"id": "images_py_vs_ceiling", "contender": name,
                        "shape": "images", "workers": w, "measured": v,
                        "threshold": TARGETS["images_py_vs_ceiling"],
                        "unit": "x nginx ceiling samples/s",
                        "met": _verdict(v, TARGETS["images_py_vs_ceiling"]),
                        "note": _why_missing(e)})
        e = by.get(("shardcast-c", "images", w))
        v = e and e.get("x_ceiling")
        out.append({"id": "images_c_vs_ceiling", "contender": "shardcast-c",
                    "shape": "images", "workers": w, "measured": v,
                    "threshold": TARGETS["images_c_vs_ceiling"],
                    "unit": "x nginx ceiling samples/s",
                    "met": _verdict(v, TARGETS["images_c_vs_ceiling"]),
                    "note": _why_missing(e)})
    out += _python_targets(results, by)
    out += _server_targets(results, by)
    shardcast = [c["name"] for c in results["contenders"]
                 if c["family"] in ("shardcast-py", "shardcast-c")]
    buffer_bytes = _parse_bytes(_server_default_flag(results, "buffer-bytes"))
    # Per-stream queues (the first server) and the shared feed window (the
    # server with shared epochs), whichever this server has.
    queue_bytes = _parse_bytes(_server_default(results, "queue-bytes") or "")
    window_bytes = _parse_bytes(_server_default_flag(results, "window-bytes"))
    for name in shardcast:
        for shape in results["datasets"]:
            cells = [by.get((name, shape, w)) for w in ws]
            gets = [(w, c["store_gets"]) for w, c in zip(ws, cells)
                    if c and c.get("store_gets") is not None]
            if len(gets) >= 2:
                lo = min(g for _, g in gets)
                hi = gets[-1][1]
                met = hi <= lo * (1 + GETS_TOLERANCE) + 1
                out.append({"id": "gets_flat", "contender": name, "shape": shape,
                            "workers": [w for w, _ in gets],
                            "measured": [g for _, g in gets],
                            "threshold": "GETs at the largest W <= %.0f%% over "
                                         "the smallest" % (GETS_TOLERANCE * 100),
                            "unit": "object-store GETs per epoch", "met": met,
                            "note": "" if len(gets) == len(ws) else
                            "measured at W=%s only" % [w for w, _ in gets]})
            ds = results["datasets"][shape]
            for w, c in zip(ws, cells):
                if not c or c.get("server_rss_kib") is None:
                    continue
                shuffle = results["config"]["shuffle_buffer"]
                largest = ds.get("largest_buffer_bytes")
                buf = largest if largest is not None else shuffle * ds[
                    "mean_sample_bytes"]
                if buffer_bytes:
                    buf = min(buf, buffer_bytes)
                bound_kib = (buf + w * (queue_bytes or 0) + (window_bytes or 0)) \
                    / 1024 + SERVER_FIXED_OVERHEAD_KIB
                out.append({"id": "server_rss_bounded", "contender": name,
                            "shape": shape, "workers": w,
                            "measured": c["server_rss_kib"],
                            "threshold": round(bound_kib),
                            "unit": "KiB peak RSS of shardcastd (bound: shuffle "
                                    "buffer content + feed window bytes + W x "
                                    "queue-bytes, where the server has them, "
                                    "+ 64 MiB)",
                            "met": c["server_rss_kib"] <= bound_kib, "note": ""})
            for w, c in zip(ws, cells):
                src = "http" if not name.endswith("-s3") else "s3"
                base = by.get(("baseline-" + src, shape, w))
                if not c or c.get("ttfs_s") is None or not base or \
                        base.get("ttfs_s") is None:
                    continue
                out.append({"id": "ttfs_vs_baseline", "contender": name,
                            "shape": shape, "workers": w,
                            "measured": c["ttfs_s"], "threshold": base["ttfs_s"],
                            "unit": "s to first sample (baseline's value as "
                                    "threshold)",
                            "met": c["ttfs_s"] <= base["ttfs_s"], "note": ""})
    return out


def _server_default_flag(results, flag):
    """The value in effect for a server flag: the one the benchmark passed,
    else the server's default."""
    flags = results["config"].get("server_flags", [])
    if "--" + flag in flags:
        return flags[flags.index("--" + flag) + 1]
    return _server_default(results, flag) or ""


def _why_missing(e):
    if e is None:
        return "not run"
    if e.get("runs_ok"):
        return ""
    return "; ".join(e.get("reasons") or e.get("statuses") or [])[:300]


# -- rendering ------------------------------------------------------------------

def _fmt(v, spec="%.0f", none="–"):
    return none if v is None else spec % v


def _mib(kib):
    return None if kib is None else kib / 1024.0


def render_markdown(results):
    lines = []
    m = results["machine"]
    lines.append("# shardcast benchmark results (%s run)" % results["mode"])
    lines.append("")
    lines.append("Command: `%s`  " % results["command"])
    lines.append("Started %s, took %.0f s. Tree: %s (%s)%s." % (
        results["started"], results.get("duration_s", 0),
        results["tree"].get("commit", "?")[:12], results["tree"].get("subject", ""),
        "; uncommitted changes in %d files" % len(results["tree"]["uncommitted"])
        if results["tree"].get("uncommitted") else ""))
    lines.append("Machine: %s CPUs (%s), %s GiB RAM; Python %s, torch %s, %s." % (
        m.get("nproc"), m.get("cpu_model"), _mem_total(m.get("free_g", "")),
        m["versions"].get("python"), m["versions"].get("torch"),
        m["versions"].get("nginx", "").replace("nginx version: ", "")))
    cfg = results["config"]
    lines.append("Config: W = %s consumers; shuffle buffer %d samples; "
                 "DataLoader batch_size %d, %s, pin_memory off; %d run(s), "
                 "medians; server flags `%s`." % (
                     ", ".join(map(str, cfg["workers"])), cfg["shuffle_buffer"],
                     cfg["batch_size"], cfg["collate"], cfg["runs"],
                     " ".join(cfg["server_flags"])))
    lines.append("")
    lines.append("Datasets:")
    for name, d in results["datasets"].items():
        lines.append("- `%s`: %s, %d shards, %d samples, %.1f MB of tar, mean "
                     "sample %.0f B" % (name, d["shape"]["label"],
                                        d["shape"]["shards"], d["samples"],
                                        d["tar_bytes"] / 1e6, d["mean_sample_bytes"]))
    lines.append("")
    na = [c for c in results["contenders"] if not c["available"]]
    if na:
        lines.append("Not available in this tree:")
        for c in na:
            lines.append("- `%s`: %s" % (c["name"], c["reason"]))
        lines.append("")
    for shape in results["datasets"]:
        lines.append("## %s — %s" % (shape, results["datasets"][shape]["shape"]["label"]))
        lines.append("")
        lines.append("| contender | W | samples/s | MB/s | × ceiling | × baseline "
                     "| × DL ceiling | worker CPU µs/sample | TTFS s | CPU s | CPU µs/sample "
                     "| server CPU µs/sample | server core-s/GB | server RSS MiB "
                     "| client RSS max / sum MiB | store GETs | store MB "
                     "| runs ok | exactly-once |")
        lines.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|")
        for e in results["summary"]:
            if e["shape"] != shape:
                continue
            if not e["runs_ok"]:
                lines.append("| %s | %d | %s | | | | | | | | | | | | | %s | | 0/%d | |" % (
                    e["contender"], e["workers"],
                    ", ".join(e["statuses"]) + (": " + e["reasons"][0][:80]
                                                 if e["reasons"] else ""),
                    _fmt(e.get("store_gets")), e["runs"]))
                continue
            eo = {True: "yes", False: "**NO**", None: "–"}[e["exactly_once"]]
            if e["contender"].startswith("ceiling-curl"):
                eo = "bytes"
            lines.append(
                "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s "
                "| %s / %s | %s | %s | %d/%d | %s |" % (
                    e["contender"], e["workers"], _fmt(e["samples_per_s"]),
                    _fmt(e["mb_per_s"], "%.1f"), _fmt(e["x_ceiling"], "%.2f"),
                    _fmt(e["x_baseline"], "%.2f"), _fmt(e.get("x_dl_ceiling"), "%.2f"),
                    _fmt(_worker_cpu_us(e)), _fmt(e["ttfs_s"], "%.2f"),
                    _fmt(e["cpu_s"], "%.1f"), _fmt(e["cpu_us_per_sample"], "%.0f"),
                    _fmt(_server_cpu_us(e), "%.1f"),
                    _fmt(_server_cpu_per_gb(e), "%.2f"),
                    _fmt(_mib(e["server_rss_kib"])),
                    _fmt(_mib(e["client_max_rss_kib"])),
                    _fmt(_mib(e["client_sum_rss_kib"])), _fmt(e["store_gets"]),
                    _fmt(e["store_bytes"] / 1e6 if e["store_bytes"] is not None
                         else None, "%.0f"),
                    e["runs_ok"], e["runs"], eo))
        lines.append("")
    lines.append("## Targets")
    lines.append("")
    lines.append("| target | contender | shape | W | measured | threshold | met |")
    lines.append("|---|---|---|---|--:|--:|:-:|")
    for t in results["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        meas = t["measured"]
        if isinstance(meas, list):
            meas = " → ".join(str(x) for x in meas)
        elif isinstance(meas, float):
            meas = "%.2f" % meas
        thr = t["threshold"]
        if isinstance(thr, float):
            thr = "%.2f" % thr
        lines.append("| %s | %s | %s | %s | %s | %s | %s%s |" % (
            t["id"], t["contender"], t["shape"],
            t["workers"] if not isinstance(t["workers"], list)
            else ",".join(map(str, t["workers"])),
            meas if meas is not None else "–", thr, met,
            " (%s)" % t["note"] if t.get("note") else ""))
    lines.append("")
    if results.get("profiles"):
        lines.append("## Server profiles")
        lines.append("")
        lines.append("`perf record -g` on shardcastd during one extra "
                     "shardcast-c epoch per shape (W = 4), after the runs:")
        lines.append("")
        for shape, f in results["profiles"].items():
            lines.append("- %s: %s" % (shape, "[%s](%s)" % (f, f)
                                        if f.endswith(".txt") else f))
        lines.append("")
    if results.get("plot"):
        lines.append("![benchmark plot](%s)" % results["plot"])
    elif results.get("plot_error"):
        lines.append("No plot: %s" % results["plot_error"])
    lines.append("")
    return "\n".join(lines)


def _mem_total(free_g):
    for line in free_g.splitlines():
        if line.startswith("Mem:"):
            return line.split()[1]
    return "?"


def render_plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = list(results["datasets"])
    fig, axes = plt.subplots(3, len(shapes), figsize=(6.5 * len(shapes), 13),
                             squeeze=False)
    names = [c["name"] for c in results["contenders"] if c["available"]]
    styles = {"ceiling": "--", "loader-ceiling": (0, (1, 1)), "baseline": ":",
              "shardcast-py": "-", "shardcast-c": "-."}
    fam = {c["name"]: c["family"] for c in results["contenders"]}
    colors = {n: "C%d" % i for i, n in enumerate(names)}
    rows = [("samples_per_s", "samples/s (median)", True),
            ("store_gets", "object-store GETs per epoch", True),
            ("server_rss_kib", "peak RSS, MiB (server; clients' sum dotted)", False)]
    for col, shape in enumerate(shapes):
        for row, (field, title, logy) in enumerate(rows):
            ax = axes[row][col]
            for name in names:
                pts = [(e["workers"], e.get(field)) for e in results["summary"]
                       if e["contender"] == name and e["shape"] == shape
                       and e.get(field) is not None]
                if field == "server_rss_kib":
                    pts = [(w, v / 1024) for w, v in pts]
                    cl = [(e["workers"], e["client_sum_rss_kib"] / 1024)
                          for e in results["summary"]
                          if e["contender"] == name and e["shape"] == shape
                          and e.get("client_sum_rss_kib") is not None]
                    if cl and fam.get(name) != "ceiling":
                        ax.plot([p[0] for p in cl], [p[1] for p in cl], ":",
                                marker=".", alpha=0.6, color=colors[name])
                if not pts:
                    continue
                # A dash tuple is a linestyle, not a format string.
                ax.plot([p[0] for p in pts], [p[1] for p in pts],
                        linestyle=styles.get(fam.get(name), "-"), marker="o",
                        label=name, color=colors[name])
            ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.set_xticks(results["config"]["workers"])
            ax.set_xticklabels([str(w) for w in results["config"]["workers"]])
            ax.set_xlabel("W (consumers)")
            ax.set_title("%s: %s" % (shape, title), fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if row == 0:
                ax.legend(fontsize=7, loc="best")
    fig.suptitle("shardcast benchmark (%s run, %s, %s CPUs)" % (
        results["mode"], results["started"][:10],
        results["machine"].get("nproc")), fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_all(results, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    png = os.path.join(out_dir, "results.png")
    try:
        render_plot(results, png)
        results["plot"] = "results.png"
        results.pop("plot_error", None)
    except ImportError as e:
        results["plot"] = None
        results["plot_error"] = "matplotlib is not installed (%s); run bench/deps.sh" % e
    with open(os.path.join(out_dir, "results.json.part"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(os.path.join(out_dir, "results.json.part"),
               os.path.join(out_dir, "results.json"))
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(render_markdown(results))


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: bench_report.py RESULTS_JSON")
    with open(argv[1]) as f:
        results = json.load(f)
    summarize(results)
    write_all(results, os.path.dirname(os.path.abspath(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
