"""Job specs are bounded before any work (SECURITY.md, "Job specs").

What used to go wrong (each seen against an ASan build):
- a PUT of 12 sources of 10^6 names each was refused only after the names
  were expanded: RSS went from 35 to 1,976 MiB and 1,675 MiB stayed;
- link-local sources (http://2852039166/, http://0xa9fea9fe/,
  http://[::ffff:169.254.169.254]/) and patterns of 10^9 names got 201, then
  every consumer a retryable 503, forever.

Now what no resolution can change is answered by the PUT (422, 409 past
the server's shards), with the server's RSS measured around the refusals;
a job whose source fails for good after resolving (missing, empty, 403,
404, over a bound) answers stream opens with a non-retryable 422 carrying
the reason, and both clients give up at once with it."""

import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

from server_testlib import get_json, make_dataset, request, stream_path, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from shardcast_testlib import find_cli_binary  # noqa: E402

import shardcast  # noqa: E402

ADMIN = "spec-admin"
# The refused PUTs may grow the server by this much at most (its request
# buffers, a log line, malloc's bookkeeping): the names are never expanded.
RSS_SLACK_KIB = 8 * 1024


def put(srv, name, spec):
    st, _, body = request(srv, "/v1/jobs/" + name, "PUT", token=ADMIN,
                          body=json.dumps(spec).encode(),
                          headers={"Content-Type": "application/json"})
    return st, body.decode()


def state(srv, name):
    return get_json(srv, "/v1/jobs/" + name, token=ADMIN)


def settled(srv, name):
    """Wait until the job has resolved or failed for good."""
    assert wait_for(lambda: state(srv, name)["state"] == "ready" or
                    state(srv, name).get("failure") == "permanent", 60), state(srv, name)
    return state(srv, name)


MILLION = "/data/s-{000000..999999}.tar"


def oversized_specs():
    mix12 = {"sources": [{"name": "m%d" % i, "source": "/d%d%s" % (i, MILLION)}
                         for i in range(12)]}
    mix256 = {"sources": [{"name": "m%d" % i, "source": "/d%d%s" % (i, MILLION)}
                          for i in range(256)]}
    return [
        ("12 sources of 10^6 names", mix12, 422, "more than --max-job-shards"),
        ("256 sources of 10^6 names", mix256, 422, "more than --max-job-shards"),
        ("12 specs of 10^6 names", {"source": " :: ".join(
            "/d%d%s" % (i, MILLION) for i in range(12))}, 422, "12000000 shards"),
        ("a pattern of 10^9 names", {"source": "/d/s-{000000000..999999999}.tar"},
         422, "1000000000 shards"),
        ("a pattern past 2^64", {"source": "/d/{0..999999}{0..999999}{0..999999}"
                                 "{0..999999}.tar"}, 422, "more than 2^64"),
        ("2000 specs", {"source": "::".join("/d/%d.tar" % i for i in range(2000))},
         422, "--max-job-sources"),
        ("unbalanced braces", {"source": "/d/s-{0..3}}.tar"}, 422, "unbalanced"),
        ("an unknown scheme", {"source": "ftp://h/s.tar"}, 422, "not a local path"),
        ("a bad port", {"source": "http://h:99999/s.tar"}, 422, "bad port"),
        ("100 hosts in braces", {"source": "http://h{1..100}.example/s.tar"}, 422,
         "hosts"),
    ]


def test_oversized_and_impossible_specs_are_refused_by_the_put(start):
    srv = start("--admin-token", ADMIN)
    # one harmless PUT first, so that lazily made buffers are in the baseline
    assert put(srv, "warm", {"source": "/nonexistent/s-{0..9}.tar"})[0] == 201
    before = srv.proc_status("VmRSS")
    for what, spec, status, needle in oversized_specs():
        st, body = put(srv, "big", spec)
        assert st == status and needle in body, (what, st, body)
        assert body.startswith("error: "), body
    after = srv.proc_status("VmRSS")
    print("VmRSS before %d KiB, after %d refused PUTs %d KiB"
          % (before, len(oversized_specs()), after))
    assert after - before <= RSS_SLACK_KIB, (before, after)
    assert request(srv, "/v1/jobs/big", token=ADMIN)[0] == 404
    assert srv.alive()


