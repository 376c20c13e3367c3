"""Tests of the fixture generators (no server needed): tests/tools/mkfixtures.py
writes the tar flavours it claims, reproducibly, with a manifest that agrees
with the WebDataset rule; tests/tools/mksigv4.py writes complete, reproducible
and self-consistent SigV4 vectors."""

import filecmp
import gzip
import hashlib
import hmac
import json
import os
import subprocess
import sys

import pytest

from shardcast_testlib import REPO, make_fixture_corpus, wds_samples

MKSIGV4 = os.path.join(REPO, "tests", "tools", "mksigv4.py")


def same_tree(a, b):
    """Both directory trees hold the same files with the same bytes."""
    cmp = filecmp.dircmp(a, b)
    assert not cmp.left_only and not cmp.right_only and not cmp.funny_files
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    assert not mismatch and not errors, mismatch + errors
    for sub in cmp.common_dirs:
        same_tree(os.path.join(a, sub), os.path.join(b, sub))


def tar_headers(path):
    """(typeflag, magic+version, name field, data) of every header block of a
    tar file (gunzipped first when it is gzip)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    out, off = [], 0
    while off + 512 <= len(data) and data[off:off + 512] != b"\0" * 512:
        h = data[off:off + 512]
        size = int(h[124:136].strip(b"\0 ") or b"0", 8)
        out.append((h[156:157], h[257:265], h[:100].split(b"\0")[0],
                    data[off + 512:off + 512 + size]))
        off += 512 + (size + 511) // 512 * 512
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("fixtures") / "wds")
    return d, make_fixture_corpus(d)


def test_corpus_is_reproducible(corpus, tmp_path):
    d, _ = corpus
    again = str(tmp_path / "again")
    make_fixture_corpus(again)
    same_tree(d, again)


def test_corpus_tar_flavours(corpus):
    d, m = corpus
    shards = {s["file"]: s for s in m["shards"]}
    assert sorted(shards) == sorted(f for f in os.listdir(d) if f != "manifest.json")
    for f, s in shards.items():
        with open(os.path.join(d, f), "rb") as fh:
            assert (fh.read(2) == b"\x1f\x8b") == (s["filter"] == "gzip"), f
        magic = {"gnu": b"ustar  \0", "pax": b"ustar\x0000"}[s["tar"]]
        assert all(h[1] == magic for h in tar_headers(os.path.join(d, f))), f
    # GNU long names: a ././@LongLink 'L' header carries the name.
    gnu = tar_headers(os.path.join(d, "gnu-dirs.tar"))
    longlinks = [h for h in gnu if h[0] == b"L"]
    assert longlinks and all(h[2] == b"././@LongLink" for h in longlinks)
    assert any(h[0] == b"5" for h in gnu)  # directory members
    # pax: an extended header with an mtime record before every member.
    pax = tar_headers(os.path.join(d, "pax.tar"))
    assert len(pax) == 2000
    for x, member in zip(pax[0::2], pax[1::2]):
        assert x[0] == b"x" and x[2] == b"././@PaxHeader" and member[0] == b"0"
        assert x[3].split(b" ", 1)[1].startswith(b"mtime=")
    # pax path records for UTF-8 and long names.
    paths = [h[3] for h in tar_headers(os.path.join(d, "pax-names.tar.gz"))
             if h[0] == b"x"]
    assert any("données/été".encode() in p for p in paths)
    assert any(len(p) > 200 for p in paths)


def test_manifest_agrees_with_the_webdataset_rule(corpus):
    d, m = corpus
    for shard in m["shards"]:
        want = [s for s in m["samples"] if s["shard"] == shard["file"]]
        got = wds_samples(os.path.join(d, shard["file"]))
        assert len(got) == len(want) == shard["samples"]
        for (key, fields), w in zip(got, want):
            assert key == w["key"]
            assert [(n, len(v), hashlib.sha256(v).hexdigest()) for n, v in fields.items()] \
                == [(f["name"], f["size"], f["sha256"]) for f in w["fields"]]
        keys = {k for k, _ in got}
        for s in shard["skipped"]:
            assert s["member"] not in keys and s["member"].split(".")[0] not in keys
    assert m["total_samples"] == len(m["samples"])


def run_mksigv4(out):
    subprocess.run([sys.executable, MKSIGV4, "--out", out], check=True,
                   capture_output=True)


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def test_sigv4_vectors(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_mksigv4(a)
    run_mksigv4(b)
    same_tree(a, b)
    with open(os.path.join(a, "cases.json")) as f:
        cases = json.load(f)["cases"]
    assert sorted(os.listdir(os.path.join(a, "v4"))) == cases and len(cases) >= 40
    n_query = 0
    for name in cases:
        d = os.path.join(a, "v4", name)
        with open(os.path.join(d, "context.json")) as f:
            ctx = json.load(f)
        modes = ["header"] + (["query"] if ctx.get("query_signing", True) else [])
        n_query += "query" in modes
        for mode in modes:
            def read(what):
                with open(os.path.join(d, "%s-%s.txt" % (mode, what)), encoding="utf-8") as f:
                    return f.read()
            creq, sts, sig = read("canonical-request"), read("string-to-sign"), read("signature")
            # The string to sign hashes the canonical request, and the
            # signature is the SigV4 HMAC chain over it.
            lines = sts.split("\n")
            assert lines[3] == hashlib.sha256(creq.encode()).hexdigest()
            date, region, service, _ = lines[2].split("/")
            k = _hmac(("AWS4" + ctx["credentials"]["secret_access_key"]).encode(), date)
            for part in (region, service, "aws4_request"):
                k = _hmac(k, part)
            assert hmac.new(k, sts.encode(), hashlib.sha256).hexdigest() == sig
            assert "Signature=" + sig in read("signed-request") or \
                "X-Amz-Signature=" + sig in read("signed-request")
    assert n_query >= len(cases) - 6
