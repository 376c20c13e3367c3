"""Object-set sources against s3rver (docs/operations.md "Datasets of small objects"):
a prefix of 20,000 small objects (10,000 samples of a .jpg and a .json in
one folder) read as virtual shards, exactly once against the manifest,
with every byte checked. A prefix of 5,000 more (2,500 samples) is read
by two servers, every byte checked: the same order on the second server,
which reads through 503 SlowDown bursts, connection resets and truncated
bodies. (The fault proxy forwards every GET in Python; 40,000 of them
took most of a minute.)

The objects are written straight into s3rver's on-disk store (its
FilesystemStore layout: <key>._S3rver_object and its .md5) so that setting
up 20k objects takes seconds, not minutes of PUTs.
"""
import hashlib
import json
import os
import random
import tempfile
import threading

import pytest

from objstore_support import REPO, FaultProxy, Rule, S3rver, clean_env
from test_cache import Server, SHARD  # noqa: F401 (the server helper)

import sys
sys.path.insert(0, str(REPO / "clients" / "python"))
from shardcast import FramesReader, stream_url  # noqa: E402

NSAMPLES = 10000
FEW = 2500  # samples under few/, read through the fault proxy
WORLD = 4


def put_direct(root, bucket, key, data):
    """One object in s3rver's FilesystemStore layout."""
    path = os.path.join(root, bucket, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + "._S3rver_object", "wb") as f:
        f.write(data)
    with open(path + "._S3rver_object.md5", "w") as f:
        f.write(hashlib.md5(data).hexdigest())
    # (no ._S3rver_metadata.json: s3rver takes its absence as no metadata)


@pytest.fixture(scope="module")
def store():
    rng = random.Random(17)
    want = {"train": {}, "few": {}}
    # s3rver's store in memory when /dev/shm is there: 40k+ small files
    # are created, listed (s3rver walks them) and removed much faster.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm, prefix="s3rver-objs-") as d, \
            S3rver(directory=d) as srv:
        srv.create_bucket("objs")
        for prefix, n in (("train", NSAMPLES), ("few", FEW)):
            for i in range(n):
                key = "s%05d" % i
                jpg = rng.randbytes(rng.randint(200, 3000))
                meta = json.dumps({"i": i}).encode()
                put_direct(srv.directory, "objs", "%s/%s.jpg" % (prefix, key), jpg)
                put_direct(srv.directory, "objs", "%s/%s.json" % (prefix, key),
                           meta)
                want[prefix][key] = (hashlib.sha256(jpg).hexdigest(),
                                     hashlib.sha256(meta).hexdigest())
            # names the key rule skips
            put_direct(srv.directory, "objs", prefix + "/README", b"not a sample")
            put_direct(srv.directory, "objs", prefix + "/__meta__.json", b"{}")
        yield srv, want


def s3env(endpoint):
    return clean_env({"AWS_ACCESS_KEY_ID": "S3RVER",
                      "AWS_SECRET_ACCESS_KEY": "S3RVER",
                      "AWS_REGION": "us-east-1",
                      "AWS_ENDPOINT_URL_S3": endpoint})


def wait_ready(server, job="train", timeout=300):
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = server.json("/v1/jobs/" + job)
        if st["state"] == "ready":
            return st
        assert st["state"] != "failed", st["reason"]
        time.sleep(0.2)
    pytest.fail("job not ready: %s" % st["reason"])


