"""The batched and tensor modes of ShardcastDataset: what a DataLoader worker
hands to the main process when the dataset collates itself
(ShardcastDataset(batch_size=B), DataLoader(batch_size=None)) and when
fields travel as torch.uint8 tensors (tensors=True).

A batch is a dict {name: list of B values} over the union of the samples'
keys (None where a sample lacks one), in sample order: "__key__",
"__index__", ... as lists. In tensor mode every field whose values are
bytes becomes one Ragged: the B values concatenated into one flat uint8
tensor plus B+1 offsets, so a batch crosses from the worker to the main
process as one shared-memory segment per field instead of B pickled bytes
objects. Inside a DataLoader worker the flat tensor is allocated in shared
memory before it is filled, so handing it over copies nothing.

Threading: plain functions over the caller's objects; no state.
"""

import collections
import itertools


class Ragged(collections.namedtuple("Ragged", ["data", "offsets"])):
    """B variable-length byte strings: data (uint8 tensor, all of them
    concatenated) and offsets (int64 tensor of B+1: item i is
    data[offsets[i]:offsets[i+1]]). A namedtuple, so the DataLoader's
    default_convert and pin_memory keep its type."""

    __slots__ = ()

    def __len__(self):
        return len(self.offsets) - 1

    def item(self, i):
        """Item i as a uint8 tensor view."""
        return self.data[int(self.offsets[i]):int(self.offsets[i + 1])]

    def tobytes(self, i):
        """Item i as bytes."""
        return self.item(i).numpy().tobytes()

    def memoryviews(self):
        """Every item as a memoryview into one buffer (no copy)."""
        mv = memoryview(self.data.numpy())
        offs = self.offsets.tolist()
        return [mv[a:b] for a, b in zip(offs, offs[1:])]


def _in_worker():
    import torch.utils.data as tud
    return tud.get_worker_info() is not None


def uint8_tensor(data, share):
    """A uint8 tensor holding a copy of data (bytes-like); allocated in
    shared memory first when `share` (a DataLoader worker: the tensor then
    crosses to the main process without another copy)."""
    import torch
    t = torch.empty(len(data), dtype=torch.uint8)
    if share and len(data):
        t.share_memory_()
    if len(data):
        src = data if isinstance(data, bytearray) else bytearray(data)
        t.copy_(torch.frombuffer(src, dtype=torch.uint8))
    return t


def ragged(values, share):
    """Ragged of a list of bytes."""
    import torch
    offsets = torch.tensor([0] + list(itertools.accumulate(map(len, values))),
                           dtype=torch.int64)
    return Ragged(uint8_tensor(bytearray().join(values), share), offsets)


def tensor_fields(sample, share=None):
    """A sample dict with every bytes field (not the "__*__" metadata) as a
    uint8 tensor (tensor mode without batches)."""
    if share is None:
        share = _in_worker()
    for k, v in sample.items():
        if type(v) is bytes and not k.startswith("__"):
            sample[k] = uint8_tensor(v, share)
    return sample


def collate(items, tensors=False):
    """One batch from a list of samples (see the module doc). Items that are
    not dicts (what a map= returned) are kept as a list."""
    if not items or not all(type(s) is dict for s in items):
        return list(items)
    n = len(items)
    out = {}
    for i, s in enumerate(items):
        for k, v in s.items():
            col = out.get(k)
            if col is None:
                col = out[k] = [None] * n
            col[i] = v
    if tensors:
        share = _in_worker()
        for k, col in out.items():
            if not k.startswith("__") and all(type(v) is bytes for v in col):
                out[k] = ragged(col, share)
    return out
