"""Tests of the `shardcast` command (clients/c/cli_*.c) against the real
shardcastd: every subcommand, its --help, its output and its exit codes for
the errors users meet (unknown job, unreachable server, missing source, bad
options, a failing stream, a verification failure)."""

import functools
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import struct
import re
import subprocess
import tarfile
import threading
import time
import urllib.request

import pytest

TIMEOUT = 60

# Exit codes documented in `shardcast --help`.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NOTFOUND, EXIT_CONNECT, EXIT_STREAM, \
    EXIT_VERIFY, EXIT_AUTH, EXIT_HTTP = range(9)


def run(cli, *args, env=None, check_rc=None):
    e = dict(os.environ)
    e.pop("SHARDCAST_SERVER", None)
    e.pop("SHARDCAST_TOKEN", None)
    if env:
        e.update(env)
    p = subprocess.run([cli] + list(args), capture_output=True, timeout=TIMEOUT, env=e)
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p


def dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sample_hash(fields):
    h = hashlib.sha256()
    for name in sorted(fields):
        h.update(name.encode() + b"\0" + struct.pack("<Q", len(fields[name])) + fields[name])
    return h.hexdigest()


def tar_samples(data):
    """{key: (index, position, {field: bytes})} and the trailer name of a
    shardcast tar stream."""
    out, last = {}, None
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tf:
        for m in tf:
            last = m.name
            if m.name.startswith("__shardcast_"):
                continue
            key = m.pax_headers.get("SHARDCAST.key")
            body = tf.extractfile(m).read()
            if key is not None:
                cur = out.setdefault(key, (int(m.pax_headers["SHARDCAST.index"]),
                                           int(m.pax_headers["SHARDCAST.position"]), {}))
            ext = m.name.rsplit("/", 1)[-1].split(".", 1)[1]
            cur[2][ext] = body
    return out, last


# --------------------------------------------------------------------------
# help and usage


def test_help_lists_commands_and_exit_codes(cli):
    p = run(cli, "--help", check_rc=EXIT_OK)
    text = p.stdout.decode()
    for word in ("ls SOURCE", "cat", "stat", "bench", "Exit codes", "SHARDCAST_SERVER"):
        assert word in text
    for code in range(9):
        assert "\n  %d  " % code in text


@pytest.mark.parametrize("cmd", ["ls", "cat", "stat", "bench"])
def test_every_command_has_help(cli, cmd):
    p = run(cli, cmd, "--help", check_rc=EXIT_OK)
    assert p.stdout.decode().startswith("usage: shardcast %s" % cmd)


def test_usage_errors(cli):
    assert run(cli).returncode == EXIT_USAGE
    p = run(cli, "frobnicate", check_rc=EXIT_USAGE)
    assert b"unknown command" in p.stderr
    run(cli, "ls", check_rc=EXIT_USAGE)
    run(cli, "ls", "--bogus", "x", check_rc=EXIT_USAGE)
    p = run(cli, "cat", "--job", "train", check_rc=EXIT_USAGE)
    assert b"no server" in p.stderr
    p = run(cli, "cat", "--server", "http://127.0.0.1:1", "--job", "t", "--rank", "4",
            "--world", "4", check_rc=EXIT_USAGE)
    assert b"--rank must be below --world" in p.stderr
    run(cli, "cat", "--server", "http://127.0.0.1:1", "--job", "t", "--format", "zip",
        check_rc=EXIT_USAGE)
    run(cli, "bench", "--server", "http://127.0.0.1:1", "--job", "t", "-n", "0",
        check_rc=EXIT_USAGE)
    run(cli, "stat", check_rc=EXIT_USAGE)


# --------------------------------------------------------------------------
# ls


def test_ls_local(cli, cli_wds):
    p = run(cli, "ls", cli_wds.path, check_rc=EXIT_OK)
    lines = p.stdout.decode().splitlines()
    shards = cli_wds.manifest["shards"]
    assert lines[0].split() == ["SIZE", "URL"]
    rows = [l.split() for l in lines[1:-1]]
    assert [os.path.basename(r[1]) for r in rows] == [s["file"] for s in shards]
    assert [int(r[0]) for r in rows] == [s["bytes"] for s in shards]
    assert lines[-1].startswith("%d shards, " % len(shards))


