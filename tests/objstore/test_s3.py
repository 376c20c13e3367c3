"""S3 sources against s3rver (tests/support/s3rver.py): ListObjectsV2 with
continuation tokens over more than 1000 shards and nested prefixes, brace
patterns, an epoch identical to the one from local files, a missing shard
under on_error, refused credentials, and faults injected by the fault
proxy between shardcast and s3rver."""

import pytest

from objstore_support import (NSHARDS, SAMPLES_PER_SHARD, FaultProxy, Rule,
                      io_stats, lines_without_url)

EPOCH = ("--seed", 5, "--epoch", 1, "--interleave", 3, "--buffer", 40)
PARTS = ("--part-size", 65536, "--parts", 3)
# Every injected fault may land on one and the same part (the proxy fires
# its rules on the first matching requests and a throttled engine runs
# one transfer at a time), so the retry budget covers all of them.
FAST_RETRY = ("--retries", 30, "--retry-base-ms", 20, "--retry-max-ms",
              200, "--stall-ms", 1000)
MANY = 1100


def s3env(endpoint):
    return {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
            "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": endpoint}


def local_epoch(dump, dataset):
    rc, out, err = dump.run(str(dataset) + "/", *EPOCH)
    rows = lines_without_url(out)
    assert len(rows) == NSHARDS * SAMPLES_PER_SHARD
    return rows


@pytest.fixture(scope="module")
def many(s3):
    """MANY tiny shard names (and a few that are not shards) under many/,
    some one and two levels deeper, so the listing needs continuation
    tokens and the parallel walk over sub-prefixes."""
    from concurrent.futures import ThreadPoolExecutor
    keys = ["many/s-%05d.tar" % i for i in range(MANY)]
    keys += ["many/sub/x-%03d.tar.gz" % i for i in range(30)]
    keys += ["many/sub/deeper/y-%03d.tgz" % i for i in range(20)]
    keys += ["many/other/z-%03d.tar.zst" % i for i in range(10)]
    others = ["many/README.md", "many/sub/index.json", "many/s-00001.tar.idx"]
    with ThreadPoolExecutor(max_workers=16) as ex:
        list(ex.map(lambda k: s3.put_bytes("data", k, b"x"), keys + others))
    return sorted(keys)


def test_list_more_than_1000(dump, s3, many):
    rc, out, err = dump.run("s3://data/many/", "--list",
                            env=s3env(s3.endpoint))
    got = [line.split("\t")[1] for line in out.splitlines()]
    assert got == ["s3://data/" + k for k in many]
    assert all(line.split("\t")[2] == "1" for line in out.splitlines())


def test_list_through_faults(dump, s3, many):
    rules = [Rule.slowdown(count=3, query="list-type"),
             Rule.error(500, count=2, query="list-type"),
             Rule.reset(after_bytes=5000, count=2, query="list-type")]
    with FaultProxy(upstream=s3.endpoint, rules=rules) as proxy:
        rc, out, err = dump.run("s3://data/many/", "--list", *FAST_RETRY,
                                env=s3env(proxy.url))
        fired = sum(r["fired"] for r in proxy.rules())
    got = [line.split("\t")[1] for line in out.splitlines()]
    assert got == ["s3://data/" + k for k in many]
    assert fired == 7


def test_s3_listed_epoch_equals_local(dump, dataset, s3):
    want = local_epoch(dump, dataset)
    rc, out, err = dump.run("s3://data/train/", *EPOCH, *PARTS, "--stats",
                            env=s3env(s3.endpoint))
    assert lines_without_url(out) == want
    assert all(l.split("\t")[1].startswith("s3://data/train/shard-")
               for l in out.splitlines())
    assert io_stats(err)["errors"] == "0"


def test_s3_brace_epoch_equals_local(dump, dataset, s3):
    want = local_epoch(dump, dataset)
    src = "s3://data/train/shard-{000000..%06d}.tar" % (NSHARDS - 1)
    rc, out, err = dump.run(src, *EPOCH, env=s3env(s3.endpoint))
    assert lines_without_url(out) == want


def test_s3_endpoint_from_config_and_path_style(dump, dataset, s3):
    want = local_epoch(dump, dataset)
    env = s3env(s3.endpoint)
    del env["AWS_ENDPOINT_URL_S3"]
    rc, out, err = dump.run("s3://data/train/", *EPOCH, "--endpoint",
                            s3.endpoint, "--path-style", env=env)
    assert lines_without_url(out) == want


