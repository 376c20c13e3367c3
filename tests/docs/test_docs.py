"""Doc tests: the blocks of README.md and clients/python/README.md that are
meant to run are run against a real shardcastd, and every link and repository
path of the documentation (README.md, docs/, clients/python/README.md) points
to something that exists.

Runnable blocks. A fenced block is runnable when the line before its fence
(blank lines aside) is the comment

    <!-- doctest: NAME -->

NAME is unique in its file and RUNNABLE below says what the test does with
it. Blocks that cannot run here (pip install, kubectl against a cluster, a
real S3 bucket, the two commands of the README, placeholders) carry no
comment. The test fails when a file's runnable blocks differ from RUNNABLE,
so a new runnable block needs a check here and a removed one is noticed.

How they run. The test makes a small WebDataset in a temporary directory
(`shards/`: 4 shards x 16 samples, real JPEG `jpg`, `cls` and `json`
fields), starts README.md's `server` block there with bash, on a port of
127.0.0.1 the kernel picks (SHARDCAST_PORT=0: shardcastd reads every setting
from its SHARDCAST_<NAME> variable, and the block names no port), reads the
`listening=` line and waits for /readyz. Every other block runs with the
server's URL in SHARDCAST_SERVER, which the `shardcast` command and the
Python client read: the snippets' text is run as it is written. Shell blocks
run with `bash -e -o pipefail` and the build's `shardcast` and `shardcastd`
first on PATH; Python blocks with /usr/bin/python3 (which has torch) and the
client on PYTHONPATH. The blocks of clients/python/README.md name the
server as http://shardcast:8080; for them the Python process resolves that
one host and port to the test's server (a wrapper around
socket.getaddrinfo), again without changing the snippet.

What is checked. Each block must exit 0, and its output must show every
sample of an epoch exactly once: the keys the README's epoch loop prints
per epoch, the keys of a checkpointed run plus its resumed run against the
epoch's keys (and the same check must catch the sample that
`ds.state_dict(consumed=n)` without `loader=` loses), the share `shardcast
cat` writes, the samples the server sent for the DataLoader example.

Waits are for states (the listening line, /readyz, process exits); the
timeouts are only there so that a hung process fails the test.

Binaries: $SHARDCAST_BIN for shardcastd (else build/ or build-*/),
$SHARDCAST_CLI or $SHARDCAST_BUILD/shardcast for the command (else next to
the server, build/ or build-*/). A missing binary fails; it never skips.

Run: /usr/bin/python3 -m pytest tests/docs
"""

import collections
import glob
import http.client
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from shardcast_testlib import find_cli_binary, find_server_binary  # noqa: E402

README = "README.md"
PY_README = "clients/python/README.md"

# The documentation whose links and paths are checked.
DOC_FILES = [README, PY_README, "SECURITY.md"] + sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))

# The runnable blocks of each file: name -> language.
RUNNABLE = {
    README: {
        "server": "sh",             # started in the background, for all the others
        "cli": "sh",
        "python-epoch": "python",
        "python-checkpoint": "python",
        "python-resume": "python",
    },
    PY_README: {
        "dataloader": "python",
        "tarfile": "python",
    },
}

# The blocks whose snippet names the server as http://shardcast:8080.
PY_README_HOST = ("shardcast", 8080)

SHARDS, PER_SHARD = 4, 16
TOTAL = SHARDS * PER_SHARD          # even: 2 and 4 consumers get equal shares
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

STARTUP_TIMEOUT = 120.0     # the listening= line, then /readyz (a hung server fails)
BLOCK_TIMEOUT = 900.0       # one block (a hung block fails)

MARKER_RE = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")


# -- the blocks of a Markdown file --------------------------------------------

class Block:
    def __init__(self, path, line, lang, code, name):
        self.path, self.line, self.lang, self.code, self.name = path, line, lang, code, name

    def __repr__(self):
        return "%s:%d %s block %r" % (self.path, self.line, self.lang or "plain", self.name)