def test_ls_count_and_json(cli, cli_wds):
    p = run(cli, "ls", "--count", cli_wds.path, check_rc=EXIT_OK)
    lines = p.stdout.decode().splitlines()
    assert lines[0].split() == ["SIZE", "SAMPLES", "URL"]
    assert all(int(l.split()[1]) == 21 for l in lines[1:-1])
    assert lines[-1].endswith(", %d samples" % cli_wds.total)
    p = run(cli, "ls", "--count", "--json", cli_wds.path, check_rc=EXIT_OK)
    doc = json.loads(p.stdout)
    assert doc["count"] == 5 and doc["total_samples"] == cli_wds.total
    assert doc["total_size"] == sum(s["bytes"] for s in cli_wds.manifest["shards"])


def test_ls_brace_pattern_and_missing(cli, cli_wds, tmp_path):
    pat = os.path.join(cli_wds.path, "train-{000001..000002}.tar")
    p = run(cli, "ls", pat, check_rc=EXIT_OK)
    assert p.stdout.decode().count("train-00000") == 2
    p = run(cli, "ls", str(tmp_path / "nothing-here"), check_rc=EXIT_NOTFOUND)
    assert b"nothing-here" in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(cli, "ls", str(empty))
    assert p.returncode in (EXIT_OK, EXIT_NOTFOUND)
    if p.returncode == EXIT_OK:
        assert p.stdout.decode().splitlines()[-1].startswith("0 shards")


def test_ls_lists_only_shards_and_all_lists_everything(cli, cli_wds, tmp_path):
    """A directory holds more than shards (the manifest, index sidecars,
    notes, compressed shards under every accepted name, a subdirectory):
    ls shows exactly what a job with that source reads, --all everything
    with its kind."""
    d = tmp_path / "mixed"
    d.mkdir()
    src = os.path.join(cli_wds.path, cli_wds.manifest["shards"][0]["file"])
    raw = open(src, "rb").read()
    import gzip
    for name in ("a.tar", "b.tar.gz", "c.tgz", "D.TAR", "e.Tar.Gz"):
        (d / name).write_bytes(gzip.compress(raw) if ".gz" in name.lower() or
                               name.endswith(".tgz") else raw)
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-o", str(d / "f.tar.zst"), src], check=True)
    shards = sorted(n.name for n in d.iterdir())
    for name in ("manifest.json", "README", "a.tar.scidx", "a.tar.partial", "tar",
                 "notes.txt", "g.tar.bz2"):
        (d / name).write_bytes(b"not a shard")
    (d / "sub").mkdir()
    (d / "sub" / "h.tar").write_bytes(raw)
    others = ["README", "a.tar.partial", "a.tar.scidx", "g.tar.bz2", "manifest.json",
              "notes.txt", "tar"]

    p = run(cli, "ls", str(d), check_rc=EXIT_OK)
    lines = p.stdout.decode().splitlines()
    assert lines[0].split() == ["SIZE", "URL"]
    assert [os.path.basename(l.split()[1]) for l in lines[1:-1]] == sorted(shards, key=str.encode)
    assert lines[-1].startswith("%d shards, " % len(shards))
    # The server reads the same list: its status counts the same shards.
    p = run(cli, "ls", "--json", str(d), check_rc=EXIT_OK)
    doc = json.loads(p.stdout)
    assert doc["count"] == len(shards) == len(doc["shards"])
    assert "shard" not in doc["shards"][0]

    p = run(cli, "ls", "--all", str(d), check_rc=EXIT_OK)
    lines = p.stdout.decode().splitlines()
    assert lines[0].split() == ["SIZE", "KIND", "URL"]
    rows = {os.path.basename(l.split()[2]): l.split()[1] for l in lines[1:-1]}
    assert rows == dict({n: "shard" for n in shards}, **{n: "other" for n in others})
    assert lines[-1].startswith("%d shards, " % len(shards))
    assert lines[-1].endswith("; %d other objects, not read by a job" % len(others))
    # --count reads only the shards; --json marks each object.
    p = run(cli, "ls", "--all", "--count", "--json", str(d), check_rc=EXIT_OK)
    doc = json.loads(p.stdout)
    assert doc["count"] == len(shards) and doc["other_objects"] == len(others)
    assert doc["total_samples"] == 21 * len(shards)
    kinds = {os.path.basename(o["url"]): o for o in doc["objects"]}
    assert all(kinds[n]["shard"] and kinds[n]["samples"] == 21 for n in shards)
    assert all(kinds[n]["shard"] is False and "samples" not in kinds[n] for n in others)
    # --all marks what a job reads, whatever the name: a file named on its
    # own is read as a shard (and fails there if it is none), as by a job.
    p = run(cli, "ls", "--all", str(d / "notes.txt") + "::" + str(d), check_rc=EXIT_OK)
    lines = p.stdout.decode().splitlines()
    assert lines[1].split()[1:] == ["shard", str(d / "notes.txt")]
    assert sum(1 for l in lines[2:-1] if l.split()[1] == "shard") == len(shards)
    # A directory with no shard at all: not a source; --all still lists it.
    e = tmp_path / "noshards"
    e.mkdir()
    (e / "manifest.json").write_text("{}")
    run(cli, "ls", str(e), check_rc=EXIT_NOTFOUND)
    p = run(cli, "ls", "--all", str(e), check_rc=EXIT_OK)
    assert p.stdout.decode().splitlines()[-1].startswith("0 shards")


