#!/usr/bin/python3
"""mksigv4.py -- SigV4 test vectors for shardcast's signer, made by botocore.

    mksigv4.py --out DIR

signs a set of requests with botocore's SigV4Auth (Authorization header) and
SigV4QueryAuth (presigned URL) at a fixed time with made-up credentials, and
writes what botocore computed as one folder per case, in the layout of
Amazon's aws-signing-test-suite/v4 (which tests/unit/store/test_sigv4.c already
reads; the suites themselves, in ../shared/testdata/sigv4, stay an optional
conformance layer):

  DIR/v4/<case>/context.json                  credentials, region, service,
                                              timestamp, expiration_in_seconds,
                                              normalize, sign_body, ...
  DIR/v4/<case>/request.txt                   the request before signing
  DIR/v4/<case>/header-canonical-request.txt  \
  DIR/v4/<case>/header-string-to-sign.txt      | Authorization header signing
  DIR/v4/<case>/header-signature.txt           |
  DIR/v4/<case>/header-signed-request.txt     /  (holds the Authorization line)
  DIR/v4/<case>/query-*.txt                   the same for query signing
  DIR/cases.json                              {"generator": ..., "botocore":
                                              version, "cases": [names]}

The cases cover what the AWS suites cover for the generic (non-S3) rules:
header canonicalisation (case, sorting, repeated names, folded and
untrimmed values, empty values), query canonicalisation (sorting by key and
value, repeated keys, empty values and keys without '=', encoded, unreserved
and UTF-8 names and values), paths (unreserved, UTF-8, already-encoded
paths encoded again, dot segments and repeated slashes with and without
normalisation, spaces), session tokens (signed, or added after signing),
POST bodies (the payload hash, form bodies, a signed x-amz-content-sha256)
and UNSIGNED-PAYLOAD. S3's own rules are cross-checked against botocore's
S3SigV4Auth by tests/sigv4/test_botocore_crosscheck.py.

Keys of context.json beyond the AWS layout (read by test_sigv4.c):
  "unsigned_payload": true  the payload hash is UNSIGNED-PAYLOAD, sent and
                            signed as x-amz-content-sha256
  "query_signing": false    no query-*.txt files: botocore's presigner moves
                            a form body into the query and keeps one value
                            per query key, so it is no reference for those
                            requests

request.txt follows the AWS layout: request line, "Name:value" header lines
(a folded value continues on lines starting with spaces), an empty line and
the body; the request target is exactly what goes on the wire.

Needs botocore (Debian: python3-botocore); run with /usr/bin/python3.
"""

import argparse
import datetime
import hashlib
import json
import os
import shutil
import sys
from unittest import mock
from urllib.parse import quote, urlsplit

import botocore
import botocore.auth
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

# Made-up credentials (the AWS documentation's example keys), nothing real.
ACCESS = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = ("IQoJb3JpZ2luX2VjEXAMPLE//////////wEaCXVzLWVhc3QtMSJHMEUCIEXAMPLE"
         "+token/with=special+chars/AQoDYXdzEPT==")
REGION, SERVICE = "us-east-1", "service"
WHEN = datetime.datetime(2024, 1, 2, 3, 4, 5)
EXPIRES = 3600
HOST = "example.amazonaws.com"


def enc(s):
    """SigV4 encoding of one query name or value (RFC 3986 unreserved kept)."""
    return quote(s, safe="-_.~")


def query(*pairs):
    """A query string from raw pairs; a None value gives a key without '='."""
    return "&".join(enc(k) if v is None else "%s=%s" % (enc(k), enc(v))
                    for k, v in pairs)


def case(method, target, headers=(), body=b"", *, token=False, token_after=False,
         normalize=True, sign_body=False, unsigned=False, query_signing=None):
    if query_signing is None:
        # botocore's presigner: one value per key, and a body goes to the query.
        keys = [p.split("=", 1)[0] for p in urlsplit(target).query.split("&") if p]
        query_signing = not body and len(keys) == len(set(keys))
    return dict(method=method, target=target, headers=list(headers), body=body,
                token=token, token_after=token_after, normalize=normalize,
                sign_body=sign_body, unsigned=unsigned, query_signing=query_signing)


UNRESERVED = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

