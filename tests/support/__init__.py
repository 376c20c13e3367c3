"""Python helpers shared by shardcast's tests.

- faultproxy: an HTTP/1.1 reverse proxy that injects object-store faults
  (503 SlowDown, 5xx, resets, truncated bodies, stalls, 404s) and counts
  requests; driven from Python or over HTTP.
- s3rver: start/stop the s3rver S3-compatible server on a free loopback port
  and fill buckets with boto3.

Import with the repository root on sys.path, e.g.
``from tests.support.faultproxy import FaultProxy``.
"""