def test_s3_faults_give_identical_epoch(dump, dataset, s3):
    want = local_epoch(dump, dataset)
    rules = [
        Rule.slowdown(count=8, method="GET", path="/train/"),
        Rule.reset(after_bytes=20000, count=3, method="GET", path="/train/"),
        Rule.truncate(after_bytes=40000, count=3, method="GET",
                      path="/train/"),
        Rule.error(500, count=2, method="GET", path="/train/"),
        Rule.stall(seconds=3, after_bytes=5000, count=1, method="GET",
                   path="/train/"),
    ]
    with FaultProxy(upstream=s3.endpoint, rules=rules, seed=1) as proxy:
        rc, out, err = dump.run("s3://data/train/", *EPOCH, *PARTS,
                                *FAST_RETRY, "--stats",
                                env=s3env(proxy.url))
        fired = sum(r["fired"] for r in proxy.rules())
    assert lines_without_url(out) == want
    st = io_stats(err)
    assert fired == 17
    assert int(st["throttles"]) >= 8
    assert int(st["retries"]) >= 10
    assert st["errors"] == "0"


def test_s3_missing_shard_skip(dump, s3):
    src = "s3://data/train/shard-{000000..%06d}.tar" % NSHARDS
    rc, out, err = dump.run(src, *EPOCH, "--on-error", "skip",
                            env=s3env(s3.endpoint))
    assert len(out.splitlines()) == NSHARDS * SAMPLES_PER_SHARD
    assert "shards_skipped=1" in err


def test_s3_missing_shard_fail_names_url_status_code(dump, s3):
    src = "s3://data/train/shard-{000000..%06d}.tar" % NSHARDS
    rc, out, err = dump.run(src, *EPOCH, "--on-error", "fail",
                            env=s3env(s3.endpoint), check=False)
    assert rc == 1
    assert "s3://data/train/shard-%06d.tar" % NSHARDS in err
    assert "status=404" in err and "code=NoSuchKey" in err


def test_s3_injected_404_follows_on_error(dump, s3):
    rules = [Rule.notfound(path="shard-000004")]
    with FaultProxy(upstream=s3.endpoint, rules=rules) as proxy:
        rc, out, err = dump.run("s3://data/train/", *EPOCH, "--on-error",
                                "skip", env=s3env(proxy.url))
        assert "shards_skipped=1" in err
        assert len(out.splitlines()) == (NSHARDS - 1) * SAMPLES_PER_SHARD
        rc, out, err = dump.run("s3://data/train/", *EPOCH, "--on-error",
                                "fail", env=s3env(proxy.url), check=False)
    assert rc == 1 and "shard-000004.tar" in err and "status=404" in err


def test_s3_refused_credentials_keep_secret(dump, s3):
    env = s3env(s3.endpoint)
    env["AWS_ACCESS_KEY_ID"] = "NOSUCHKEYID"
    env["AWS_SECRET_ACCESS_KEY"] = "very-secret-value-1234"
    env["AWS_SESSION_TOKEN"] = "session-token-secret-5678"
    rc, out, err = dump.run("s3://data/train/", *EPOCH, "-v", env=env,
                            check=False)
    assert rc == 1
    assert "status=403" in err and "s3://data/train/" in err
    assert "very-secret-value-1234" not in err
    assert "session-token-secret-5678" not in err


def test_s3_special_keys(dump, dataset, s3):
    """Keys with space, '+', '=', '%' and non-ASCII are encoded the way they
    are signed, listed and read back."""
    data = (dataset / "shard-000000.tar").read_bytes()
    names = ["odd/a b.tar", "odd/c+d.tar", "odd/e=f.tar", "odd/g%h.tar",
             "odd/\u00fcber.tar"]
    for n in names:
        s3.put_bytes("data", n, data)
    rc, out, err = dump.run("s3://data/odd/", "--list",
                            env=s3env(s3.endpoint))
    got = [line.split("\t")[1] for line in out.splitlines()]
    assert got == sorted("s3://data/" + n for n in names)
    rc, out, err = dump.run("s3://data/odd/", "--interleave", 1,
                            env=s3env(s3.endpoint))
    assert len(out.splitlines()) == len(names) * SAMPLES_PER_SHARD