def test_ls_matches_what_the_server_serves(cli, cli_server_factory, cli_wds, tmp_path):
    d = tmp_path / "served"
    d.mkdir()
    for s in cli_wds.manifest["shards"][:2]:
        shutil.copy(os.path.join(cli_wds.path, s["file"]), d / s["file"])
    shutil.copy(os.path.join(cli_wds.path, "manifest.json"), d / "manifest.json")
    (d / "x.tar.scidx").write_bytes(b"junk")
    listed = json.loads(run(cli, "ls", "--json", str(d), check_rc=EXIT_OK).stdout)
    server = cli_server_factory(str(d), job="served")
    deadline = time.monotonic() + TIMEOUT
    while True:  # the job's source is resolved in the background
        with urllib.request.urlopen(server.url + "/v1/jobs/served", timeout=TIMEOUT) as r:
            status = json.load(r)
        if status["shards"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert listed["count"] == status["shards"] == 2, status.get("shards")


def test_ls_http(cli, cli_wds):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    handler = functools.partial(Quiet, directory=cli_wds.path)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        url = "http://127.0.0.1:%d/train-{000000..000004}.tar" % httpd.server_address[1]
        p = run(cli, "ls", "--count", url, check_rc=EXIT_OK)
        lines = p.stdout.decode().splitlines()
        assert len(lines) == 7
        assert lines[-1].endswith(", %d samples" % cli_wds.total)
        # A brace pattern over http is not listed, so sizes are unknown
        # ("-") until a shard is read; --count reads them and reports the
        # missing one.
        bad = "http://127.0.0.1:%d/missing-{0..1}.tar" % httpd.server_address[1]
        p = run(cli, "ls", bad, check_rc=EXIT_OK)
        assert p.stdout.decode().splitlines()[1].split()[0] == "-"
        p = run(cli, "ls", "--count", bad, check_rc=EXIT_NOTFOUND)
        assert b"missing-0.tar" in p.stderr
    finally:
        httpd.shutdown()
        httpd.server_close()


# --------------------------------------------------------------------------
# cat


def raw_stream(server, query):
    with urllib.request.urlopen(server.url + "/v1/jobs/train/epochs/0/stream?" + query,
                                timeout=TIMEOUT) as r:
        return r.read()


def test_cat_tar_matches_server_and_frames_converts(cli, cli_server, cli_wds, tmp_path):
    raw = raw_stream(cli_server, "rank=1&world=4")
    out_tar, out_fr = tmp_path / "a.tar", tmp_path / "b.tar"
    args = ["--server", cli_server.url, "--job", "train", "--rank", "1", "--world", "4"]
    p = run(cli, "cat", *args, "-o", str(out_tar), check_rc=EXIT_OK)
    assert b"status=ok" in p.stderr
    run(cli, "cat", *args, "--format", "frames", "-o", str(out_fr), check_rc=EXIT_OK)
    # The command re-encodes with the server's own tar encoder: same bytes.
    assert out_tar.read_bytes() == raw
    assert out_fr.read_bytes() == raw
    samples, last = tar_samples(raw)
    assert last == "__shardcast_end__"
    assert len(samples) == cli_wds.total // 4
    for key, (index, position, fields) in samples.items():
        assert index % 4 == 1
        assert sample_hash(fields) == cli_wds.by_key[key]["hash"]


def test_cat_stdout_url_start_and_fields(cli, cli_server):
    url = cli_server.url + "/v1/jobs/train/epochs/0/stream?rank=0&world=2&start=10"
    p = run(cli, "cat", "-q", url, check_rc=EXIT_OK)
    assert p.stderr == b""
    samples, last = tar_samples(p.stdout)
    assert last == "__shardcast_end__"
    assert sorted(s[1] for s in samples.values()) == list(range(10, 10 + len(samples)))
    assert len(samples) == 105 // 2 - 10
    p = run(cli, "cat", "--server", cli_server.url, "--job", "train", "--fields", "cls",
            "--format", "frames", check_rc=EXIT_OK)
    samples, _ = tar_samples(p.stdout)
    assert len(samples) == 105
    assert all(set(f) == {"cls"} for _, _, f in samples.values())


def test_cat_errors(cli, cli_server):
    p = run(cli, "cat", "--server", cli_server.url, "--job", "nope", check_rc=EXIT_NOTFOUND)
    assert b"HTTP 404" in p.stderr and p.stdout == b""
    p = run(cli, "cat", "--server", "http://127.0.0.1:%d" % dead_port(), "--job", "train",
            check_rc=EXIT_CONNECT)
    assert b"connect" in p.stderr
    p = run(cli, "cat", "--server", cli_server.url, "--job", "train", "--world", "2",
            "--start", "99999999999999999999", check_rc=EXIT_USAGE)


def test_cat_stream_failure_is_reported(cli, cli_server_factory, cli_wds, tmp_path):
    """A shard that is corrupt under on_error=fail: the stream ends with the
    server's error, the command exits 5 and its output is a tar stream that
    ends with __shardcast_error__ and no end-of-archive blocks."""
    d = tmp_path / "bad"
    d.mkdir()
    for s in cli_wds.manifest["shards"][:3]:
        shutil.copy(os.path.join(cli_wds.path, s["file"]), d / s["file"])
    (d / "train-000003.tar").write_bytes(b"this is not a tar archive" * 100)
    server = cli_server_factory(str(d), extra=["--on-error", "fail"])
    for fmt in ("tar", "frames"):
        out = tmp_path / ("out-%s.tar" % fmt)
        p = run(cli, "cat", "--server", server.url, "--job", "train", "--format", fmt,
                "--reconnects", "0", "-o", str(out), check_rc=EXIT_STREAM)
        assert b"server error" in p.stderr and b"train-000003.tar" in p.stderr
        data = out.read_bytes()
        assert b"__shardcast_error__" in data
        assert b"__shardcast_end__" not in data
        # No end-of-archive blocks after the error member's data.
        assert data.rindex(b"__shardcast_error__") > len(data) - 2048
        assert not data.endswith(b"\0" * 1024)


# --------------------------------------------------------------------------
# stat


def test_stat_job_and_list(cli, cli_server):
    run(cli, "cat", "-q", "--server", cli_server.url, "--job", "train", "--world", "2",
        check_rc=EXIT_OK)
    p = run(cli, "stat", "--server", cli_server.url, "train", check_rc=EXIT_OK)
    text = p.stdout.decode()
    lines = {l.split(None, 1)[0]: l for l in text.splitlines() if l.strip()}
    assert lines["job"].split()[1] == "train"
    assert lines["shards"].split()[1] == "5"
    assert "EPOCH" in lines
    assert "throughput" in lines and "samples/s" in lines["throughput"]
    p = run(cli, "stat", "--json", "--server", cli_server.url, "--job", "train",
            check_rc=EXIT_OK)
    assert json.loads(p.stdout)["name"] == "train"
    p = run(cli, "stat", env={"SHARDCAST_SERVER": cli_server.url}, check_rc=EXIT_OK)
    rows = p.stdout.decode().splitlines()
    assert rows[0].split()[:2] == ["JOB", "STATE"]
    assert rows[1].split()[0] == "train"


def test_stat_errors(cli, cli_server):
    p = run(cli, "stat", "--server", cli_server.url, "nope", check_rc=EXIT_NOTFOUND)
    assert b"HTTP 404" in p.stderr
    run(cli, "stat", "--server", "http://127.0.0.1:%d" % dead_port(), "train",
        check_rc=EXIT_CONNECT)


# --------------------------------------------------------------------------
# bench


def test_bench_verify(cli, cli_server, cli_wds):
    manifest = os.path.join(cli_wds.path, "manifest.json")
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "4",
            "--epoch", "1", "--verify", manifest, check_rc=EXIT_OK)
    text = p.stdout.decode()
    assert "throughput" in text and "first sample" in text and "per consumer" in text
    assert "verify           ok: 0 unknown, 0 hash mismatches, 1 missing (expected 1)" in text
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "3",
            "--format", "tar", "--epoch", "2", "--json", "--verify", manifest,
            check_rc=EXIT_OK)
    doc = json.loads(p.stdout)
    assert doc["consumers"] == 3 and doc["samples"] == cli_wds.total // 3 * 3
    assert doc["verify"]["ok"] and doc["verify"]["union_checked"]
    assert doc["verify"]["duplicates"] == 0 and doc["verify"]["missing"] == cli_wds.total % 3
    assert doc["per_consumer"]["samples"]["min"] == doc["per_consumer"]["samples"]["max"] == 35
    assert doc["ttfs_s"]["min"] > 0 and doc["samples_per_s"] > 0
    assert len(doc["consumers_detail"]) == 3


