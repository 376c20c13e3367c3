"""The frames reader (shardcast.FramesReader) against bodies built by the
test-only encoder in shardcast_fake.py: complete, empty, server-error, cut
at every kind of offset, and malformed streams. Every test runs with both
decoders (conftest.py); where their messages are worded differently the
pattern names both wordings of the same fault."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from shardcast import (FramesReader, ShardcastIncompleteError,  # noqa: E402
                       ShardcastProtocolError, ShardcastStreamError)
from shardcast_fake import (MAGIC, RawServer, end_frame, error_frame, frame,  # noqa: E402
                            header_frame, sample_frame, shard_frame)

SAMPLES = [
    (7, "sample000007", [("cls", b"3"), ("jpg", b"\xff\xd8xx\xff\xd9")]),
    (12, "dir.x/0001", [("txt.gz", b"\x1f\x8b...")]),
    (17, "s2", []),                                   # no kept field: still sent
    (22, "s3", [("bin", bytes(range(256)) * 300)]),   # spans several reads
]


def body(samples=SAMPLES, *, start=0, end=True, error=None, extra=b"", header=None,
         trailer=None):
    out = [MAGIC, header or header_frame(start=start, world=5, rank=2), extra,
           shard_frame(0, "file:///d/a.tar"), shard_frame(1, "s3://b/p/b.tar")]
    for i, (g, key, fields) in enumerate(samples):
        out.append(sample_frame(g, start + i, i % 2, key, fields))
    if error is not None:
        out.append(error_frame(error))
    elif end:
        out.append(trailer or end_frame(len(samples), start + len(samples), rank=2, world=5,
                                        start=start))
    return b"".join(out)


@pytest.fixture(scope="module")
def raw():
    srv = RawServer()
    yield srv
    srv.stop()


def read(raw, data, terminate=True, **q):
    raw.body, raw.terminate = data, terminate
    q.setdefault("rank", 2)
    q.setdefault("world", 5)
    got = []
    r = FramesReader(raw.stream_url(**q), read_size=4096)
    try:
        for s in r:
            got.append(s)
    finally:
        r.close()
    return got, r


def test_complete_stream(raw):
    got, r = read(raw, body())
    assert [s["__key__"] for s in got] == [k for _, k, _ in SAMPLES]
    assert [s["__index__"] for s in got] == [7, 12, 17, 22]
    assert [s["__position__"] for s in got] == [0, 1, 2, 3]
    assert [s["__shard__"] for s in got] == ["file:///d/a.tar", "s3://b/p/b.tar"] * 2
    for s, (_, _, fields) in zip(got, SAMPLES):
        assert [k for k in s if not k.startswith("__")] == [n for n, _ in fields]
        for n, d in fields:
            assert type(s[n]) is bytes and s[n] == d
    assert r.trailer["status"] == "ok" and r.header["world"] == 5
    assert r.samples_received == 4 and r.position == 4


def test_resumed_stream_positions(raw):
    got, r = read(raw, body(start=10), start=10)
    assert [s["__position__"] for s in got] == [10, 11, 12, 13]
    assert r.position == 14


def test_empty_share(raw):
    got, r = read(raw, body([]))
    assert got == [] and r.trailer["samples"] == 0


def test_error_frame_names_reason(raw):
    got = []
    raw.body, raw.terminate = body(SAMPLES[:2], error="shard s3://b/p/b.tar: 403"), False
    with pytest.raises(ShardcastStreamError, match="403") as ei:
        for s in FramesReader(raw.stream_url(rank=2, world=5)):
            got.append(s)
    assert ei.value.reason == "shard s3://b/p/b.tar: 403"
    assert len(got) == 2


def test_every_cut_is_incomplete(raw):
    full = body()
    # Every offset inside the magic, the header, frame headers and payloads,
    # sampled densely enough to hit each region, plus the last byte.
    cuts = sorted(set(list(range(0, 40)) + list(range(40, len(full), 997)) +
                      [len(full) - 1, len(full) - 30]))
    for cut in cuts:
        with pytest.raises(ShardcastIncompleteError):
            read(raw, full[:cut], terminate=False)
        # A cleanly terminated body that stops early is just as incomplete.
        with pytest.raises(ShardcastIncompleteError):
            read(raw, full[:cut], terminate=True)


def test_end_without_clean_http_end_is_incomplete(raw):
    with pytest.raises(ShardcastIncompleteError):
        read(raw, body(), terminate=False)


def test_extension_frames_are_skipped(raw):
    got, _ = read(raw, body(extra=frame(0x80, b"future") + frame(0xff, b"")))
    assert len(got) == 4


@pytest.mark.parametrize("data, match", [
    (b"SCF2" + header_frame(), "magic"),
    (MAGIC + frame(0x06, b""), "unknown frame type 0x06"),
    (MAGIC + header_frame(version=2), "version"),
    (MAGIC + header_frame(world=5, rank=2) + header_frame(), "second HEADER"),
    (MAGIC + shard_frame(0, "x") + header_frame(), "first frame|0x02 before the HEADER"),
    (MAGIC + header_frame(world=5, rank=2) + sample_frame(0, 0, 9, "k", []), "shard 9"),
    (MAGIC + header_frame(world=5, rank=2) + shard_frame(0, "x") +
     sample_frame(0, 1, 0, "k", []), "position 1, expected 0"),
    (MAGIC + header_frame(world=4, rank=2), "world=4"),
    (MAGIC + header_frame(world=5, rank=2) + frame(3, b"\0" * 10), r"SAMPLE frame of 10|0x03 length 10 outside"),
    (MAGIC + header_frame(world=5, rank=2) + frame(1, b"x", flags=1), "flags"),
    (MAGIC + header_frame(world=5, rank=2) + b"\x03\0\0\0\xff\xff\xff\xff", "over the limit|above the limit"),
    (MAGIC + header_frame(world=5, rank=2) + frame(4, b"[1]"), "not a JSON object"),
])
def test_malformed(raw, data, match):
    with pytest.raises(ShardcastProtocolError, match=match):
        read(raw, data)


def test_field_overrun_and_trailing_bytes(raw):
    good = sample_frame(0, 0, 0, "k", [("a", b"xyz")])
    payload = bytearray(good[8:])
    payload[-5] = 0x7f  # corrupt the data length of the field: past the frame
    pre = MAGIC + header_frame(world=5, rank=2) + shard_frame(0, "u")
    with pytest.raises(ShardcastProtocolError, match="runs past|beyond the frame"):
        read(raw, pre + frame(3, bytes(payload)))
    with pytest.raises(ShardcastProtocolError, match="after the last field|trailing bytes"):
        read(raw, pre + frame(3, good[8:] + b"zz"))
    with pytest.raises(ShardcastProtocolError, match="repeated field"):
        read(raw, pre + sample_frame(0, 0, 0, "k", [("a", b"1"), ("a", b"2")]))


def test_trailer_checks(raw):
    with pytest.raises(ShardcastProtocolError, match=r"END says 9 samples|END \(samples 9"):
        read(raw, body(trailer=end_frame(9, 4)))
    with pytest.raises(ShardcastProtocolError, match=r"END says position 7|END \(samples 4, position 7"):
        read(raw, body(trailer=end_frame(4, 7)))
    with pytest.raises(ShardcastProtocolError, match="after the END frame"):
        read(raw, body() + b"junk")


def test_max_frame_limit_is_enforced(raw):
    raw.body, raw.terminate = body(), True
    with pytest.raises(ShardcastProtocolError, match="over the limit of 1000|above the limit 1000"):
        list(FramesReader(raw.stream_url(rank=2, world=5), max_frame=1000))


def test_decoder_in_use(raw, decoder):
    """The parametrized runs really use the decoder they name."""
    got, r = read(raw, body())
    assert len(got) == 4 and r.accelerated == (decoder == "c")
    assert not FramesReader(raw.stream_url(rank=2, world=5), decoder="python").accelerated
