"""The content hash of a sample, shared with tests/tools/mkwds.py.

The definition is part of the test contract: mkwds.py writes it into its
manifest and tests compare it with what a stream delivered, so both copies
must stay byte-for-byte the same definition.
"""

import hashlib


def _is_meta(name):
    return name.startswith("__") and name.endswith("__")


def sample_hash(sample):
    """Return the hex sha256 content hash of a sample.

    `sample` maps field names (extensions such as "jpg", "txt.gz") to bytes;
    metadata entries named "__x__" (such as "__key__", "__index__") are left
    out. The fields are taken sorted by name, each fed to sha256 as
    name (UTF-8) + b"\\0" + len(data) as 8-byte little-endian + data.
    """
    h = hashlib.sha256()
    for name in sorted(k for k in sample if not _is_meta(k)):
        data = sample[name]
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("field %r is %s, not bytes" % (name, type(data).__name__))
        h.update(name.encode("utf-8"))
        h.update(b"\0")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
