"""HTTP(S) sources through the fetch engine, against nginx on loopback:
brace patterns, an epoch identical to the one from local files, a missing
shard under on_error=skip|fail, and faults injected between shardcast and
the server."""

from objstore_support import (NSHARDS, SAMPLES_PER_SHARD, FaultProxy, Rule,
                      io_stats, lines_without_url)

EPOCH = ("--seed", 11, "--epoch", 2, "--interleave", 4, "--buffer", 50)
# Small parts so every shard is read with several parallel ranged GETs.
PARTS = ("--part-size", 65536, "--parts", 3)
# Every injected fault may land on one and the same part (the proxy fires
# its rules on the first matching requests and a throttled engine runs
# one transfer at a time), so the retry budget covers all of them.
FAST_RETRY = ("--retries", 30, "--retry-base-ms", 20, "--retry-max-ms",
              200, "--stall-ms", 1000)


def pattern(base):
    return "%s/shard-{000000..%06d}.tar" % (base, NSHARDS - 1)


def local_epoch(dump, dataset):
    rc, out, err = dump.run(pattern(dataset), *EPOCH)
    rows = lines_without_url(out)
    assert len(rows) == NSHARDS * SAMPLES_PER_SHARD
    return rows


def test_http_epoch_equals_local(dump, dataset, nginx):
    want = local_epoch(dump, dataset)
    rc, out, err = dump.run(pattern(nginx), *EPOCH, *PARTS, "--stats")
    assert lines_without_url(out) == want
    assert all(line.split("\t")[1].startswith(nginx + "/shard-")
               for line in out.splitlines())
    st = io_stats(err)
    # several ranged parts per shard, nothing retried
    assert int(st["requests"]) > NSHARDS
    assert st["retries"] == "0" and st["errors"] == "0"


def test_http_default_parts_equal_local(dump, dataset, nginx):
    rc, out, err = dump.run(pattern(nginx), *EPOCH)
    assert lines_without_url(out) == local_epoch(dump, dataset)


def test_http_missing_shard_skip(dump, dataset, nginx):
    src = "%s/shard-{000000..%06d}.tar" % (nginx, NSHARDS)  # one too many
    rc, out, err = dump.run(src, *EPOCH, "--on-error", "skip")
    assert len(out.splitlines()) == NSHARDS * SAMPLES_PER_SHARD
    assert "shards_skipped=1" in err


def test_http_missing_shard_fail(dump, nginx):
    src = "%s/shard-{000000..%06d}.tar" % (nginx, NSHARDS)
    rc, out, err = dump.run(src, *EPOCH, "--on-error", "fail", check=False)
    assert rc == 1
    assert "shard-%06d.tar" % NSHARDS in err and "status=404" in err


def test_http_faults_give_identical_epoch(dump, dataset, nginx):
    want = local_epoch(dump, dataset)
    rules = [
        Rule.slowdown(count=6, method="GET"),
        Rule.reset(after_bytes=20000, count=3, method="GET"),
        Rule.truncate(after_bytes=30000, count=3, method="GET"),
        Rule.error(502, count=2, method="GET"),
        Rule.stall(seconds=3, after_bytes=10000, count=1, method="GET"),
    ]
    with FaultProxy(upstream=nginx, rules=rules, seed=5) as proxy:
        rc, out, err = dump.run(pattern(proxy.url), *EPOCH, *PARTS,
                                *FAST_RETRY, "--stats")
        fired = sum(r["fired"] for r in proxy.rules())
    assert lines_without_url(out) == want
    st = io_stats(err)
    assert fired == 15
    # 503s and 502s always cost a retry; a reset or cut that falls after
    # the last byte of a short part costs nothing.
    assert int(st["retries"]) >= 8
    assert int(st["throttles"]) >= 6
    assert st["errors"] == "0"


def test_http_faults_without_ranged_parts(dump, dataset, nginx):
    """One GET per shard (part larger than any shard): resumes go through
    Range: bytes=N- with If-Match."""
    want = local_epoch(dump, dataset)
    rules = [Rule.reset(after_bytes=100000, count=4, method="GET"),
             Rule.truncate(after_bytes=250000, count=4, method="GET")]
    with FaultProxy(upstream=nginx, rules=rules, seed=9) as proxy:
        rc, out, err = dump.run(pattern(proxy.url), *EPOCH, "--part-size",
                                64 << 20, *FAST_RETRY, "--stats")
        ranged = [c for c in proxy.rules()]
    assert lines_without_url(out) == want
    assert sum(r["fired"] for r in ranged) == 8


def test_http_persistent_errors_exhaust_retries(dump, nginx):
    rules = [Rule.error(503, method="GET")]
    with FaultProxy(upstream=nginx, rules=rules) as proxy:
        rc, out, err = dump.run(pattern(proxy.url), *EPOCH, *FAST_RETRY,
                                "--retries", 3, "--on-error", "fail",
                                check=False)
    assert rc == 1
    assert "gave up after 4 attempts" in err and "status=503" in err