CASES = {
    # Headers.
    "get-vanilla": case("GET", "/"),
    "get-header-key-duplicate": case("GET", "/", [
        ("My-Header1", "value2"), ("My-Header1", "value2"), ("My-Header1", "value1")]),
    "get-header-value-order": case("GET", "/", [
        ("X-Order", "d4"), ("X-Order", "a1"), ("X-Order", "c3"), ("X-Order", "b2")]),
    "get-header-value-multiline": case("GET", "/", [
        ("X-Folded", "first\n  second\n   third")]),
    "get-header-value-trim": case("GET", "/", [
        ("X-Trim-A", "  padded value  "), ("X-Trim-B", "inner   runs \t of  blanks")]),
    "get-header-value-empty": case("GET", "/", [("X-Empty", ""), ("X-Next", "v")]),
    "get-header-key-sort": case("GET", "/", [
        ("Zeta", "z"), ("alpha", "a"), ("X-Amz-Meta-B", "b"), ("x-amz-meta-a", "a")]),
    "post-header-key-case": case("POST", "/", [("MY-HEADER", "v"), ("my-header2", "v2")]),
    "post-header-value-case": case("POST", "/", [("My-Header1", "VALUE1 MixedCase")]),
    # Query strings.
    "get-vanilla-query": case("GET", "/?" + query(("Param1", "value1"))),
    "get-query-order-key": case("GET", "/?" + query(
        ("b", "1"), ("a", "2"), ("B", "3"), ("A", "4"), ("a-b", "5"), ("a_b", "6"))),
    "get-query-order-value": case("GET", "/?" + query(
        ("Param1", "value2"), ("Param1", "Value1"), ("Param1", "value1"))),
    "get-query-order-encoded": case("GET", "/?" + query(
        ("Param-3", "Value3"), ("Param", "Value2"), ("\u1234", "Value1"))),
    "get-query-empty-value": case("GET", "/?" + query(("Param1", ""), ("Param2", "v"))),
    "get-query-key-without-value": case("GET", "/?" + query(("flag", None), ("a", "b"))),
    "get-query-unreserved": case("GET", "/?" + query((UNRESERVED, UNRESERVED))),
    "get-query-utf8": case("GET", "/?" + query(("\u1234", "bar"), ("k", "\u00e9t\u00e9"))),
    "get-query-reserved": case("GET", "/?" + query(
        ("prefix", "a b+c/d"), ("token", "x=y&z"), ("pct", "100%"), ("star", "*'()!"))),
    # Paths.
    "get-unreserved": case("GET", "/" + UNRESERVED),
    "get-utf8": case("GET", "/\u1234/\u00e9t\u00e9"),
    "get-encoded-path": case("GET", "/a%20b/c%2Fd/%E2%82%AC"),
    "get-space": case("GET", "/example space/"),
    "get-relative": case("GET", "/example/.."),
    "get-relative-relative": case("GET", "/example1/example2/../.."),
    "get-slash": case("GET", "//"),
    "get-slash-dot-slash": case("GET", "/./"),
    "get-slash-pointless-dot": case("GET", "/./example"),
    "get-slashes": case("GET", "//example//"),
    "get-dots-deep": case("GET", "/a/b/../../../c/./d/"),
    "get-relative-unnormalized": case("GET", "/example/..", normalize=False),
    "get-relative-relative-unnormalized": case(
        "GET", "/example1/example2/../..", normalize=False),
    "get-slash-unnormalized": case("GET", "//", normalize=False),
    "get-slash-dot-slash-unnormalized": case("GET", "/./", normalize=False),
    "get-slashes-unnormalized": case("GET", "//example//", normalize=False),
    "get-space-unnormalized": case("GET", "/example space/", normalize=False),
    # Session tokens.
    "get-vanilla-with-session-token": case("GET", "/", token=True),
    "get-query-with-session-token": case(
        "GET", "/?" + query(("list-type", "2"), ("prefix", "a/")), token=True),
    "post-sts-token-before": case("POST", "/", token=True),
    "post-sts-token-after": case("POST", "/", token=True, token_after=True),
    # Bodies and payload hashes.
    "post-vanilla": case("POST", "/"),
    "post-vanilla-query": case("POST", "/?" + query(("Param1", "value1"))),
    "post-vanilla-empty-query-value": case("POST", "/?" + query(("Param1", ""))),
    "post-x-www-form-urlencoded": case("POST", "/", [
        ("Content-Type", "application/x-www-form-urlencoded")], b"Param1=value1",
        sign_body=True),
    "post-x-www-form-urlencoded-parameters": case("POST", "/", [
        ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")],
        b"Param1=value1&Param2=value%202", sign_body=True),
    "put-json-body": case("PUT", "/objects/result%201.json", [
        ("Content-Type", "application/json")], b'{"samples": 1000}\n'),
    "get-sign-empty-body": case("GET", "/", sign_body=True),
    "get-unsigned-payload": case("GET", "/data/shard-000001.tar", [
        ("Range", "bytes=0-1048575")], unsigned=True),
    "get-unsigned-payload-token": case("GET", "/?" + query(("prefix", "x y")),
                                       unsigned=True, token=True),
}


class _Unnormalized:
    """Sign the path as sent, encoded again but not normalised (the
    "normalize": false cases; botocore's generic signers always normalise)."""

    def _normalize_url_path(self, path):
        return quote(path, safe="/~")


class HeaderAuth(SigV4Auth):
    pass


class HeaderAuthUnnormalized(_Unnormalized, SigV4Auth):
    pass


class QueryAuth(SigV4QueryAuth):
    pass


class QueryAuthUnnormalized(_Unnormalized, SigV4QueryAuth):
    pass


def _record(auth):
    """Keep the canonical request and string to sign botocore computes."""
    creq, sts = auth.canonical_request, auth.string_to_sign

    def canonical_request(request):
        auth.last_creq = creq(request)
        return auth.last_creq

    def string_to_sign(request, canonical_request):
        auth.last_sts = sts(request, canonical_request)
        return auth.last_sts

    auth.canonical_request = canonical_request
    auth.string_to_sign = string_to_sign
    return auth


def _request(c, sign_body):
    req = AWSRequest(method=c["method"], url="https://%s%s" % (HOST, c["target"]),
                     data=c["body"])
    for name, value in c["headers"]:
        req.headers[name] = value  # HTTPHeaders: a repeated name is appended
    if sign_body:
        req.headers["X-Amz-Content-SHA256"] = hashlib.sha256(c["body"]).hexdigest()
    if c["unsigned"]:
        req.context["payload_signing_enabled"] = False
    return req


def _sign(auth, req):
    """auth.add_auth(req) at WHEN (botocore reads the clock in add_auth)."""
    with mock.patch.object(botocore.auth, "datetime") as dt:
        dt.datetime.utcnow.return_value = WHEN
        if hasattr(botocore.auth, "get_current_datetime"):  # newer botocore
            with mock.patch.object(botocore.auth, "get_current_datetime",
                                   return_value=WHEN):
                auth.add_auth(req)
        else:
            auth.add_auth(req)


def _creds(c, signed):
    # A token added after signing is not known to the signature: botocore
    # signs without it and the request carries it afterwards.
    return Credentials(ACCESS, SECRET, TOKEN if c["token"] and signed else None)


def _raw(method, target, headers, body):
    lines = ["%s %s HTTP/1.1" % (method, target)]
    lines += ["%s:%s" % (n, v) for n, v in headers]
    return ("\n".join(lines) + "\n\n").encode() + body


def _target(url):
    u = urlsplit(url)
    return u.path + ("?" + u.query if u.query else "")


def _write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def write_case(root, name, c):
    d = os.path.join(root, name)
    os.makedirs(d)
    token_signed = c["token"] and not c["token_after"]
    context = {
        "credentials": dict({"access_key_id": ACCESS, "secret_access_key": SECRET},
                            **({"token": TOKEN} if c["token"] else {})),
        "expiration_in_seconds": EXPIRES,
        "normalize": c["normalize"],
        "region": REGION,
        "service": SERVICE,
        "sign_body": c["sign_body"],
        "timestamp": WHEN.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if c["token_after"]:
        context["omit_session_token"] = True
    if c["unsigned"]:
        context["unsigned_payload"] = True
    if not c["query_signing"]:
        context["query_signing"] = False
    _write(d, "context.json", json.dumps(context, indent=4, ensure_ascii=False) + "\n")
    host = [("Host", HOST)]
    _write(d, "request.txt", _raw(c["method"], c["target"], host + c["headers"], c["body"]))

    # Authorization header.
    req = _request(c, c["sign_body"])
    auth = _record((HeaderAuth if c["normalize"] else HeaderAuthUnnormalized)(
        _creds(c, token_signed), SERVICE, REGION))
    _sign(auth, req)
    sig = req.headers["Authorization"].rsplit("Signature=", 1)[1]
    _write(d, "header-canonical-request.txt", auth.last_creq)
    _write(d, "header-string-to-sign.txt", auth.last_sts)
    _write(d, "header-signature.txt", sig)
    sent = host + [(n, v) for n, v in req.headers.items()]
    if c["token_after"]:
        sent.append(("X-Amz-Security-Token", TOKEN))
    _write(d, "header-signed-request.txt", _raw(c["method"], c["target"], sent, c["body"]))

    # Presigned URL.
    if not c["query_signing"]:
        return
    req = _request(c, False)
    auth = _record((QueryAuth if c["normalize"] else QueryAuthUnnormalized)(
        _creds(c, token_signed), SERVICE, REGION, expires=EXPIRES))
    _sign(auth, req)
    target = _target(req.url)
    sig = dict(p.split("=", 1) for p in urlsplit(req.url).query.split("&"))["X-Amz-Signature"]
    if c["token_after"]:
        target += "&X-Amz-Security-Token=" + enc(TOKEN)
    _write(d, "query-canonical-request.txt", auth.last_creq)
    _write(d, "query-string-to-sign.txt", auth.last_sts)
    _write(d, "query-signature.txt", sig)
    _write(d, "query-signed-request.txt",
           _raw(c["method"], target, host + list(req.headers.items()), b""))


def generate(out):
    """Write every case under out/v4 (out is replaced); returns the case names."""
    part = "%s.part-%d" % (out.rstrip("/"), os.getpid())
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(os.path.join(part, "v4"))
    for name in sorted(CASES):
        write_case(os.path.join(part, "v4"), name, CASES[name])
    _write(part, "cases.json", json.dumps({
        "generator": "tests/tools/mksigv4.py", "botocore": botocore.__version__,
        "cases": sorted(CASES)}, indent=1) + "\n")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.replace(part, out)
    return sorted(CASES)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Generate SigV4 test vectors with botocore.")
    ap.add_argument("--out", required=True, help="output directory (replaced)")
    args = ap.parse_args(argv)
    names = generate(args.out)
    print("mksigv4: wrote %d cases (botocore %s) to %s" %
          (len(names), botocore.__version__, args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