LINK_LOCAL = [
    "http://169.254.169.254/latest/s.tar",
    "http://2852039166/s.tar",                      # decimal
    "http://0xa9fea9fe/s.tar",                      # hex
    "http://0XA9FEA9FE/s.tar",
    "http://0251.0376.0251.0376/s.tar",             # octal
    "http://0xa9.0xfe.0xa9.0xfe/s.tar",             # hex parts
    "http://169.254.43518/s.tar",                   # three parts
    "http://169.16689662/s.tar",                    # two parts
    "http://169.254.169.254./s.tar",                # trailing dot
    "http://%31%36%39.254.169.254/s.tar",           # percent-encoded
    "https://user:pw@2852039166:8443/s.tar",        # userinfo and port
    "http://100.100.100.200/s.tar",                 # Alibaba metadata
    "http://[::ffff:169.254.169.254]/s.tar",        # IPv4-mapped
    "http://[::ffff:a9fe:a9fe]/s.tar",
    "http://[::169.254.169.254]/s.tar",             # IPv4-compatible
    "http://[64:ff9b::a9fe:a9fe]/s.tar",            # NAT64
    "http://[fe80::1]/s.tar",                       # fe80::/10
    "http://[fe80::1%25eth0]/s.tar",                # with a zone
    "http://[febf::1]/s.tar",
    "http://[fd00:ec2::254]/s.tar",                 # AWS IPv6 IMDS
    "http://169.254.169.{250..254}/s-{0..9}.tar",   # in a pattern's host
    "http://169.254.169.254/s.tar?objects=64",      # an object set
]


def test_link_local_sources_are_refused_in_every_spelling(start):
    srv = start("--admin-token", ADMIN)
    before = srv.proc_status("VmRSS")
    for url in LINK_LOCAL:
        st, body = put(srv, "ll", {"source": "/d/a.tar :: " + url})
        assert st == 422 and "link-local" in body, (url, st, body)
        assert "pw@" not in body  # credentials never leave the process
        # a mixed job's sources are checked alike
        st, body = put(srv, "llm", {"sources": [{"name": "a", "source": url}]})
        assert st == 422 and "sources[0] (a)" in body and "link-local" in body, body
    assert srv.proc_status("VmRSS") - before <= RSS_SLACK_KIB
    # not link-local: accepted (they resolve, or fail, later; all of them
    # loopback, so that nothing leaves the host: the other neighbours of
    # link-local addresses are in tests/unit/store/test_srccheck.c)
    for url in ["http://127.0.0.2:1/s.tar", "http://0x7f000001:1/s.tar",
                "http://2130706433:1/s.tar", "http://[::1]:1/s.tar",
                "http://[::ffff:127.0.0.1]:1/s.tar"]:
        st, body = put(srv, "ok", {"source": url})
        assert st in (200, 201), (url, st, body)


def test_link_local_sources_pass_when_allowed(start):
    srv = start("--admin-token", ADMIN, "--allow-link-local-sources", "true",
                "--fetch-retries", "1")
    # fe80::1 without a zone: connecting fails at once, nothing leaves the host
    st, body = put(srv, "ll", {"source": "http://[fe80::1]:1/s.tar"})
    assert st == 201, body
    assert wait_for(lambda: state(srv, "ll")["state"] == "failed", 60)
    assert "link-local" not in state(srv, "ll")["reason"]


def test_config_jobs_are_held_to_the_same_rules(server_binary, workdir):
    for jobs, needle in [
            ([{"name": "big", "source": "/d/s-{000000000..999999999}.tar"}],
             "--max-job-shards"),
            ([{"name": "ll", "source": "http://0xa9fea9fe/s.tar"}], "link-local"),
            ([{"name": "a", "source": "/d/s-{0..599}.tar"},
              {"name": "b", "source": "/d/s-{0..599}.tar"}], "--max-shards 1000")]:
        cfg = os.path.join(workdir, "spec-bounds-config.json")
        with open(cfg, "w") as f:
            json.dump({"jobs": jobs}, f)
        p = subprocess.run([server_binary, "--port", "0", "--config", cfg,
                            "--max-shards", "1000"],
                           capture_output=True, timeout=60)
        assert p.returncode != 0 and needle in p.stderr.decode(), (p.returncode, p.stderr)


