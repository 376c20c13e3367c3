"""ShardcastDataLoader: a torch DataLoader that counts what the training
loop took, so that the dataset's state_dict() needs no arguments.

The main process of a DataLoader with workers never sees the workers'
copies of the dataset; the in-order round robin over the workers makes the
number of items the training loop took determine every consumer's
position (shardcast.state.loader_positions). This loader counts those
items and registers itself with the dataset: ds.state_dict() and
loader.state_dict() then give the exact resume state, as torch's Stateful
protocol and torch.distributed.checkpoint expect (the role of Mosaic
Streaming's StreamingDataLoader).

Threading: used from the training loop's thread, like any DataLoader.
"""

import weakref

import torch.utils.data as _tud


class ShardcastDataLoader(_tud.DataLoader):
    """DataLoader(dataset, ...) for a ShardcastDataset, with state_dict() /
    load_state_dict(). `consumed` counts the items taken since the current
    iteration began (0 again at each iter(), and after load_state_dict).
    Requirements as for state_dict(consumed=, loader=): in-order (the
    default), drop_last=False."""

    def __init__(self, dataset, *args, **kwargs):
        super().__init__(dataset, *args, **kwargs)
        if getattr(self, "drop_last", False):
            raise ValueError("ShardcastDataLoader needs drop_last=False: a dropped "
                             "partial batch would count as delivered")
        self.consumed = 0
        dataset._loader = weakref.ref(self)

    def __iter__(self):
        self.consumed = 0
        for item in super().__iter__():
            self.consumed += 1
            yield item

    def state_dict(self):
        """The dataset's resume state at the items taken so far."""
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        """Resume the dataset from a state_dict() (before iterating)."""
        self.dataset.load_state_dict(state)
        self.consumed = 0
