"""Index sidecars cost no request where none is there: a listed source
(an S3 prefix) asks only for the sidecars its listing shows; a brace
pattern (no listing) asks for none unless --index-sidecars-probe says so.
The requests are counted by the fault proxy in front of the store."""
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from objstore_support import NSHARDS, FaultProxy, clean_env

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_server_stream import Server, read_epoch, s3env, server_bin  # noqa: E402

SIDECAR = r"\.scidx$"


def metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return sum(float(ln.split()[-1]) for ln in text.splitlines()
               if ln.startswith(name + " ") or ln.startswith(name + "{"))


def test_a_brace_pattern_asks_for_no_sidecar_unless_told(nginx):
    src = "/shard-{000000..%06d}.tar" % (NSHARDS - 1)
    with FaultProxy(upstream=nginx) as proxy:
        srv = Server(proxy.url + src, clean_env())
        try:
            read_epoch(srv.url)
        finally:
            srv.stop()
        assert proxy.count(method="GET", path=SIDECAR) == 0
        assert proxy.count(method="GET", path=r"\.tar$") > 0
        # Opted in: the store is asked (404s here), as before.
        proxy.reset_counters()
        srv = Server(proxy.url + src, clean_env({"SHARDCAST_INDEX_SIDECARS_PROBE": "true"}))
        try:
            read_epoch(srv.url)
        finally:
            srv.stop()
        assert proxy.count(method="GET", path=SIDECAR) > 0


def test_a_listing_tells_which_sidecars_to_fetch(dataset, s3, tmp_path):
    """Sidecars for 2 of the shards next to them under a prefix: exactly
    those 2 are fetched, and their indexes are loaded."""
    local = tmp_path / "copy"
    shutil.copytree(dataset, local)
    names = sorted(p.name for p in local.glob("*.tar"))[:2]
    cli = str(Path(server_bin()).parent / "shardcast")
    for n in names:
        out = subprocess.run([cli, "index", "--sidecar", str(local / n)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    s3.create_bucket("side")
    for p in sorted(local.iterdir()):
        if p.suffix in (".tar", ".scidx"):
            s3.put_bytes("side", "train/" + p.name, p.read_bytes())
    with FaultProxy(upstream=s3.endpoint) as proxy:
        srv = Server("s3://side/train/", s3env(proxy.url))
        try:
            read_epoch(srv.url)
            loaded = metric(srv.url, "shardcast_index_loaded_total")
        finally:
            srv.stop()
        gets = proxy.count(method="GET", path=SIDECAR)
    assert gets == 2, gets
    assert loaded == 2, loaded
