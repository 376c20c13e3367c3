"""Tests of the dataset generator tests/tools/mkwds.py (no server needed):
reproducible bytes, a manifest that matches the shards, and a content hash
identical to the client's shardcast.sample_hash."""

import filecmp
import importlib.util
import os

import pytest

import shardcast

from shardcast_testlib import MKWDS, make_dataset, wds_samples


def _load_mkwds():
    spec = importlib.util.spec_from_file_location("mkwds", MKWDS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("compress", ["none", "gz", "zst"])
def test_output_is_reproducible(tmp_path, compress):
    a, b, c = (str(tmp_path / n) for n in "abc")
    args = dict(shards=3, per_shard=7, size=300, seed=2, compress=compress, prefix="p")
    make_dataset(a, **args)
    make_dataset(b, **args)
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    suffix = {"none": ".tar", "gz": ".tar.gz", "zst": ".tar.zst"}[compress]
    assert names == ["manifest.json"] + ["p-%06d%s" % (i, suffix) for i in range(3)]
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert not mismatch and not errors
    args["seed"] = 3
    make_dataset(c, **args)
    assert not filecmp.cmp(os.path.join(a, names[1]), os.path.join(c, names[1]), shallow=False)


def test_manifest_matches_shards(tmp_path):
    d = str(tmp_path)
    m = make_dataset(d, shards=2, per_shard=5, size=1000, seed=7, compress="gz")
    assert m["total_samples"] == len(m["samples"]) == 10
    listed = [(s["shard"], s["key"], s["hash"]) for s in m["samples"]]
    found = []
    for shard in m["shards"]:
        assert os.path.getsize(os.path.join(d, shard["file"])) == shard["bytes"]
        for key, fields in wds_samples(os.path.join(d, shard["file"])):
            found.append((shard["file"], key, shardcast.sample_hash(fields)))
            assert set(fields) in ({"cls", "jpg", "json"}, {"cls", "bin", "json"})
            assert 500 <= len(fields.get("jpg", fields.get("bin"))) <= 1500
            assert fields["cls"].isdigit()
    assert found == listed
    assert [s["key"] for s in m["samples"]] == ["sample%06d" % i for i in range(10)]


def test_hash_definition_is_shared_with_client():
    mkwds = _load_mkwds()
    for g in range(20):
        key, fields = mkwds.make_sample(1, g, 0, 64)
        with_meta = dict(fields, __key__=key, __index__=g)
        assert mkwds.sample_hash(fields) == shardcast.sample_hash(with_meta)
    pinned = {"bin": b"\x00\x01", "cls": b"7"}
    assert mkwds.sample_hash(pinned) == shardcast.sample_hash(pinned) == \
        "896becb66ace07fed908b69a1871f5a60e949042d01a9949e5408e6d36beab86"