def test_the_servers_shards_are_shared_by_its_jobs(start):
    srv = start("--admin-token", ADMIN, "--max-shards", "1000",
                "--max-job-shards", "600")
    st, body = put(srv, "a", {"source": "/d/s-{0..600}.tar"})
    assert st == 422 and "601 shards" in body and "--max-job-shards 600" in body, body
    assert put(srv, "a", {"source": "/d/s-{0..599}.tar"})[0] == 201
    st, body = put(srv, "b", {"source": "/d/s-{0..499}.tar"})
    assert st == 409 and "--max-shards 1000" in body and "hold 600" in body, body
    # a job's own PUT does not count its old spec against it
    assert put(srv, "a", {"source": "/d/s-{0..299}.tar"})[0] == 200
    assert put(srv, "b", {"source": "/d/s-{0..499}.tar"})[0] == 201
    assert request(srv, "/v1/jobs/b", "DELETE", token=ADMIN)[0] == 204
    assert put(srv, "c", {"source": "/d/s-{0..599}.tar"})[0] == 201


class Refusing(http.server.BaseHTTPRequestHandler):
    """Answers every request with the status its path names (/403/..)."""

    def _answer(self):
        code = int(self.path.split("/")[1])
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *a):
        pass


@pytest.fixture
def refusing():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def refused_for_good(srv, job, needle):
    """The stream and sample opens of a job that failed for good: 422, the
    reason, no Retry-After; status says so."""
    st_json = settled(srv, job)
    assert st_json["state"] == "failed" and st_json["failure"] == "permanent", st_json
    assert needle in st_json["reason"], st_json
    for path in (stream_path(job, 0, 0, 1), stream_path(job, 3, 1, 2, fmt="tar"),
                 "/v1/jobs/%s/samples/0" % job, "/v1/topology?job=%s" % job):
        st, hdrs, body = request(srv, path)
        text = body.decode()
        assert st == 422, (path, st, text)
        assert "retry-after" not in hdrs, hdrs
        assert text.startswith("error: job %s failed" % job) and "not retryable" in text
        assert needle in text, text


def test_a_job_that_fails_for_good_is_not_retryable(start, workdir, refusing):
    srv = start("--admin-token", ADMIN)
    missing = os.path.join(workdir, "spec-missing")
    empty = os.path.join(workdir, "spec-empty")
    os.makedirs(empty, exist_ok=True)
    cases = [
        ("missing", {"source": missing}, "No such file"),
        ("missingfile", {"source": "file://%s/s-{0..3}.tar" % missing}, "No such file"),
        ("empty", {"source": empty}, "no shards"),
        ("http404", {"source": refusing + "/404/s.tar"}, "status=404"),
        ("http403", {"source": refusing + "/403/s.tar"}, "status=403"),
        ("mix404", {"sources": [{"name": "gone", "source": refusing + "/404/s.tar"}]},
         "status=404"),
    ]
    for job, spec, _ in cases:
        assert put(srv, job, spec)[0] == 201
    for job, _, needle in cases:
        refused_for_good(srv, job, needle)
    assert srv.alive()


def test_a_listing_over_the_bound_fails_the_job_for_good(start, workdir):
    d = os.path.join(workdir, "spec-five")
    make_dataset(d, shards=5, per_shard=4, size=200, seed=7)
    srv = start("--admin-token", ADMIN, "--max-job-shards", "4")
    assert put(srv, "dir", {"source": d})[0] == 201
    refused_for_good(srv, "dir", "too many shards (max 4)")
    # at the bound it works
    names = sorted(n for n in os.listdir(d) if n.endswith(".tar"))
    pattern = "%s/{%s}" % (d, ",".join(names[:4]))
    assert put(srv, "four", {"source": pattern})[0] == 201
    assert settled(srv, "four")["state"] == "ready"
    st, _, _ = request(srv, stream_path("four", 0, 0, 1))
    assert st == 200
    # a server whose shards the others hold: the listing is cut there too,
    # but that bound lifts when they go: the job is retried, not failed for
    # good, and resolves once the other job is deleted
    srv2 = start("--admin-token", ADMIN, "--max-shards", "6")
    assert put(srv2, "four", {"source": pattern})[0] == 201
    assert settled(srv2, "four")["state"] == "ready"
    assert put(srv2, "dir", {"source": d})[0] == 201
    assert wait_for(lambda: state(srv2, "dir").get("failure") == "transient", 60), \
        state(srv2, "dir")
    st_json = state(srv2, "dir")
    assert "too many shards (max 2)" in st_json["reason"], st_json
    assert "--max-shards 6" in st_json["reason"], st_json
    st, hdrs, _ = request(srv2, stream_path("dir", 0, 0, 1))
    assert st == 503 and "retry-after" in hdrs, (st, hdrs)
    st, _, _ = request(srv2, "/v1/jobs/four", method="DELETE", token=ADMIN)
    assert st == 204
    assert wait_for(lambda: state(srv2, "dir")["state"] == "ready", 120), state(srv2, "dir")