def test_bench_verify_detects_wrong_content(cli, cli_server, cli_wds, tmp_path):
    m = json.loads(open(os.path.join(cli_wds.path, "manifest.json")).read())
    m["samples"][0]["hash"] = "0" * 64
    del m["samples"][1]
    bad = tmp_path / "manifest.json"
    bad.write_text(json.dumps(m))
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "1",
            "--verify", str(bad), check_rc=EXIT_VERIFY)
    text = p.stdout.decode()
    assert "FAILED" in text and "1 unknown" in text and "1 hash mismatches" in text
    assert "content hash differs" in text and "not in the manifest" in text


def field_list(cli_wds, field, path, mangle=None):
    """A plain --verify list: "key sha256(field)" lines, with a comment, a
    blank line and CRLF endings, as people write them."""
    lines = ["# key, sha256 of the %s field" % field, ""]
    for s in cli_wds.manifest["samples"]:
        h = s["fields"][field]["sha256"]
        if mangle:
            h = mangle(s["key"], h)
        if h is not None:
            lines.append("%s  %s" % (s["key"], h))
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return str(path)


def test_bench_verify_plain_field_list(cli, cli_server, cli_wds, tmp_path):
    lst = field_list(cli_wds, "cls", tmp_path / "cls.txt")
    base = ["bench", "--server", cli_server.url, "--job", "train", "-n", "4", "--epoch", "3"]
    p = run(cli, *base, "--verify", lst, "--verify-field", "cls", check_rc=EXIT_OK)
    assert ("verify           ok: 0 unknown, 0 hash mismatches, 1 missing (expected 1)"
            in p.stdout.decode())
    # The field may be the only one streamed; the JSON says which form ran.
    p = run(cli, *base, "--verify", lst, "--verify-field", "CLS", "--fields", "cls",
            "--json", check_rc=EXIT_OK)
    v = json.loads(p.stdout)["verify"]
    assert v["ok"] and v["union_checked"] and v["format"] == "list" and v["field"] == "cls"
    # The manifest form with --verify-field takes the field's sha256 from it.
    manifest = os.path.join(cli_wds.path, "manifest.json")
    p = run(cli, *base, "--verify", manifest, "--verify-field", "json", "--json",
            check_rc=EXIT_OK)
    v = json.loads(p.stdout)["verify"]
    assert v["ok"] and v["format"] == "manifest" and v["field"] == "json"
    p = run(cli, *base, "--verify", manifest, "--json", check_rc=EXIT_OK)
    v = json.loads(p.stdout)["verify"]
    assert v["ok"] and v["format"] == "manifest" and v["field"] is None


