"""Recorded goldens of what streams deliver.

The data path is being rebuilt (one path: every epoch planned, remote
bytes staged once, the feed retired). test_plan_golden.py compares the two
data planes live; once the feed is gone there is no second plane to
compare with. This module holds what the tree delivered before that
change, recorded as digests in goldens/streams.json, and checks the
server against them: the same samples at the same positions with the same
bytes, and the same END summary, for

- source kinds: a local directory, the same shards over HTTP (nginx, a
  brace pattern) and from S3 (s3rver, a listed prefix), an object set (a
  tree of small files);
- shard formats: ustar, GNU and pax tar (long names, pax records, bad
  samples of a repeated field, skipped members, a shard of skipped members
  only), zip, tar.gz, tar.zst, and a tar with a damaged header (its
  sample is bad);
- a mixed job (two weighted sources and an epoch_size);
- every partition policy (a job each), epochs 0 and 1 (the first pass and
  an epoch that may be planned), worlds of 1-5 with every rank, start and
  global_start (past the end too), fields filters (an unknown field too),
  both formats.

The datasets, jobs and requests come from fixed seeds (plan_testlib's
writers; the compressors' bytes may differ between library versions, the
members they hold do not). A response's digest is over its status,
whether it ended properly, and each sample's global index, position,
shard file name (not its URL: the test's paths and ports vary), key and
every field's SHA-256; the END summary (or error trailer) is kept as
JSON with URLs reduced to their file names and compared on its own.

Record (only from a tree whose output is the reference):
    SHARDCAST_GOLDEN_RECORD=1 SHARDCAST_BIN=build/shardcastd \\
        /usr/bin/python3 -m pytest tests/server/test_stream_goldens.py
The goldens in the repository were recorded from 4988e3c (main before
the data path changed); the END summaries' "skipped" again after the
epoch's losses were told in it (every share of a case whose shards hold
bad samples names them; no sample digest changed). A change that alters
what a case delivers on purpose records the cases again and says so.
"""

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import warnings

import pytest

from plan_testlib import (fetch, make_objects_dataset, make_random_dataset,
                          parse_body, stream_query)
from server_testlib import Nginx, Server, get_json
from test_plan_golden import (POLICIES, SERVER_ARGS, fetch_settled, rand_job,
                              random_requests, wait_ready)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from support.s3rver import S3rver  # noqa: E402
GOLDEN = os.path.join(HERE, "goldens", "streams.json")
RECORD = os.environ.get("SHARDCAST_GOLDEN_RECORD") == "1"
SEED = 20261127
EPOCHS = (0, 1, 2)
COMBOS = 10       # request combinations per job (every rank of each world)


def zstd_shards(ds):
    """Every .tar of ds compressed to .tar.zst (the model is unchanged:
    the members are)."""
    model = {}
    for name, samples in ds.model.items():
        src = os.path.join(ds.path, name)
        subprocess.run(["zstd", "-q", "-3", "--rm", "-o", src + ".zst", src], check=True)
        model[name + ".zst"] = samples
    ds.model = model


def damage_header(path, which):
    """Flip a byte of the mtime field of member `which`'s header (its
    checksum then fails): the sample it belongs to is bad."""
    import tarfile
    with tarfile.open(path) as tf:
        members = tf.getmembers()
    off = members[which].offset
    with open(path, "r+b") as f:
        f.seek(off + 136)
        b = f.read(1)
        f.seek(off + 136)
        f.write(bytes([b[0] ^ 0x01]))


