"""Cross-check libshardio's SigV4 signer against botocore for S3 requests.

Each case describes one S3 request (GET with Range, HEAD, ListObjectsV2,
keys that exercise every encoding rule, session tokens, UNSIGNED-PAYLOAD and
an explicit payload hash, virtual-hosted and path-style hosts, a custom
endpoint with a port). botocore's S3SigV4Auth signs it at a fixed time; the
sigv4_sign tool (tests/tools/sigv4_sign.c) signs the same description; the
Authorization header must match byte for byte, and so must the canonical
request, the string to sign and the x-amz-* headers.

botocore receives the request the way its own S3 client builds it: the key
percent-encoded by botocore.utils.percent_encode(safe='/~') into the URL
path (which S3SigV4Auth signs as is), the query as raw parameters. Our tool
receives the raw key and raw parameters.

Run: /usr/bin/python3 -m pytest tests/sigv4 (with SHARDCAST_BUILD=<build
dir> or a build*/ directory holding sigv4_sign). A missing binary is a
failure, never a skip.
"""

import datetime
import hashlib
import json
import os
import pathlib
import subprocess
from unittest import mock
from urllib.parse import parse_qsl, urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, _host_from_url
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode

REPO = pathlib.Path(__file__).resolve().parents[2]

# Made-up credentials: the suite's example keys, nothing real.
ACCESS = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = ("FwoGZXIvYXdzEXAMPLE//////////wEaDEXAMPLE+token/with=special"
         "+chars/AQoDYXdzEPT==")
WHEN = datetime.datetime(2024, 1, 2, 3, 4, 5)
AMZ_DATE = "20240102T030405Z"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def find_tool():
    """The sigv4_sign binary: $SHARDCAST_BUILD first, else the newest
    build*/sigv4_sign in the repository."""
    build = os.environ.get("SHARDCAST_BUILD")
    if build:
        path = pathlib.Path(build) / "sigv4_sign"
        if path.is_file() and os.access(path, os.X_OK):
            return path
        pytest.fail(f"SHARDCAST_BUILD={build} has no executable sigv4_sign; "
                    "build the project there first")
    found = [p for p in REPO.glob("build*/sigv4_sign")
             if p.is_file() and os.access(p, os.X_OK)]
    if not found:
        pytest.fail("sigv4_sign not found: set SHARDCAST_BUILD to a build "
                    f"directory or build into {REPO}/build*/ "
                    "(cmake -S . -B build && cmake --build build)")
    return max(found, key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="module")
def tool():
    return find_tool()


class RecordingS3Auth(S3SigV4Auth):
    """S3SigV4Auth that keeps the canonical request and string to sign."""

    def canonical_request(self, request):
        self.last_creq = super().canonical_request(request)
        return self.last_creq

    def string_to_sign(self, request, canonical_request):
        self.last_sts = super().string_to_sign(request, canonical_request)
        return self.last_sts


def botocore_sign(case):
    """Sign case with botocore at WHEN; returns (request, auth)."""
    scheme, netloc = case["endpoint"].split("://", 1)
    path = percent_encode(case["path"], safe="/~")
    url = f"{scheme}://{netloc}{path}"
    headers = dict(case.get("headers", []))
    req = AWSRequest(method=case["method"], url=url, headers=headers,
                     data=case.get("body", b""),
                     params=list(case.get("query", [])))
    # UNSIGNED-PAYLOAD the way the S3 client asks for it.
    s3_config = {"payload_signing_enabled": not case.get("unsigned", False)}
    req.context["client_config"] = mock.Mock(s3=s3_config)
    creds = Credentials(ACCESS, SECRET, case.get("token"))
    auth = RecordingS3Auth(creds, "s3", case.get("region", "us-east-1"))
    with mock.patch("botocore.auth.datetime") as dt:
        dt.datetime.utcnow.return_value = WHEN
        auth.add_auth(req)
    return req, auth


class RecordingS3QueryAuth(S3SigV4QueryAuth):
    """S3SigV4QueryAuth that keeps the canonical request."""

    def canonical_request(self, request):
        self.last_creq = super().canonical_request(request)
        return self.last_creq


def botocore_presign(case, expires):
    """Presign case with botocore at WHEN; returns (request, auth)."""
    scheme, netloc = case["endpoint"].split("://", 1)
    url = f"{scheme}://{netloc}{percent_encode(case['path'], safe='/~')}"
    req = AWSRequest(method=case["method"], url=url,
                     headers=dict(case.get("headers", [])),
                     params=dict(case.get("query", [])))
    creds = Credentials(ACCESS, SECRET, case.get("token"))
    auth = RecordingS3QueryAuth(creds, "s3", case.get("region", "us-east-1"),
                                expires=expires)
    with mock.patch("botocore.auth.datetime") as dt:
        dt.datetime.utcnow.return_value = WHEN
        auth.add_auth(req)
    return req, auth