def parse_blocks(relpath):
    """Every fenced block of a Markdown file, with the doctest name of the
    comment before it (None when there is none). A doctest comment that is
    not followed by a fence is an error."""
    with open(os.path.join(REPO, relpath), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    pending = None      # (name, line) of a doctest comment waiting for its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER_RE.match(line)
        if m:
            assert pending is None, "%s:%d: doctest comment %r is not followed by a " \
                "fenced block" % (relpath, pending[1], pending[0])
            pending = (m.group(1), i + 1)
            i += 1
            continue
        f = FENCE_RE.match(line)
        if f:
            indent, fence, lang = f.group(1), f.group(2), f.group(3).lower()
            body = []
            j = i + 1
            while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                          and lines[j].strip().strip(fence[0]) == ""):
                text = lines[j]
                body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
                j += 1
            assert j < len(lines), "%s:%d: the fenced block is not closed" % (relpath, i + 1)
            name = pending[0] if pending else None
            blocks.append(Block(relpath, i + 1, lang, "\n".join(body) + "\n", name))
            pending = None
            i = j + 1
            continue
        if line.strip() and pending is not None:
            pytest.fail("%s:%d: doctest comment %r is not followed by a fenced block"
                        % (relpath, pending[1], pending[0]), pytrace=False)
        i += 1
    assert pending is None, "%s:%d: doctest comment %r is not followed by a fenced block" \
        % (relpath, pending[1], pending[0])
    return blocks


def runnable(relpath):
    """{name: Block} of the runnable blocks of a file (names unique)."""
    out = {}
    for b in parse_blocks(relpath):
        if b.name is None:
            continue
        assert b.name not in out, "%s: two blocks named %r (lines %d and %d)" % (
            relpath, b.name, out[b.name].line, b.line)
        out[b.name] = b
    return out


def test_runnable_blocks_are_the_expected_ones():
    """Each file has runnable blocks, each one named, in its language, with
    a check in this file; and every Python block of README.md runs."""
    for relpath, expected in RUNNABLE.items():
        found = runnable(relpath)
        assert found, "%s has no runnable block" % relpath
        assert sorted(found) == sorted(expected), (
            "%s: runnable blocks %s, the test knows %s: add a check to RUNNABLE (and "
            "to the tests) for a new one" % (relpath, sorted(found), sorted(expected)))
        for name, b in found.items():
            want = expected[name]
            assert b.lang in (("sh", "bash", "shell") if want == "sh" else ("python",)), \
                "%r: a %s block is marked %r, expected a %s block" % (b, b.lang, name, want)
    unmarked_py = [b for b in parse_blocks(README) if b.lang == "python" and b.name is None]
    assert not unmarked_py, ("README.md's Python blocks all run; mark these (and check "
                             "them here): %s" % unmarked_py)


# -- the dataset, the binaries, the server ------------------------------------

def sample_key(g):
    return "sample%04d" % g


def make_shards(out):
    """SHARDS tar shards of PER_SHARD samples: a real JPEG `jpg` (so that
    decode=True works), `cls` and `json`. Returns the keys in dataset order."""
    os.makedirs(out)
    try:
        from PIL import Image
    except ImportError:   # decode=True then keeps bytes; any payload will do
        Image = None
    keys = []
    for s in range(SHARDS):
        with tarfile.open(os.path.join(out, "train-%06d.tar" % s), "w",
                          format=tarfile.USTAR_FORMAT) as tf:
            for i in range(PER_SHARD):
                g = s * PER_SHARD + i
                key = sample_key(g)
                keys.append(key)
                if Image is not None:
                    buf = io.BytesIO()
                    Image.new("RGB", (16, 16), (g * 37 % 256, g * 11 % 256, 90)).save(
                        buf, format="JPEG")
                    jpg = buf.getvalue()
                else:
                    jpg = b"\xff\xd8 not decoded \xff\xd9"
                fields = {"cls": str(g % 10).encode(), "jpg": jpg,
                          "json": json.dumps({"key": key, "index": g}).encode()}
                for ext in sorted(fields):
                    ti = tarfile.TarInfo("%s.%s" % (key, ext))
                    ti.size, ti.mtime, ti.mode = len(fields[ext]), 0, 0o644
                    tf.addfile(ti, io.BytesIO(fields[ext]))
    return keys


@pytest.fixture(scope="session")
def docs_env():
    """A working directory with shards/, a bin/ with the build's shardcastd
    and shardcast, and the environment the blocks run in (without the
    server's URL yet)."""
    server = find_server_binary()
    if server is None:
        pytest.fail("shardcastd not found: build it (scripts/build.sh) or set SHARDCAST_BIN",
                    pytrace=False)
    cli = find_cli_binary(server)
    if cli is None:
        pytest.fail("the shardcast command was not found: build it or set SHARDCAST_CLI "
                    "(or SHARDCAST_BUILD)", pytrace=False)
    work = tempfile.mkdtemp(prefix="shardcast-docs-")
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    os.symlink(os.path.abspath(server), os.path.join(bindir, "shardcastd"))
    os.symlink(os.path.abspath(cli), os.path.join(bindir, "shardcast"))
    keys = make_shards(os.path.join(work, "shards"))
    # The blocks see no shardcast setting of the caller's environment (a
    # SHARDCAST_SOURCE or _CONFIG would change the server); the build's
    # location stays, so that the client finds its frames accelerator.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SHARDCAST_") or k in ("SHARDCAST_BUILD",
                                                       "SHARDCAST_REQUIRE_ACCEL")}
    if "SHARDCAST_BUILD" not in env:
        env["SHARDCAST_BUILD"] = os.path.dirname(os.path.abspath(server))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)    # the snippets are one rank
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    pp = os.path.join(REPO, "clients", "python")
    env["PYTHONPATH"] = pp + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    yield {"work": work, "env": env, "keys": keys}
    shutil.rmtree(work, ignore_errors=True)


