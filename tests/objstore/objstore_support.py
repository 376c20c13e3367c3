"""Fixtures of the object-store integration tests (HTTP via nginx, S3 via
s3rver, faults via tests/support/faultproxy.py).

The C side is driven through tests/tools/sio_epoch_dump (built by CMake):
its directory is $SHARDCAST_BUILD, else <repo>/build. Every process
gets a clean AWS environment (no ~/.aws, IMDS disabled) so that nothing
leaves 127.0.0.1.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from support.faultproxy import FaultProxy, Rule  # noqa: E402,F401
from support.s3rver import S3rver  # noqa: E402

MKWDS = REPO / "tests" / "tools" / "mkwds.py"
NSHARDS = 12
SAMPLES_PER_SHARD = 40


def build_dir():
    return Path(os.environ.get("SHARDCAST_BUILD") or REPO / "build")


@pytest.fixture(scope="session")
def dump_bin():
    p = build_dir() / "sio_epoch_dump"
    if not os.access(p, os.X_OK):
        pytest.fail("sio_epoch_dump not built at %s (set SHARDCAST_BUILD)"
                    % p)
    return str(p)


def clean_env(extra=None):
    """The environment of a child: no AWS settings but those given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = tempfile.gettempdir() + "/shardcast-objstore-nohome"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env.update(extra or {})
    return env


class Dump:
    """Runs sio_epoch_dump and keeps the result."""

    def __init__(self, binary):
        self.binary = binary

    def run(self, source, *args, env=None, check=True, timeout=120):
        cmd = [self.binary, *map(str, args), source]
        p = subprocess.run(cmd, env=clean_env(env), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        out, err = p.stdout.decode(), p.stderr.decode()
        if check and p.returncode != 0:
            raise AssertionError("%s failed (%d): %s" % (cmd, p.returncode,
                                                         err))
        return p.returncode, out, err


@pytest.fixture(scope="session")
def dump(dump_bin):
    return Dump(dump_bin)


def lines_without_url(out):
    """(global index, key, hash) per sample: the shard URL differs by
    source, everything else must not."""
    rows = []
    for line in out.splitlines():
        idx, url, key, h = line.split("\t")
        rows.append((int(idx), os.path.basename(url), key, h))
    return rows


def io_stats(err):
    for line in err.splitlines():
        if line.startswith("io "):
            return dict(kv.split("=") for kv in line.split()[1:])
    return {}


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("wds") / "data"
    subprocess.run([sys.executable if "python3" in sys.executable
                    else "/usr/bin/python3", str(MKWDS), "--out", str(d),
                    "--shards", str(NSHARDS), "--samples-per-shard",
                    str(SAMPLES_PER_SHARD), "--size", "12000", "--seed", "3",
                    "--prefix", "shard"], check=True, stdout=subprocess.PIPE)
    return d


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_nginx(directory, root):
    """nginx (Debian's) serving `directory` on 127.0.0.1, its files under
    `root`; yields the base URL."""
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(exe, os.X_OK):
        pytest.fail("nginx not installed (apt-get install nginx-light)")
    root = Path(root)
    port = free_port()
    conf = root / "nginx.conf"
    tmp = {k: root / k for k in ("body", "proxy", "fcgi", "uwsgi", "scgi")}
    # As root, nginx's workers would drop to "nobody", which cannot read
    # pytest's private temporary directories.
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf.write_text(user + """daemon off;
worker_processes 1;
pid %(root)s/nginx.pid;
error_log %(root)s/error.log;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path %(body)s;
  proxy_temp_path %(proxy)s;
  fastcgi_temp_path %(fcgi)s;
  uwsgi_temp_path %(uwsgi)s;
  scgi_temp_path %(scgi)s;
  sendfile on;
  keepalive_requests 100000;
  server { listen 127.0.0.1:%(port)d; root %(data)s; }
}
""" % dict(root=root, port=port, data=directory, **tmp))
    proc = subprocess.Popen([exe, "-c", str(conf), "-p", str(root)],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("nginx did not start: %s" %
                            (root / "error.log").read_text())
            time.sleep(0.05)
    try:
        yield "http://127.0.0.1:%d" % port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def nginx(dataset, tmp_path_factory):
    """nginx (Debian's) serving the dataset directory on 127.0.0.1."""
    with serve_nginx(dataset, tmp_path_factory.mktemp("nginx")) as url:
        yield url


@pytest.fixture(scope="session")
def s3(dataset):
    """s3rver with bucket "data": the dataset under train/."""
    with S3rver() as srv:
        srv.create_bucket("data")
        srv.upload_dir("data", dataset, prefix="train/")
        yield srv