def read_epoch(url, job="train", epoch=0):
    """[(key, jpg hash, json hash)] in Y order (the W shares interleaved)."""
    shares = [None] * WORLD
    errors = []

    def rank(r):
        try:
            with FramesReader(stream_url(url, job, epoch, r, WORLD,
                                          fmt="frames")) as rd:
                shares[r] = [(s["__index__"], s["__key__"],
                              hashlib.sha256(s["jpg"]).hexdigest(),
                              hashlib.sha256(s["json"]).hexdigest())
                             for s in rd]
        except Exception as e:  # noqa: BLE001 (re-raised below)
            errors.append(e)

    ts = [threading.Thread(target=rank, args=(r,)) for r in range(WORLD)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return [x[1:] for x in sorted(s for sh in shares for s in sh)]


def check(got, want):
    keys = [k for k, _, _ in got]
    assert len(keys) == len(set(keys)) == len(want) - len(want) % WORLD
    for k, hj, hm in got:
        assert want[k] == (hj, hm), k


def test_small_objects_exactly_once(store):
    """20k objects read by one server: exactly once, every byte."""
    import time
    srv, want = store
    a = Server("s3://objs/train/?objects=500", env=s3env(srv.endpoint))
    try:
        t0 = time.time()
        st = wait_ready(a)
        listing_s = time.time() - t0
        assert st["shards"] == NSAMPLES // 500
        t0 = time.time()
        clean = read_epoch(a.url)
        epoch_s = time.time() - t0
    finally:
        a.stop()
    print("20k objects: listed and grouped in %.1f s, epoch read in %.1f s"
          % (listing_s, epoch_s))
    check(clean, want["train"])


def test_small_objects_deterministic_and_through_faults(store):
    """One server reads the set cleanly; a second one, through 503
    SlowDown bursts, resets, truncated bodies and 503s on the objects,
    gives the same order and the same bytes."""
    srv, want = store
    source = "s3://objs/few/?objects=100"
    a = Server(source, env=s3env(srv.endpoint))
    try:
        st = wait_ready(a)
        assert st["shards"] == FEW // 100
        clean = read_epoch(a.url)
    finally:
        a.stop()
    check(clean, want["few"])
    objects = r"\.(jpg|json)$"
    rules = [Rule.slowdown(count=30, path=objects),
             Rule.reset(after_bytes=500, count=10, path=objects),
             Rule.truncate(after_bytes=300, count=10, path=objects),
             Rule.error(503, count=20, path=objects)]
    with FaultProxy(upstream=srv.endpoint, rules=rules) as proxy:
        b = Server(source, env=s3env(proxy.url))
        try:
            wait_ready(b)
            faulty = read_epoch(b.url)
        finally:
            b.stop()
        fired = [r["fired"] for r in proxy.rules()]
        gets = proxy.count(method="GET", path=objects)
    assert fired == [30, 10, 10, 20], fired
    assert faulty == clean
    # one GET per object, plus the retries
    assert gets >= 2 * FEW


def test_parallel_folders_pair_by_name(store):
    """pair=folders: images/000123.jpg + labels/000123.cls form one sample
    (the first folder is dropped from the member name)."""
    srv, _ = store
    srv.create_bucket("pairs")  # its own bucket: s3rver lists by walking
    rng = random.Random(5)
    want = {}
    for i in range(2000):
        key = "%06d" % i
        img = rng.randbytes(rng.randint(100, 900))
        cls = str(i % 10).encode()
        put_direct(srv.directory, "pairs", "p/images/%s.jpg" % key, img)
        put_direct(srv.directory, "pairs", "p/labels/%s.cls" % key, cls)
        want[key] = (hashlib.sha256(img).hexdigest(), cls)
    put_direct(srv.directory, "pairs", "p/index.txt", b"not in a folder")
    a = Server("s3://pairs/p/?objects=200&pair=folders",
               env=s3env(srv.endpoint))
    try:
        st = wait_ready(a)
        assert st["shards"] == 10
        got = []
        with FramesReader(stream_url(a.url, "train", 0, 0, 1,
                                     fmt="frames")) as rd:
            for s in rd:
                got.append((s["__key__"], hashlib.sha256(s["jpg"]).hexdigest(),
                            s["cls"]))
    finally:
        a.stop()
    assert len(got) == len({k for k, _, _ in got}) == 2000
    for k, h, c in got:
        assert want[k] == (h, c), k