def our_sign(tool, case, presign_expires=None):
    body = case.get("body", b"")
    desc = {
        "method": case["method"],
        "host": case["host"],
        "path": case["path"],
        "query": [list(p) for p in case.get("query", [])],
        "headers": [list(h) for h in case.get("headers", [])],
        "payload_hash": (None if case.get("unsigned")
                         else hashlib.sha256(body).hexdigest()),
        "region": case.get("region", "us-east-1"),
        "service": "s3",
        "amz_date": AMZ_DATE,
        "access_key": ACCESS,
        "secret_key": SECRET,
        "session_token": case.get("token"),
    }
    if presign_expires is not None:
        desc.update(presign=True, expires=presign_expires)
    proc = subprocess.run([str(tool)], input=json.dumps(desc).encode(),
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout)


RANGE = [("Range", "bytes=0-1048575")]
LIST_V2 = [
    ("list-type", "2"),
    ("prefix", "train/shard 0+/"),
    ("delimiter", "/"),
    ("max-keys", "1000"),
    ("continuation-token",
     "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM+k=="),
    ("start-after", "train/a b=c~d"),
    ("encoding-type", "url"),
    ("fetch-owner", ""),
]

CASES = {
    # GET of an object with a Range, virtual-hosted style.
    "get-range-virtual": dict(
        method="GET", endpoint="https://bucket.s3.us-west-2.amazonaws.com",
        host="bucket.s3.us-west-2.amazonaws.com", region="us-west-2",
        path="/train/shard-000001.tar", headers=RANGE, unsigned=True),
    "get-range-explicit-hash": dict(
        method="GET", endpoint="https://bucket.s3.amazonaws.com",
        host="bucket.s3.amazonaws.com", path="/train/shard-000001.tar",
        headers=RANGE),
    # Keys that need encoding, path-style on a custom endpoint with a port.
    "key-space": dict(
        method="GET", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket/my shards/shard 1.tar", headers=RANGE),
    "key-plus-equals": dict(
        method="GET", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket/a+b=c&d.tar", headers=RANGE, unsigned=True),
    "key-percent": dict(
        method="GET", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket/100%25 done%.tar"),
    "key-tilde-unreserved": dict(
        method="GET", endpoint="http://localhost:9000", host="localhost:9000",
        path="/bucket/~user/-._~AZaz09.tar"),
    "key-unicode": dict(
        method="GET", endpoint="https://bucket.s3.amazonaws.com",
        host="bucket.s3.amazonaws.com",
        path="/données/日本語/shard-ü.tar", headers=RANGE, unsigned=True),
    "key-nested-no-normalisation": dict(
        method="GET", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket/a//b/./c/../d/shard.tar", headers=RANGE),
    "key-special-ascii": dict(
        method="GET", endpoint="http://[::1]:9000", host="[::1]:9000",
        path="/bucket/!$'()*,;:@[]#?.tar", unsigned=True),
    # HEAD of an object.
    "head": dict(
        method="HEAD", endpoint="https://bucket.s3.eu-central-1.amazonaws.com",
        host="bucket.s3.eu-central-1.amazonaws.com", region="eu-central-1",
        path="/train/shard-000002.tar.gz"),
    "head-token": dict(
        method="HEAD", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket/train/shard-000002.tar.zst", token=TOKEN),
    # ListObjectsV2.
    "list-virtual": dict(
        method="GET", endpoint="https://bucket.s3.amazonaws.com",
        host="bucket.s3.amazonaws.com", path="/", query=LIST_V2,
        unsigned=True),
    "list-path-style-port": dict(
        method="GET", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket", query=LIST_V2),
    "list-token": dict(
        method="GET", endpoint="https://s3.example.test:8443",
        host="s3.example.test:8443", path="/bucket/",
        query=[("list-type", "2"), ("prefix", "a/"), ("max-keys", "2")],
        token=TOKEN),
    "list-token-unsigned": dict(
        method="GET", endpoint="https://bucket.s3.amazonaws.com",
        host="bucket.s3.amazonaws.com", path="/",
        query=[("list-type", "2"), ("continuation-token", "a+b/c=")],
        token=TOKEN, unsigned=True),
    # GET with Range and a session token.
    "get-range-token": dict(
        method="GET", endpoint="https://bucket.s3.amazonaws.com",
        host="bucket.s3.amazonaws.com", path="/k e y+1.tar", headers=RANGE,
        token=TOKEN, unsigned=True),
    # An explicit payload hash of a body.
    "put-explicit-hash": dict(
        method="PUT", endpoint="http://127.0.0.1:9000", host="127.0.0.1:9000",
        path="/bucket/out/result 1.json", body=b'{"samples": 1000}\n',
        headers=[("Content-Type", "application/json")]),
    # Default ports are not part of Host.
    "default-port-dropped": dict(
        method="GET", endpoint="https://bucket.s3.amazonaws.com:443",
        host="bucket.s3.amazonaws.com", path="/x.tar", headers=RANGE),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_botocore(tool, name):
    case = CASES[name]
    req, auth = botocore_sign(case)
    # The Host we sign is the one botocore (and an HTTP client) sends.
    assert _host_from_url(req.url) == case["host"]
    ours = our_sign(tool, case)

    assert ours["canonical_request"] == auth.last_creq
    assert ours["string_to_sign"] == auth.last_sts
    assert ours["authorization"] == req.headers["Authorization"]

    # The headers the signer hands back are exactly the x-amz-* headers
    # botocore put on the request, with the same values.
    got = dict(h.split(": ", 1) for h in ours["headers"])
    assert got.pop("Authorization") == req.headers["Authorization"]
    assert got.pop("X-Amz-Date") == req.headers["X-Amz-Date"] == AMZ_DATE
    assert got.pop("X-Amz-Content-SHA256") == \
        req.headers["X-Amz-Content-SHA256"]
    if case.get("token"):
        assert got.pop("X-Amz-Security-Token") == TOKEN
        assert req.headers["X-Amz-Security-Token"] == TOKEN
    assert got == {}

    # The wire path is botocore's encoded path, and its query holds exactly
    # the parameters, encoded as in the canonical request (sent == signed).
    wire = urlsplit(ours["wire_path"])
    assert wire.path == urlsplit(req.url).path
    canon_query = ours["canonical_request"].split("\n")[2]
    assert wire.query == canon_query
    assert sorted(parse_qsl(wire.query, keep_blank_values=True)) == \
        sorted(case.get("query", []))
    assert "+" not in wire.query  # spaces are %20, '+' is %2B


PRESIGN_CASES = ["get-range-virtual", "key-unicode", "key-plus-equals",
                 "list-virtual", "list-token", "head-token"]


@pytest.mark.parametrize("name", PRESIGN_CASES)
def test_presign_matches_botocore(tool, name):
    case = dict(CASES[name], unsigned=True)  # presigned URLs never hash
    req, auth = botocore_presign(case, 900)
    ours = our_sign(tool, case, presign_expires=900)
    assert ours["canonical_request"] == auth.last_creq
    assert ours["authorization"] is None and ours["headers"] == []
    boto_url = urlsplit(req.url)
    wire = urlsplit(ours["wire_path"])
    assert wire.path == boto_url.path
    # Same parameters, signature included (order on the line is free).
    assert sorted(parse_qsl(wire.query, keep_blank_values=True)) == \
        sorted(parse_qsl(boto_url.query, keep_blank_values=True))
    assert dict(parse_qsl(wire.query))["X-Amz-Signature"] == \
        ours["signature"]


def test_unsigned_payload_is_signed_as_such(tool):
    case = CASES["get-range-virtual"]
    ours = our_sign(tool, case)
    assert ours["canonical_request"].endswith("\nUNSIGNED-PAYLOAD")
    assert "X-Amz-Content-SHA256: UNSIGNED-PAYLOAD" in ours["headers"]


def test_explicit_hash_changes_signature(tool):
    base = dict(CASES["put-explicit-hash"])
    a = our_sign(tool, base)
    base["body"] = base["body"] + b" "
    b = our_sign(tool, base)
    assert a["signature"] != b["signature"]
    assert b["canonical_request"].endswith(
        hashlib.sha256(base["body"]).hexdigest())


def test_bad_input_is_refused_without_leaking(tool):
    desc = {
        "method": "GET", "host": "h", "path": "/k",
        "headers": [["X-Bad", "a\r\nInjected: 1"]],
        "region": "us-east-1", "service": "s3", "amz_date": AMZ_DATE,
        "access_key": ACCESS, "secret_key": SECRET, "session_token": TOKEN,
    }
    proc = subprocess.run([str(tool)], input=json.dumps(desc).encode(),
                          capture_output=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stdout == b""
    err = proc.stderr.decode()
    assert "control byte" in err
    assert SECRET not in err and TOKEN not in err
