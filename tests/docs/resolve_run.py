"""Run a Python file as __main__, with some host:port pairs resolved to
others: the doc tests run the snippets of clients/python/README.md, which
name their server as http://shardcast:8080, against a server on a free
loopback port without changing the snippet's text.

    DOCTEST_HOSTS="shardcast:8080=127.0.0.1:40123[,...]" python3 resolve_run.py FILE

The mapping is made in socket.getaddrinfo, which http.client and urllib
(the client's only ways to connect) call for every connection; DataLoader
workers are forked from this process and keep it.
"""

import os
import runpy
import socket
import sys

_MAP = {}
for item in filter(None, os.environ.pop("DOCTEST_HOSTS", "").split(",")):
    src, dst = item.split("=")
    h, p = src.rsplit(":", 1)
    dh, dp = dst.rsplit(":", 1)
    _MAP[(h, int(p))] = (dh, int(dp))

_getaddrinfo = socket.getaddrinfo


def _mapped_getaddrinfo(host, port, *args, **kwargs):
    try:
        key = (host.decode() if isinstance(host, bytes) else host, int(port))
    except (TypeError, ValueError):
        key = None
    if key in _MAP:
        host, port = _MAP[key]
    return _getaddrinfo(host, port, *args, **kwargs)


if _MAP:
    socket.getaddrinfo = _mapped_getaddrinfo

if __name__ == "__main__":
    path = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(path))   # as `python3 FILE` has it
    runpy.run_path(path, run_name="__main__")