def build(root, nginx_port, s3_bucket):
    """The datasets and the jobs, from SEED alone."""
    rng = random.Random(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile: duplicate names (bad samples)
        d1 = make_random_dataset(os.path.join(root, "d1"), rng.randrange(1 << 30),
                                 [("ustar", 30), ("gnu", 25), ("pax", 30), ("empty", 0),
                                  ("ustar", 20)], "a")
        d3 = make_random_dataset(os.path.join(root, "d3"), rng.randrange(1 << 30),
                                 [("ustar", 20), ("zip", 25), ("gnu", 15), ("targz", 25)],
                                 "c")
        dz = make_random_dataset(os.path.join(root, "dz"), rng.randrange(1 << 30),
                                 [("pax", 25), ("ustar", 30)], "z")
        dd = make_random_dataset(os.path.join(root, "dd"), rng.randrange(1 << 30),
                                 [("ustar", 30), ("ustar", 25)], "g")
    zstd_shards(dz)
    damage_header(os.path.join(dd.path, sorted(dd.model)[0]), 7)
    objdir = os.path.join(root, "objects")
    os.makedirs(objdir)
    objects = make_objects_dataset(objdir, rng.randrange(1 << 30), 50)
    mix_size = rng.randint(150, 300)

    def total(ds):
        return sum(len(v) for v in ds.model.values())

    jobs, sizes, fields = [], {}, {}
    d1_fields = sorted({f for v in d1.model.values() for _, fs in v for f in fs})
    for pol in POLICIES:
        p = pol.replace("even-", "")
        for name, ds in (("d1", d1), ("d3", d3), ("zst", dz), ("dmg", dd)):
            jobs.append(rand_job(rng, "%s-%s" % (name, p), ds.path, pol))
            sizes[jobs[-1]["name"]] = total(ds)
        jobs.append(rand_job(rng, "mix-" + p, None, pol, epoch_size=mix_size, sources=[
            {"name": "one", "source": d1.path, "weight": 0.6},
            {"name": "two", "source": d3.path, "weight": 0.4}]))
        jobs[-1].pop("source")
        sizes[jobs[-1]["name"]] = mix_size
        jobs.append(rand_job(rng, "obj-" + p, objdir + "/?objects=12", pol))
        sizes[jobs[-1]["name"]] = len(objects)
        names = sorted(d1.model)
        lo, hi = names[0][2:8], names[-1][2:8]
        src = "http://127.0.0.1:%d/a-{%s..%s}.tar" % (nginx_port, lo, hi)
        jobs.append(rand_job(rng, "http-" + p, src, pol))
        sizes[jobs[-1]["name"]] = total(d1)
        jobs.append(rand_job(rng, "s3-" + p, "s3://%s/d1/" % s3_bucket, pol))
        sizes[jobs[-1]["name"]] = total(d1)
    reqs = []
    for j in jobs:
        reqs += random_requests(rng, j["name"], sizes[j["name"]], EPOCHS, COMBOS,
                                d1_fields)
    return {"d1": d1, "jobs": jobs, "requests": reqs}


def base_name(u):
    return u.rsplit("/", 1)[-1] if isinstance(u, str) else u


def normalize(o):
    """URLs and paths in a trailer reduced to their last component."""
    if isinstance(o, dict):
        return {k: normalize(v) for k, v in o.items()}
    if isinstance(o, list):
        return [normalize(v) for v in o]
    if isinstance(o, str) and ("/" in o):
        return re.sub(r"(?:https?://|/)[^\s\"',]*/([^/\s\"',]+)", r"\1", o)
    return o


def digest(st, body, complete, fmt):
    h = hashlib.sha256()
    rec = {"status": st, "complete": bool(complete)}
    if st != 200:
        rec["body"] = body[:200].decode("utf-8", "replace").strip()
        h.update(json.dumps(rec, sort_keys=True).encode())
        return h.hexdigest(), 0, rec
    p = parse_body(fmt, body)
    rec["outcome"] = p.outcome
    rec["problem"] = p.problem
    h.update(json.dumps(rec, sort_keys=True).encode())
    for s in p.samples:
        fields = [[k, hashlib.sha256(v).hexdigest()] for k, v in sorted(s["fields"].items())]
        h.update(json.dumps([s["index"], s["position"], base_name(s["shard"]),
                             s["key"], fields]).encode())
    rec["trailer"] = normalize(p.trailer)
    return h.hexdigest(), len(p.samples), rec


@pytest.fixture(scope="module")
def world(server_binary, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("stream-goldens"))
    # nginx serves d1 (made next) for the http jobs, s3rver a copy of it
    ng = Nginx(os.path.join(root, "d1"), root)
    s3 = None
    try:
        w = build(root, ng.port, "gold")
        s3 = S3rver()
        s3.start()
        s3.create_bucket("gold")
        s3.upload_dir("gold", w["d1"].path, prefix="d1/")
        env = dict(s3.env())
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        config = os.path.join(root, "config.json")
        with open(config, "w") as f:
            json.dump({"jobs": w["jobs"]}, f, indent=1)
        state = os.path.join(root, "state")
        os.makedirs(state)
        srv = Server(server_binary, ["--config", config, "--state-dir", state]
                     + SERVER_ARGS, root, env=env)
        try:
            for j in w["jobs"]:
                assert wait_ready(srv, j["name"]), "job %s not ready: %s" % (
                    j["name"], srv.log())
            yield srv, w
        finally:
            rc = srv.stop()
            assert rc in (0, None), "shardcastd exit %s\n%s" % (rc, srv.log())
    finally:
        if s3:
            s3.stop()
        ng.stop()


def test_streams_match_the_recorded_goldens(world):
    srv, w = world
    got = {}
    # Epoch 0 of every job first, whole, as one consumer (the first pass
    # indexes the shards; epoch 1 may then be planned), then the requests.
    for j in w["jobs"]:
        path = stream_query(j["name"], 0, 0, 1, "frames")
        st, _, body, complete = fetch_settled(srv, path, "frames")
        got[path] = digest(st, body, complete, "frames")
    for path, fmt in w["requests"]:
        st, _, body, complete = fetch_settled(srv, path, fmt)
        got[path] = digest(st, body, complete, fmt)
    out = {k: {"digest": d, "samples": n, "response": r} for k, (d, n, r) in got.items()}
    if RECORD:
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN, "w") as f:
            json.dump({"seed": SEED, "cases": out}, f, indent=0, sort_keys=True)
            f.write("\n")
        return
    with open(GOLDEN) as f:
        ref = json.load(f)
    assert ref["seed"] == SEED
    ref = ref["cases"]
    assert set(ref) == set(out), "the requests are not the recorded ones: %d missing, %d new" % (
        len(set(ref) - set(out)), len(set(out) - set(ref)))
    samples = sum(v["samples"] for v in out.values())
    assert samples > 5000, "too few samples compared: %d" % samples
    bad = []
    for k in sorted(out):
        a, b = ref[k], out[k]
        if a["response"] != b["response"]:
            bad.append("%s: response %s, recorded %s" % (k, b["response"], a["response"]))
        elif a["digest"] != b["digest"]:
            bad.append("%s: %d samples, recorded %d; the samples or their bytes differ"
                       % (k, b["samples"], a["samples"]))
    assert not bad, "%d of %d streams differ from the goldens, e.g.\n  %s" % (
        len(bad), len(out), "\n  ".join(bad[:8]))
