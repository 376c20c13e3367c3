"""shardcast -- Python client of the shardcast sample streaming service.

    from shardcast import ShardcastDataset
    ds = ShardcastDataset("http://127.0.0.1:8080", "train")
    loader = torch.utils.data.DataLoader(ds, num_workers=4, batch_size=None)

Standard library only (http.client, struct, tarfile); torch, numpy and
Pillow are optional.
"""

from ._version import version as __version__  # noqa: E402  CMakeLists.txt's project(VERSION)
from ._accel import describe as accelerator_info  # noqa: E402

from .errors import (ShardcastConfigError, ShardcastConnectionError,  # noqa: E402
                     ShardcastDecodeError, ShardcastError, ShardcastHTTPError,
                     ShardcastIncompleteError, ShardcastProtocolError, ShardcastStreamError)
from .hashing import sample_hash  # noqa: E402
from .stream import (END_MEMBER, ERROR_MEMBER, FORMATS, FRAMES_CONTENT_TYPE,  # noqa: E402
                     TAR_CONTENT_TYPE, StreamReader, iter_stream, open_raw, stream_url)
from .frames import FramesReader  # noqa: E402
from .decode import Decoder, default_decoders, to_tuple  # noqa: E402
from .state import (global_cursor, loader_positions, merge_state_dicts,  # noqa: E402
                    replica_cursors)
from .dataset import ShardcastDataset, server_from_env, share_length  # noqa: E402
from .mapstyle import ShardcastMapDataset  # noqa: E402
try:  # needs torch
    from .loader import ShardcastDataLoader  # noqa: E402
except ImportError:  # pragma: no cover - without torch
    ShardcastDataLoader = None
from .batch import Ragged  # noqa: E402
from .topology import Route, Topology  # noqa: E402


def open_stream(url, **kwargs):
    """A reader for one stream URL: FramesReader when the URL asks for
    format=frames, else StreamReader (tar)."""
    import urllib.parse
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    if q.get("format", ["tar"])[-1] == "frames":
        return FramesReader(url, **kwargs)
    return StreamReader(url, **kwargs)


__all__ = [
    "ShardcastDataset", "ShardcastMapDataset", "ShardcastDataLoader", "server_from_env",
    "share_length", "Ragged", "Topology", "Route", "StreamReader", "FramesReader", "open_stream", "iter_stream",
    "open_raw", "stream_url", "sample_hash", "Decoder", "default_decoders", "to_tuple",
    "global_cursor", "loader_positions", "merge_state_dicts", "replica_cursors",
    "END_MEMBER", "ERROR_MEMBER",
    "FORMATS", "FRAMES_CONTENT_TYPE", "TAR_CONTENT_TYPE", "ShardcastError",
    "ShardcastConnectionError", "ShardcastHTTPError", "ShardcastStreamError",
    "ShardcastIncompleteError", "ShardcastProtocolError", "ShardcastDecodeError",
    "ShardcastConfigError",
    "__version__", "accelerator_info",
]