def http_get(url, path, timeout=10):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class ServerBlock:
    """README.md's server block, run by bash in the background (its own
    process group, stopped with SIGTERM at the end)."""

    def __init__(self, block, work, env):
        env = dict(env, SHARDCAST_PORT="0")
        self.stderr_path = os.path.join(work, "server.stderr")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", block.code],
                                     cwd=work, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._stderr,
                                     start_new_session=True)
        line = self._first_line()
        if not line.startswith("listening="):
            self.stop()
            pytest.fail("%r did not start: first line %r\n%s" % (block, line, self.log()),
                        pytrace=False)
        host, _, port = line[len("listening="):].strip().rpartition(":")
        self.url = "http://%s:%s" % (host, port)
        self.port = int(port)
        # Keep reading stdout so that the server never blocks on the pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self._wait_ready(block)

    def _first_line(self):
        got = []
        t = threading.Thread(target=lambda: got.append(
            self.proc.stdout.readline().decode("utf-8", "replace")), daemon=True)
        t.start()
        t.join(STARTUP_TIMEOUT)
        return got[0] if got else ""

    def _wait_ready(self, block):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                pytest.fail("%r exited (%s)\n%s" % (block, self.proc.returncode, self.log()),
                            pytrace=False)
            try:
                status, _ = http_get(self.url, "/readyz")
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail("%r not ready after %.0f s\n%s" % (block, STARTUP_TIMEOUT,
                                                                self.log()), pytrace=False)
            time.sleep(0.05)

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-6000:]

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(docs_env):
    block = runnable(README)["server"]
    s = ServerBlock(block, docs_env["work"], docs_env["env"])
    yield s
    was_alive = s.alive()
    rc = s.stop()
    assert was_alive, "the README's server exited during the doc tests:\n" + s.log()
    # 0: shardcastd's clean exit after SIGTERM (bash ran it in its place);
    # SIGTERM's codes: bash itself was stopped with it.
    assert rc in (0, -signal.SIGTERM, 128 + signal.SIGTERM), \
        "the README's server did not stop cleanly (exit %s):\n%s" % (rc, s.log())


def run_block(block, docs_env, server, cwd=None, code=None, hosts=None):
    """Run a block (or `code` in its place) to the end; returns its stdout.
    A non-zero exit fails the test with the block's output."""
    cwd = cwd or docs_env["work"]
    os.makedirs(cwd, exist_ok=True)
    env = dict(docs_env["env"], SHARDCAST_SERVER=server.url)
    code = block.code if code is None else code
    if block.lang == "python":
        path = os.path.join(cwd, "doc_block_%s.py" % re.sub(r"\W", "_", block.name))
        with open(path, "w") as f:
            f.write(code)
        argv = [PYTHON, os.path.join(HERE, "resolve_run.py"), path]
        if hosts:
            env["DOCTEST_HOSTS"] = ",".join("%s:%d=127.0.0.1:%d" % (h, p, server.port)
                                            for h, p in hosts)
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", code]
    try:
        r = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%r did not end in %.0f s\nstdout: %s\nstderr: %s" % (
            block, BLOCK_TIMEOUT, (e.stdout or b"")[-3000:], (e.stderr or b"")[-3000:]),
            pytrace=False)
    out = r.stdout.decode("utf-8", "replace")
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 0, "%r failed (exit %d)\n--- code\n%s--- stdout\n%s\n--- stderr\n%s" % (
        block, r.returncode, code, out[-4000:], err[-6000:])
    return out


def exactly_once(got, expected, what):
    """A message naming the missing and repeated keys, or None."""
    g, e = collections.Counter(got), collections.Counter(expected)
    missing = sorted((e - g).elements())
    extra = sorted((g - e).elements())
    if not missing and not extra:
        return None
    return "%s: %d keys delivered for %d in the epoch; missing %s; repeated or unknown %s" % (
        what, len(got), len(expected), missing, extra)


