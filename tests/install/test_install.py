"""Installing shardcast: `cmake --install` (binaries, static libraries,
headers, pkg-config files), a C client program built with pkg-config
against the installed prefix, `pip install clients/python` offline into a
venv (with the C accelerator, found without SHARDCAST_BUILD), one version
everywhere, and the image recipe's use of the install rules."""

import glob
import json
import os
import re
import shutil
import subprocess
import tarfile
import zipfile

import pytest

from install_testlib import PY, REPO, clean_env, project_version, run

# Every header of include/ is public; shardcast_version.h is generated.
HEADERS = sorted([n for n in os.listdir(os.path.join(REPO, "include")) if n.endswith(".h")]
                 + ["shardcast_version.h"])
assert {"shardcast_client.h", "shardio.h", "shardio_wire.h"} <= set(HEADERS), HEADERS
LIBS = ["libshardcast_client.a", "libshardcast_wire.a", "libshardio.a"]
PCS = ["shardcast-client.pc", "shardcast-wire.pc", "shardio.pc"]

CLIENT_PROG = r"""
#include <stdio.h>
#include <shardcast_client.h>
#include <shardcast_version.h>

/* Reads the whole epoch 0 of a job (rank 0 of 1) and prints each sample's
 * key and content hash, then the version it was built with. */
int main(int argc, char **argv)
{
    if (argc != 3 || scc_global_init() != SCC_OK)
        return 2;
    scc_options o;
    scc_options_init(&o);
    o.server = argv[1];
    o.job = argv[2];
    o.world = 1;
    scc_stream *s;
    scc_code rc = scc_stream_open(&o, &s);
    const scc_sample *smp;
    while (rc == SCC_OK && (rc = scc_stream_next(s, &smp)) == SCC_OK && smp) {
        unsigned char h[32];
        if (scc_sample_hash(smp, h) != SCC_OK)
            return 3;
        printf("%.*s ", (int)smp->key_len, smp->key);
        for (int i = 0; i < 32; i++)
            printf("%02x", h[i]);
        printf("\n");
    }
    if (rc != SCC_OK) {
        fprintf(stderr, "stream: %s\n", scc_strerror(rc));
        return 1;
    }
    scc_stream_close(s);
    printf("version %s\n", SHARDCAST_VERSION_STRING);
    return 0;
}
"""

SHARDIO_PROG = r"""
#include <stdio.h>
#include <shardio.h>

int main(void)
{
    printf("%s|%s\n", SIO_VERSION_STRING, sio_strerror(SIO_ERR_NOTFOUND));
    return 0;
}
"""


def pkg_config(env, *args):
    return run(["pkg-config"] + list(args), env=env).stdout.split()


def compile_with(pkg, src, out, env):
    with open(out + ".c", "w") as f:
        f.write(src)
    # The README's command: cc prog.c $(pkg-config --cflags --libs PKG)
    run(["cc", "-Wall", "-Werror", out + ".c", "-o", out]
        + pkg_config(env, "--cflags", "--libs", pkg), env=env)
    return out


# -- cmake --install ------------------------------------------------------------

def test_installed_files(prefix):
    found = sorted(os.path.relpath(os.path.join(d, n), prefix)
                   for d, _, names in os.walk(prefix) for n in names)
    want = sorted(["bin/shardcastd", "bin/shardcast"]
                  + ["include/shardcast/" + h for h in HEADERS]
                  + ["lib/" + lib for lib in LIBS]
                  + ["lib/pkgconfig/" + pc for pc in PCS])
    assert found == want
    for b in ("shardcastd", "shardcast"):
        assert os.access(os.path.join(prefix, "bin", b), os.X_OK)
    # the public headers are the repository's, the version header generated
    for h in HEADERS:
        if h != "shardcast_version.h":
            with open(os.path.join(REPO, "include", h), "rb") as a, \
                    open(os.path.join(prefix, "include", "shardcast", h), "rb") as b:
                assert a.read() == b.read(), h


def test_pkg_config_files_name_the_prefix(prefix, pkg_env):
    for pc in PCS:
        name = pc[:-3]
        assert run(["pkg-config", "--modversion", name], env=pkg_env).stdout.strip() \
            == project_version()
        assert pkg_config(pkg_env, "--variable=prefix", name) == [prefix]
        cflags = pkg_config(pkg_env, "--cflags", name)
        assert "-I%s/include/shardcast" % prefix in cflags, cflags
    libs = pkg_config(pkg_env, "--libs", "shardcast-client")
    # static libraries: the client's dependencies come with it, in link order
    want = ["-lshardcast_client", "-lshardcast_wire", "-lcurl", "-lcrypto", "-ljansson"]
    assert [x for x in libs if x in want] == want, libs