def test_bench_verify_plain_list_reports_mismatches(cli, cli_server, cli_wds, tmp_path):
    samples = cli_wds.manifest["samples"]
    wrong, dropped = samples[5]["key"], samples[6]["key"]

    def mangle(key, h):
        if key == wrong:
            return hashlib.sha256(b"something else").hexdigest()
        return None if key == dropped else h

    lst = field_list(cli_wds, "cls", tmp_path / "bad.txt", mangle)
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "1",
            "--verify", lst, "--verify-field", "cls", check_rc=EXIT_VERIFY)
    text = p.stdout.decode()
    assert "FAILED: 1 unknown, 1 hash mismatches" in text
    assert "key %s" % wrong in text and "sha256 of field cls differs" in text
    assert "key %s" % dropped in text and "not in the manifest" in text
    # A hash of another field than the one named: every sample differs.
    lst = field_list(cli_wds, "json", tmp_path / "json.txt")
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "1",
            "--verify", lst, "--verify-field", "cls", "--json", check_rc=EXIT_VERIFY)
    assert json.loads(p.stdout)["verify"]["hash_mismatches"] == cli_wds.total
    # A field the samples do not have.
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "1",
            "--limit", "3", "--verify", lst, "--verify-field", "png", check_rc=EXIT_VERIFY)
    assert "has no field png" in p.stdout.decode()


