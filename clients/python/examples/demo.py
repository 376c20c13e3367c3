#!/usr/bin/python3
"""Stream one epoch of a shardcast job into a PyTorch DataLoader and report
what arrived: a few sample keys, the sample count, samples/s and MB/s.

    PYTHONPATH=clients/python /usr/bin/python3 clients/python/examples/demo.py \\
        --url http://127.0.0.1:8080 --job demo --workers 4

Each DataLoader worker is one shardcast consumer (this process is rank 0 of
world 1, so W = workers). With --expect N the exit status is non-zero
unless exactly N samples arrived.
"""

import argparse
import sys
import time

import torch.utils.data

from shardcast import ShardcastDataset, ShardcastError


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8080")
    ap.add_argument("--job", required=True)
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--workers", type=int, default=4, help="DataLoader workers (consumers)")
    ap.add_argument("--format", choices=("frames", "tar"), default="frames",
                    help="wire format (default: frames)")
    ap.add_argument("--show", type=int, default=5, help="sample keys to print")
    ap.add_argument("--expect", type=int, default=None, help="exact sample count expected")
    args = ap.parse_args(argv)

    ds = ShardcastDataset(args.url, args.job, rank=0, world=1, epoch=args.epoch,
                          format=args.format)
    loader = torch.utils.data.DataLoader(ds, num_workers=args.workers, batch_size=None)
    count = nbytes = 0
    t0 = time.monotonic()
    try:
        for sample in loader:
            if count < args.show:
                fields = sorted(k for k in sample if not k.startswith("__"))
                print("sample %-16s index=%-6d fields=%s" %
                      (sample["__key__"], sample["__index__"], ",".join(fields)))
            count += 1
            nbytes += sum(len(v) for k, v in sample.items() if not k.startswith("__"))
    except ShardcastError as e:
        print("demo: stream failed: %s" % e, file=sys.stderr)
        # Drop the traceback now: it holds the DataLoader iterator in a
        # cycle, and a late collection makes worker shutdown wait 10 s.
        e.__traceback__ = None
        return 1
    dt = max(time.monotonic() - t0, 1e-9)
    print("epoch %d: %d samples, %.1f MB in %.2f s: %.0f samples/s, %.1f MB/s "
          "(%d workers, format %s)" % (args.epoch, count, nbytes / 1e6, dt, count / dt,
                                        nbytes / 1e6 / dt, args.workers, args.format))
    if args.expect is not None and count != args.expect:
        print("demo: expected %d samples, got %d" % (args.expect, count), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