@pytest.mark.parametrize("header", HEADERS)
def test_installed_header_is_self_contained(header, pkg_env, workdir):
    src = os.path.join(workdir, "hdr_%s.c" % header[:-2])
    with open(src, "w") as f:
        f.write("#include <%s>\nint x;\n" % header)
    run(["cc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", src]
        + pkg_config(pkg_env, "--cflags", "shardio"), env=pkg_env)


def test_client_program_built_with_pkg_config(pkg_env, workdir, server, dataset):
    prog = compile_with("shardcast-client", CLIENT_PROG, os.path.join(workdir, "client"),
                        pkg_env)
    out = run([prog, server.url, "train"], timeout=60).stdout.splitlines()
    assert out[-1] == "version " + project_version()
    got = dict(line.split() for line in out[:-1])
    assert len(got) == len(out) - 1 == dataset.total
    assert got == {k: s["hash"] for k, s in dataset.by_key.items()}


def test_shardio_program_built_with_pkg_config(pkg_env, workdir):
    prog = compile_with("shardio", SHARDIO_PROG, os.path.join(workdir, "shardio_prog"),
                        pkg_env)
    ver, _, msg = run([prog]).stdout.strip().partition("|")
    assert ver == project_version() and msg


def test_server_component_alone(build_dir, workdir):
    """What the image recipe installs: DESTDIR, component server."""
    stage = os.path.join(workdir, "stage")
    env = dict(os.environ, DESTDIR=stage)
    run(["cmake", "--install", build_dir, "--component", "server", "--prefix", "/usr/local"],
        env=env)
    found = [os.path.relpath(os.path.join(d, n), stage)
             for d, _, names in os.walk(stage) for n in names]
    assert found == ["usr/local/bin/shardcastd"]


# -- one version ------------------------------------------------------------------

def test_one_version_everywhere(prefix, venv, server, pkg_env):
    v = project_version()
    assert run([os.path.join(prefix, "bin", "shardcastd"), "--version"]).stdout.strip() \
        == "shardcastd " + v
    assert run([os.path.join(prefix, "bin", "shardcast"), "--version"]).stdout.strip() \
        == "shardcast " + v
    py, _ = venv
    assert run([py, "-c", "import shardcast; print(shardcast.__version__)"], cwd="/",
               env=clean_env()).stdout.strip() == v
    # the source tree's package (PYTHONPATH=clients/python) reads CMakeLists.txt
    src = run([PY, "-c", "import shardcast; print(shardcast.__version__)"], cwd="/",
              env=clean_env(PYTHONPATH=os.path.join(REPO, "clients", "python")))
    assert src.stdout.strip() == v
    dist = run([py, "-m", "pip", "show", "shardcast-client"], env=clean_env()).stdout
    assert re.search(r"^Version: %s$" % re.escape(v), dist, re.M), dist
    import urllib.request
    metrics = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    assert re.search(r'^shardcast_build_info\{version="%s"\} 1$' % re.escape(v), metrics,
                     re.M), [l for l in metrics.splitlines() if "build_info" in l]


# -- pip install clients/python ---------------------------------------------------

def test_pip_install_builds_and_finds_the_accelerator(venv):
    py, log = venv
    assert "accelerator built" in log, log
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               env=clean_env()).stdout.strip()
    # no SHARDCAST_BUILD, no PYTHONPATH, not run from the repository
    out = run([py, "-c", "import shardcast; print(shardcast.__file__); "
               "print(shardcast.accelerator_info())"], cwd="/", env=clean_env()).stdout
    where, info = out.splitlines()
    assert where.startswith(os.path.join(site, "shardcast") + os.sep), where
    assert re.fullmatch(r"c \(%s/_frames\.cpython-[^/]*\.so\)"
                        % re.escape(os.path.join(site, "shardcast")), info), info
    off = run([py, "-c", "import shardcast; print(shardcast.accelerator_info())"],
              cwd="/", env=clean_env(SHARDCAST_ACCEL="0")).stdout.strip()
    assert off == "python (SHARDCAST_ACCEL=0)"


READ_ALL = r"""
import json, sys, shardcast
url = shardcast.stream_url(sys.argv[1], "train", 0, 0, 1, fmt="frames")
with shardcast.FramesReader(url, decoder=sys.argv[2]) as r:
    keys = {s["__key__"]: shardcast.sample_hash(s) for s in r}
    print(json.dumps({"accelerated": r.accelerated, "samples": keys}))
"""


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_installed_client_reads_a_stream(venv, server, dataset, decoder):
    py, _ = venv
    out = json.loads(run([py, "-c", READ_ALL, server.url, decoder], cwd="/",
                         env=clean_env()).stdout)
    assert out["accelerated"] is (decoder == "c")
    assert out["samples"] == {k: s["hash"] for k, s in dataset.by_key.items()}