def test_s3_sources_that_fail_for_good(start, workdir):
    """A prefix listing past the job's bound, a missing bucket (404) and a
    refused key (403) fail the job for good; the listing stops at the bound
    instead of taking the whole prefix."""
    sys.path.insert(0, os.path.join(HERE, "..", "support"))
    from s3rver import S3rver
    d = os.path.join(workdir, "spec-s3")
    make_dataset(d, shards=6, per_shard=3, size=200, seed=9)
    with S3rver() as s3:
        s3.create_bucket("data")
        s3.upload_dir("data", d, prefix="train/")
        srv = start("--admin-token", ADMIN, "--max-job-shards", "4", env=s3.env())
        assert put(srv, "big", {"source": "s3://data/train/"})[0] == 201
        refused_for_good(srv, "big", "too many shards (max 4)")
        assert put(srv, "nobucket", {"source": "s3://no-such-bucket/train/"})[0] == 201
        refused_for_good(srv, "nobucket", "status=404")
        names = sorted(n for n in os.listdir(d) if n.endswith(".tar"))
        four = "s3://data/train/{%s}" % ",".join(names[:4])
        assert put(srv, "four", {"source": four})[0] == 201
        assert settled(srv, "four")["state"] == "ready"
        env = dict(s3.env(), AWS_ACCESS_KEY_ID="NOSUCHKEYID")
        srv2 = start("--admin-token", ADMIN, env=env)
        assert put(srv2, "denied", {"source": "s3://data/train/"})[0] == 201
        refused_for_good(srv2, "denied", "status=403")


def test_clients_give_up_at_once_with_the_reason(start, workdir):
    missing = os.path.join(workdir, "spec-later")
    srv = start("--admin-token", ADMIN)
    assert put(srv, "later", {"source": missing})[0] == 201
    settled(srv, "later")
    # Python: raised on the first answer, not after a retry budget (which
    # would take retry_timeout = 10 minutes here)
    ds = shardcast.ShardcastDataset(srv.url, "later", rank=0, world=1,
                                    retry_timeout=600, startup_timeout=600)
    with pytest.raises(shardcast.ShardcastHTTPError) as ei:
        next(iter(ds))
    e = ei.value
    assert e.status == 422 and "No such file" in e.reason, e
    assert not getattr(e, "attempts", None), e  # no retry budget was spent
    # C: `shardcast cat` exits non-zero with the reason
    cli = find_cli_binary()
    assert cli, "the shardcast command was not built"
    p = subprocess.run([cli, "cat", "--server", srv.url, "--job", "later",
                        "--retry-budget-ms", "600000"],
                       capture_output=True, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 8 and "422" in err and "No such file" in err, (p.returncode, err)
    # Once the source exists, a PUT of the same spec resolves it again.
    make_dataset(missing, shards=2, per_shard=3, size=200, seed=5)
    st, body = put(srv, "later", {"source": missing})
    assert st == 200 and "replaced" in body, body
    assert settled(srv, "later")["state"] == "ready"
    assert sum(1 for _ in shardcast.ShardcastDataset(srv.url, "later", rank=0, world=1)) == 6


def test_a_transient_failure_stays_retryable(start):
    # nothing listens on port 1: the store is unreachable, not wrong
    srv = start("--admin-token", ADMIN, "--fetch-retries", "1")
    assert put(srv, "down", {"source": "http://127.0.0.1:1/s.tar"})[0] == 201
    assert wait_for(lambda: state(srv, "down")["state"] == "failed", 60)
    st_json = state(srv, "down")
    assert st_json["failure"] == "transient", st_json
    st, hdrs, body = request(srv, stream_path("down", 0, 0, 1))
    assert st == 503 and "retry-after" in hdrs and "not ready" in body.decode()