def test_bench_verify_usage_errors(cli, cli_server, cli_wds, tmp_path):
    base = ["bench", "--server", cli_server.url, "--job", "train", "-n", "1"]
    lst = field_list(cli_wds, "cls", tmp_path / "cls.txt")
    p = run(cli, *base, "--verify", lst, check_rc=EXIT_USAGE)
    assert b"--verify-field" in p.stderr
    p = run(cli, *base, "--verify-field", "cls", check_rc=EXIT_USAGE)
    assert b"needs --verify" in p.stderr
    p = run(cli, *base, "--verify", lst, "--verify-field", "cls", "--fields", "json",
            check_rc=EXIT_USAGE)
    manifest = os.path.join(cli_wds.path, "manifest.json")
    run(cli, *base, "--verify", manifest, "--fields", "cls", check_rc=EXIT_USAGE)
    # a manifest without per-field hashes for the field asked
    p = run(cli, *base, "--verify", manifest, "--verify-field", "png", check_rc=EXIT_USAGE)
    assert b"fields.png.sha256" in p.stderr
    for bad in ("cat/1 abc\n", "onlyonetoken\n", "k %s\nk %s\n" % ("0" * 64, "1" * 64),
                "k %s\n" % ("g" * 64)):
        f = tmp_path / "bad.txt"
        f.write_text(bad)
        run(cli, *base, "--verify", str(f), "--verify-field", "cls", check_rc=EXIT_USAGE)
    # keys with spaces: the hash is the last word of the line
    f = tmp_path / "spaces.txt"
    f.write_text("a key with spaces %s\n" % ("0" * 64))
    p = run(cli, *base, "--limit", "1", "--verify", str(f), "--verify-field", "cls",
            check_rc=EXIT_VERIFY)
    assert "1 unknown" in p.stdout.decode()