# -- README.md ----------------------------------------------------------------

def test_readme_server(server):
    """The server block serves the job `train` over the shards it names."""
    status, body = http_get(server.url, "/v1/jobs/train")
    assert status == 200, body
    job = json.loads(body)
    assert job["state"] == "ready" and job["shards"] == SHARDS, job


def test_readme_cli(docs_env, server):
    block = runnable(README)["cli"]
    cwd = os.path.join(docs_env["work"], "cli")
    os.makedirs(cwd)
    os.symlink(os.path.join(docs_env["work"], "shards"), os.path.join(cwd, "shards"))
    out = run_block(block, docs_env, server, cwd=cwd)
    for s in range(SHARDS):
        assert "train-%06d.tar" % s in out, "shardcast ls did not list shard %d:\n%s" % (s, out)
    assert "__shardcast_end__" in out, "the tar listing does not end the share:\n" + out
    assert re.search(r"^samples\s+%d\b" % TOTAL, out, re.M), \
        "shardcast bench -n 4 did not read the %d samples of the epoch:\n%s" % (TOTAL, out)
    # part0.tar: consumer 0 of 2's share of epoch 0, each of its samples once.
    keys = []
    with tarfile.open(os.path.join(cwd, "part0.tar")) as tf:
        names = tf.getnames()
    assert names[-1] == "__shardcast_end__", names[-3:]
    for n in names[:-1]:
        m = re.match(r"^(\d{12})/(.+)\.cls$", n)
        if m:
            keys.append(m.group(2))
    assert len(keys) == TOTAL // 2 and len(set(keys)) == len(keys), keys
    assert set(keys) <= set(docs_env["keys"])


def test_readme_python_epoch(docs_env, server):
    """Every epoch the loop prints is every sample once, at indexes 0..N-1."""
    out = run_block(runnable(README)["python-epoch"], docs_env, server)
    by_epoch = collections.defaultdict(list)
    for line in out.splitlines():
        epoch, index, key = line.split()
        by_epoch[int(epoch)].append((int(index), key))
    assert sorted(by_epoch) == [0, 1], out[-2000:]
    for epoch, got in by_epoch.items():
        assert sorted(i for i, _ in got) == list(range(TOTAL)), "epoch %d: indexes" % epoch
        problem = exactly_once([k for _, k in got], docs_env["keys"], "epoch %d" % epoch)
        assert problem is None, problem
    assert [k for _, k in by_epoch[0]] != [k for _, k in by_epoch[1]], \
        "epochs 0 and 1 came in the same order"


def checkpoint_and_resume(docs_env, server, cwd, checkpoint_code=None):
    """Run the checkpoint block then the resume block in cwd; returns
    (keys before, keys after) as printed."""
    blocks = runnable(README)
    before = run_block(blocks["python-checkpoint"], docs_env, server, cwd=cwd,
                       code=checkpoint_code).split()
    assert os.path.exists(os.path.join(cwd, "data-state.json"))
    after = run_block(blocks["python-resume"], docs_env, server, cwd=cwd).split()
    return before, after


def test_readme_python_checkpoint_and_resume(docs_env, server):
    """The first run takes 25 samples and saves the state; the resumed run
    delivers exactly the rest of the epoch: together, every key of the
    epoch once."""
    before, after = checkpoint_and_resume(
        docs_env, server, os.path.join(docs_env["work"], "resume"))
    assert len(before) == 25, before
    problem = exactly_once(before + after, docs_env["keys"], "checkpoint + resume")
    assert problem is None, problem


def test_resume_check_catches_a_lost_sample(docs_env, server):
    """The check above has teeth: the old snippet's state_dict(consumed=n),
    without loader=, describes one consumer instead of the DataLoader's two
    workers, and the resumed epoch drops a sample; the same comparison must
    report it."""
    code = runnable(README)["python-checkpoint"].code
    wrong = code.replace("ds.state_dict(consumed=n, loader=loader)", "ds.state_dict(consumed=n)")
    assert wrong != code, "the checkpoint block no longer calls state_dict(consumed=n, loader=loader)"
    before, after = checkpoint_and_resume(
        docs_env, server, os.path.join(docs_env["work"], "resume-wrong"), checkpoint_code=wrong)
    problem = exactly_once(before + after, docs_env["keys"], "wrong checkpoint + resume")
    assert problem is not None and "missing ['" in problem, (
        "a resume from state_dict(consumed=n) without loader= delivered every sample once; "
        "the exactly-once check would not catch it")


