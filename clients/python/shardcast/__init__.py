"""shardcast -- Python client of the shardcast sample streaming service.

    from shardcast import ShardcastDataset
    ds = ShardcastDataset("http://127.0.0.1:8080", "train")
    loader = torch.utils.data.DataLoader(ds, num_workers=4, batch_size=None)

Standard library only (http.client, tarfile); torch is optional.
"""

__version__ = "0.1.0"

from .errors import (ShardcastConnectionError, ShardcastError,  # noqa: E402
                     ShardcastHTTPError, ShardcastIncompleteError,
                     ShardcastProtocolError, ShardcastStreamError)
from .hashing import sample_hash  # noqa: E402
from .stream import (END_MEMBER, ERROR_MEMBER, StreamReader,  # noqa: E402
                     iter_stream, open_raw, stream_url)
from .dataset import ShardcastDataset  # noqa: E402

__all__ = [
    "ShardcastDataset", "StreamReader", "iter_stream", "open_raw", "stream_url",
    "sample_hash", "END_MEMBER", "ERROR_MEMBER", "ShardcastError",
    "ShardcastConnectionError", "ShardcastHTTPError", "ShardcastStreamError",
    "ShardcastIncompleteError", "ShardcastProtocolError", "__version__",
]