def test_bench_errors(cli, cli_server, tmp_path):
    p = run(cli, "bench", "--server", cli_server.url, "--job", "nope", "-n", "2",
            check_rc=EXIT_NOTFOUND)
    assert b"rank 0" in p.stderr and b"HTTP 404" in p.stderr
    run(cli, "bench", "--server", "http://127.0.0.1:%d" % dead_port(), "--job", "train",
        check_rc=EXIT_CONNECT)
    notjson = tmp_path / "m.json"
    notjson.write_text("[1, 2")
    run(cli, "bench", "--server", cli_server.url, "--job", "train", "--verify",
        str(notjson), check_rc=EXIT_USAGE)
    # Progress on a non-terminal stderr is plain key=value lines (or none
    # for a run shorter than --interval); never terminal escapes.
    p = run(cli, "bench", "--server", cli_server.url, "--job", "train", "-n", "2",
            "--interval", "1", "--limit", "5", check_rc=EXIT_OK)
    assert b"\033[" not in p.stderr


# --------------------------------------------------------------------------
# durations, units and deprecated spellings


@pytest.fixture
def silent_server():
    """A port that accepts connections (the kernel's backlog) and never
    answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    yield "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()


def timed(cli, *args, check_rc):
    t = time.monotonic()
    p = run(cli, *args, check_rc=check_rc)
    return p, time.monotonic() - t


@pytest.mark.parametrize("args", [
    ["--connect-timeout-ms", "1s", "--idle-timeout-ms", "300ms"],
    ["--connect-timeout-ms", "1000", "--idle-timeout-ms", "300"],   # bare: ms
    ["--connect-timeout", "1s", "--idle-timeout", "300ms"],         # old names, units
])
def test_duration_options_take_units(cli, silent_server, args):
    """Durations read like shardcastd's: a unit, or a bare number in the
    option's unit (ms for -ms options). A server that never answers: the
    request gives up after the connect timeout (default 10 s), and the
    message names the idle timeout in ms."""
    p, took = timed(cli, "cat", "--server", silent_server, "--job", "x", "--reconnects", "0",
                    "-o", os.devnull, *args, check_rc=EXIT_CONNECT)
    assert b"within 300 ms" in p.stderr
    assert b"warning" not in p.stderr
    assert took < 6, took


def test_deprecated_duration_spellings_still_mean_ms(cli, silent_server):
    p, took = timed(cli, "cat", "--server", silent_server, "--job", "x", "--reconnects", "0",
                    "-o", os.devnull, "--connect-timeout", "1000", "--idle-timeout", "300ms",
                    check_rc=EXIT_CONNECT)
    assert b"within 300 ms" in p.stderr and took < 6
    err = p.stderr.decode()
    assert "use --connect-timeout-ms" in err


def test_idle_timeout_bare_number_is_seconds_as_in_shardcastd(cli, silent_server):
    """--idle-timeout names a shardcastd setting too, whose bare number is
    seconds: the CLI reads it the same way (and warns when a bare number
    looks like the old milliseconds)."""
    p, took = timed(cli, "cat", "--server", silent_server, "--job", "x", "--reconnects", "0",
                    "-o", os.devnull, "--connect-timeout-ms", "1s", "--idle-timeout", "1",
                    check_rc=EXIT_CONNECT)
    assert b"within 1000 ms" in p.stderr and took < 6, (p.stderr, took)
    assert b"warning" not in p.stderr
    p = run(cli, "cat", "--server", silent_server, "--job", "x", "--reconnects", "0",
            "-o", os.devnull, "--idle-timeout", "90000", check_rc=EXIT_USAGE)
    assert b"--idle-timeout" in p.stderr
    # A bare number that looks like the old milliseconds is warned about
    # (nothing listens on port 1: the connection fails at once).
    p = run(cli, "cat", "--server", "http://127.0.0.1:1", "--job", "x",
            "--reconnects", "0", "-o", os.devnull, "--idle-timeout", "3000")
    assert b"--idle-timeout 3000 is 3000 seconds" in p.stderr, p.stderr
    # stat: --timeout-ms and the old --timeout
    p, took = timed(cli, "stat", "--server", silent_server, "--timeout-ms", "1s", "x",
                    check_rc=EXIT_CONNECT)
    assert took < 6 and b"warning" not in p.stderr
    p, took = timed(cli, "stat", "--server", silent_server, "--timeout", "1000", "x",
                    check_rc=EXIT_CONNECT)
    assert took < 6 and b"--timeout 1000: a bare number is read as milliseconds" in p.stderr
    p, took = timed(cli, "stat", "--server", silent_server, "--timeout", "1s", "x",
                    check_rc=EXIT_CONNECT)
    assert took < 6 and b"warning" not in p.stderr


def test_duration_and_size_errors(cli, cli_server):
    base = ["cat", "--server", cli_server.url, "--job", "train", "-o", os.devnull]
    for opt, val in (("--idle-timeout-ms", "5q"), ("--idle-timeout-ms", "3Mi"),
                     ("--idle-timeout-ms", "0"), ("--idle-timeout-ms", "25h"),
                     ("--connect-timeout-ms", "1.5s"), ("--retry-budget-ms", "-1"),
                     ("--idle-timeout", "3Mi"), ("--reconnects", "3s")):
        p = run(cli, *base, opt, val, check_rc=EXIT_USAGE)
        assert b"bad value" in p.stderr, (opt, val)
    # bench --interval is in seconds (whole), as shardcastd's second-valued
    # settings
    bench = ["bench", "--server", cli_server.url, "--job", "train", "-n", "1", "--limit", "2"]
    run(cli, *bench, "--interval", "500ms", check_rc=EXIT_USAGE)
    run(cli, *bench, "--interval", "1s", check_rc=EXIT_OK)
    run(cli, *bench, "--interval", "2000ms", check_rc=EXIT_OK)
    run(cli, *bench, "--interval", "1", check_rc=EXIT_OK)
    p = run(cli, *base, "--retry-budget-ms", "2m", "--idle-timeout-ms", "1m",
            "--connect-timeout-ms", "5s", check_rc=EXIT_OK)
    assert b"warning" not in p.stderr


def option_names(text):
    """Options a --help text describes: those that start a line, and those
    of its "Deprecated:" lines."""
    names = set(re.findall(r"(?m)^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", text))
    for line in re.findall(r"(?m)^\s*Deprecated\b.*$", text):
        names |= set(re.findall(r"--([a-z][a-z0-9-]*)", line))
    return names


def test_options_shared_with_shardcastd_read_the_same(cli):
    """An option spelled the same in shardcastd and shardcast means the same
    thing in the same units. The overlap is pinned here so that a new one
    gets looked at; --idle-timeout is the one duration among them. (The
    replica set is --replicas R for shardcastd and --urls URL,... for
    shardcast: different things, different names.)"""
    from shardcast_testlib import find_server_binary
    srv = subprocess.run([find_server_binary(), "--help"], capture_output=True, text=True,
                         timeout=TIMEOUT).stdout
    server = option_names(srv)
    client = set()
    for cmd in ("ls", "index", "cat", "stat", "bench"):
        client |= option_names(run(cli, cmd, "--help", check_rc=EXIT_OK).stdout.decode())
    assert server & client == {"job", "fields", "state-dir", "token-file", "idle-timeout"}, \
        server & client
    assert re.search(r"--idle-timeout\s.*seconds", srv)
    # shardcastd reads "--idle-timeout 5m" as 300 s; shardcast reads it as
    # 5 minutes too (and no warning: a unit is unambiguous).
    p = run(cli, "cat", "--help", check_rc=EXIT_OK)
    assert b"--idle-timeout-ms" in p.stdout and b"Deprecated" in p.stdout


def test_top_help_names_each_option_under_its_command(cli):
    """`--count` is an option of ls, and the top-level help says so."""
    text = run(cli, "--help", check_rc=EXIT_OK).stdout.decode()
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if "--count" in ln)
    assert lines[at - 1].strip().startswith("ls SOURCE"), lines[at - 1:at + 1]
    assert "--count" in run(cli, "ls", "--help", check_rc=EXIT_OK).stdout.decode()
    assert "--count" not in run(cli, "index", "--help", check_rc=EXIT_OK).stdout.decode()