# -- clients/python/README.md -------------------------------------------------

def samples_sent(server):
    status, body = http_get(server.url, "/metrics")
    assert status == 200, body
    total = 0
    for line in body.decode().splitlines():
        if line.startswith("shardcast_samples_sent_total{") and 'shardcast_job="train"' in line:
            total += int(float(line.rsplit(None, 1)[1]))
    return total


def test_py_readme_dataloader(docs_env, server):
    """Ten epochs through 4 workers with decode=True: the server sends each
    epoch's samples once (10 x N samples in all)."""
    sent = samples_sent(server)
    run_block(runnable(PY_README)["dataloader"], docs_env, server, hosts=[PY_README_HOST])
    assert samples_sent(server) - sent == 10 * TOTAL


def test_py_readme_tarfile(docs_env, server):
    """The tarfile loop reads a whole share and asserts it is complete."""
    sent = samples_sent(server)
    run_block(runnable(PY_README)["tarfile"], docs_env, server, hosts=[PY_README_HOST])
    assert samples_sent(server) - sent == TOTAL


# -- links and paths ----------------------------------------------------------

LINK_RE = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1")
# Repository paths in code spans: a top-level folder of the repository, or
# a top-level file.
TOP_DIRS = ("include", "shardio", "server", "clients", "tests", "bench", "k8s", "scripts",
            "docs", ".ci")


def prose_lines(relpath):
    """(line number, text) of the lines outside fenced blocks."""
    with open(os.path.join(REPO, relpath), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, fence = [], None
    for n, line in enumerate(lines, 1):
        f = FENCE_RE.match(line)
        if fence is None and f:
            fence = f.group(2)
            continue
        if fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        out.append((n, line))
    return out


def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen = collections.Counter()
    out = set()
    for _, line in prose_lines(os.path.relpath(path, REPO)):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        out.add(s if seen[s] == 0 else "%s-%d" % (s, seen[s]))
        seen[s] += 1
    return out


def links(relpath):
    for n, line in prose_lines(relpath):
        text = CODE_SPAN_RE.sub("", line)
        for m in LINK_RE.finditer(text):
            yield n, m.group(2)
        m = REFDEF_RE.match(text)
        if m:
            yield n, m.group(1)


def test_links_resolve():
    """Every relative link of the documentation names a file or folder of
    the repository, and every #anchor a heading of the Markdown file."""
    bad = []
    checked = 0
    for relpath in DOC_FILES:
        here = os.path.dirname(os.path.join(REPO, relpath))
        for n, target in links(relpath):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto:
                continue
            checked += 1
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(here, urllib.parse.unquote(path))) \
                if path else os.path.join(REPO, relpath)
            where = "%s:%d: %s" % (relpath, n, target)
            if not full.startswith(REPO + os.sep) and full != REPO:
                bad.append(where + " (outside the repository)")
            elif not os.path.exists(full):
                bad.append(where + " (no such file)")
            elif frag and full.endswith(".md") and frag not in anchors(full):
                bad.append(where + " (no heading with that anchor)")
    assert checked > 0, "no relative links found"
    assert not bad, "broken links:\n" + "\n".join(bad)


def code_paths(relpath):
    for n, line in prose_lines(relpath):
        for m in CODE_SPAN_RE.finditer(line):
            for word in m.group(2).split():
                word = word.rstrip(".,;:)").lstrip("(")
                top = word.split("/", 1)[0]
                if "/" not in word or top not in TOP_DIRS:
                    if not re.match(r"^[A-Z]+\.md$|^CMakeLists\.txt$", word):
                        continue
                if re.search(r"[<>{}\[\]$]|\.\.\.", word):
                    continue    # a pattern or a placeholder, not a path
                yield n, word


def test_code_span_paths_exist():
    """Repository paths the documentation names in code spans
    (`tests/...`, `bench/...`, `include/...`, `SECURITY.md`, ...) exist,
    from the repository's root or from the file's own folder (the Python
    client's README names its `tests/...`); a path with * must match
    something."""
    bad = []
    checked = 0
    for relpath in DOC_FILES:
        bases = [REPO, os.path.dirname(os.path.join(REPO, relpath))]
        for n, word in code_paths(relpath):
            checked += 1
            ok = any(glob.glob(os.path.join(base, word)) if "*" in word
                     else os.path.exists(os.path.join(base, word)) for base in bases)
            if not ok:
                bad.append("%s:%d: `%s`" % (relpath, n, word))
    assert checked > 0
    assert not bad, "paths that do not exist:\n" + "\n".join(bad)