def backend(code, cwd, env=None, check=True):
    """Runs `code` with the build backend of the project at cwd imported
    as b (as pip does: backend-path on sys.path, cwd the project)."""
    prog = ("import sys; sys.path.insert(0, '_build_backend'); "
            "import shardcast_backend as b\n" + code)
    if check:
        return run([PY, "-c", prog], cwd=cwd, env=env or clean_env())
    return subprocess.run([PY, "-c", prog], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, timeout=300)


def wheel_files(path):
    with zipfile.ZipFile(path) as z:
        return z.namelist(), z.read("shardcast/_version.py").decode()


def test_wheel_without_a_compiler_is_pure_python(workdir):
    out = os.path.join(workdir, "wheel-nocc")
    os.makedirs(out)
    name = backend("print(b.build_wheel(%r))" % out, os.path.join(REPO, "clients", "python"),
                   env=clean_env(CC="shardcast-no-such-cc")).stdout.strip()
    assert name == "shardcast_client-%s-py3-none-any.whl" % project_version()
    names, version_py = wheel_files(os.path.join(out, name))
    assert not [n for n in names if n.endswith(".so")], names
    assert "not built: no C compiler (shardcast-no-such-cc" in version_py
    # accel=require makes that an error
    r = backend("b.build_wheel(%r, {'accel': 'require'})" % out,
                os.path.join(REPO, "clients", "python"),
                env=clean_env(CC="shardcast-no-such-cc"), check=False)
    assert r.returncode != 0 and "accel=require" in r.stderr, r.stderr


def test_sdist_builds_the_accelerator_away_from_the_repository(workdir):
    out = os.path.join(workdir, "sdist")
    os.makedirs(out)
    name = backend("print(b.build_sdist(%r))" % out,
                   os.path.join(REPO, "clients", "python")).stdout.strip()
    v = project_version()
    assert name == "shardcast_client-%s.tar.gz" % v
    with tarfile.open(os.path.join(out, name)) as tf:
        tf.extractall(out)
    root = os.path.join(out, "shardcast_client-" + v)
    wheel = backend("print(b.build_wheel(%r))" % out, root).stdout.strip()
    assert wheel.startswith("shardcast_client-%s-cp3" % v), wheel
    names, version_py = wheel_files(os.path.join(out, wheel))
    assert [n for n in names if re.fullmatch(r"shardcast/_frames\.cpython-.*\.so", n)], names
    assert "version = %r" % v in version_py


def test_accelerator_sources_are_the_wire_library(build_dir):
    """The files pip compiles into the accelerator are the ones CMake makes
    shardcast_wire of (its object files in the build)."""
    objs = glob.glob(os.path.join(build_dir, "CMakeFiles", "shardcast_wire.dir", "**", "*.o"),
                     recursive=True)
    cmake = sorted(os.path.relpath(o, os.path.join(build_dir, "CMakeFiles",
                                                   "shardcast_wire.dir"))[:-2] for o in objs)
    files = json.loads(backend("import json; print(json.dumps(b.c_sources()[1]))",
                               os.path.join(REPO, "clients", "python")).stdout)
    assert sorted(files) == cmake


# -- the image recipe --------------------------------------------------------------

def recipe():
    with open(os.path.join(REPO, "k8s", "image", "Containerfile")) as f:
        return f.read()


def test_image_build_context_configures(workdir):
    """The recipe's build stage: the paths it copies are enough for CMake
    to configure with its options (its build and install steps are those
    of test_server_component_alone)."""
    text = recipe()
    build_stage = text.split("FROM ${BASE_IMAGE} AS runtime")[0]
    ctx = os.path.join(workdir, "image-context")
    os.makedirs(ctx)
    for src, dst in re.findall(r"^COPY (?!--from)(\S+) (\S+)$", build_stage, re.M):
        s = os.path.join(REPO, src.rstrip("/"))
        d = os.path.join(ctx, dst.rstrip("/")) if dst != "./" else \
            os.path.join(ctx, os.path.basename(s))
        if os.path.isdir(s):
            shutil.copytree(s, d, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(s, d)
    m = re.search(r"RUN cmake -S /src -B /build (.*?) &&", re.sub(r"\\\n\s*", "", build_stage))
    assert m, "the recipe's cmake configure step was not found"
    opts = m.group(1).split()
    assert "-DCMAKE_INSTALL_PREFIX=/usr/local" in opts
    run(["cmake", "-S", ctx, "-B", os.path.join(workdir, "image-build")] + opts,
        timeout=120)
