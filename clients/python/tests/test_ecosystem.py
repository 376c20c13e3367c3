"""What users of torch, webdataset and friends expect of the client, against
the in-process EpochServer: exceptions keep their attributes across a
DataLoader worker and pickle, samples carry __url__, the webdataset-style
decoders and to_tuple. (The parts that need the real server's status and
/samples/{i} are in tests/integration/test_dataset_ecosystem.py.)"""

import os
import pickle
import sys

import pytest
import torch.utils.data

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import shardcast  # noqa: E402
from shardcast import ShardcastDataset, ShardcastHTTPError, ShardcastStreamError  # noqa: E402
from shardcast_fake import EpochServer, make_samples  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def server():
    srv = EpochServer({"j": make_samples(24)})
    yield srv
    srv.stop()


# -- exceptions across processes -------------------------------------------

class _Raises(torch.utils.data.IterableDataset):
    def __init__(self, exc):
        self.exc = exc

    def __iter__(self):
        raise self.exc


def _errors():
    e1 = ShardcastHTTPError("unknown job 'x'", status=404, reason="unknown job")
    e1.attempts = 3
    e2 = ShardcastStreamError("server shutting down", reason="server shutting down",
                              retryable=True, retry_after=2.0)
    return [e1, e2]


@pytest.mark.parametrize("exc", _errors(), ids=["http", "stream"])
def test_exception_attributes_cross_a_dataloader_worker(exc):
    """Regression: torch re-creates a worker's exception as cls(text) in the
    main process; status and reason used to arrive as None."""
    loader = torch.utils.data.DataLoader(_Raises(exc), num_workers=1)
    with pytest.raises(type(exc)) as info:
        list(loader)
    got = info.value
    for k in ("status", "reason", "retryable", "retry_after", "attempts"):
        assert getattr(got, k, None) == getattr(exc, k, None), k


@pytest.mark.parametrize("exc", _errors(), ids=["http", "stream"])
def test_exceptions_pickle_their_attributes(exc):
    got = pickle.loads(pickle.dumps(exc))
    assert type(got) is type(exc) and got.args == exc.args
    assert vars(got) == vars(exc)


def test_unknown_job_status_reaches_the_main_process(server):
    ds = ShardcastDataset(server.url, "nope", rank=0, world=1, retries=0)
    with pytest.raises(ShardcastHTTPError) as info:
        list(torch.utils.data.DataLoader(ds, num_workers=1, batch_size=None))
    assert info.value.status == 404


# -- __url__ -----------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["frames", "tar"])
def test_samples_carry_url(server, fmt):
    got = list(ShardcastDataset(server.url, "j", rank=0, world=1, format=fmt))
    assert got and all(s["__url__"] and s["__url__"] == s["__shard__"] for s in got)
