"""Helpers of the Python client's integration tests (test_dataset_*.py):
the fault proxy on the import path, and the keys of an epoch as a reference
read of the real server."""

import sys

from shardcast_testlib import REPO, read_samples

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.support.faultproxy import FaultProxy, Rule  # noqa: E402,F401


def reference_shares(server, job, epoch, world):
    """{consumer: [sample, ...]} read one consumer at a time with the plain
    tar stream reader, no resume involved: what an uninterrupted run
    delivers."""
    return {c: read_samples(server, job, epoch, c, world)[0] for c in range(world)}


def keys_of(samples):
    return [s["__key__"] for s in samples]


def frames_supported(server):
    """Whether the server answers format=frames (the error text otherwise)."""
    import shardcast
    url = shardcast.stream_url(server.url, "train", 0, 0, 1, fmt="frames")
    try:
        resp = shardcast.open_raw(url, content_type=shardcast.FRAMES_CONTENT_TYPE)
    except shardcast.ShardcastError as e:
        return False, str(e)
    resp.close()
    return True, ""


__all__ = ["FaultProxy", "Rule", "reference_shares", "keys_of", "frames_supported"]
