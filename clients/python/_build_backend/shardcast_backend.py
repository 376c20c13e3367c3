"""shardcast_backend -- the in-tree PEP 517 build backend of the Python client
(pyproject.toml: build-backend = "shardcast_backend", backend-path =
["_build_backend"]).

It needs the standard library only (tomllib, Python 3.11+; older Pythons
ask for tomli through get_requires_for_build_*), so `pip install
clients/python` works offline with build isolation: there is nothing to
download. It makes:

  * a wheel: the shardcast package, its version written into
    shardcast/_version.py, and the C accelerator shardcast._frames compiled
    from clients/python/ext/frames_ext.c and the wire module's sources (the
    same files CMake builds into shardcast_wire: shardio/wire/*.c and the
    list(APPEND SHARDIO_WIRE_SOURCES ...) of CMakeLists.txt). The
    accelerator needs a C compiler (gcc), Python.h (Debian: python3-dev)
    and jansson (libjansson-dev); when one is missing the wheel holds the
    pure-Python reader alone, and shardcast.accelerator_info() says why.
    With a compiled accelerator the wheel is tagged for this interpreter
    and platform (cp311-cp311-linux_x86_64), else py3-none-any;
  * an sdist that carries the C sources it needs (csrc/), so a wheel can be
    built from it away from the repository;
  * an editable wheel (pip install -e): a .pth file naming this folder;
    the accelerator is then the one CMake built (SHARDCAST_BUILD, or
    build/python of the repository).

The version is shardcast's one version: project(VERSION ...) in the
repository's CMakeLists.txt, read by shardcast/_version.py (an sdist's
_version.py holds it as a literal).

Choosing whether the accelerator is built: the config setting `accel`
(pip install --config-settings accel=VALUE) or the environment variable
SHARDCAST_ACCEL_BUILD: "auto" (default: build it when possible, else a
pure-Python wheel), "require" (fail the build when it cannot be built) or
"off" (never). CC, CFLAGS, CPPFLAGS and LDFLAGS are honoured; pkg-config,
when installed, supplies jansson's flags.
"""

import base64
import concurrent.futures
import csv
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: get_requires_for_build_* asks for tomli
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)          # clients/python (or an sdist's root)
REPO = os.path.dirname(os.path.dirname(PROJECT))
PACKAGE = "shardcast"
ACCEL_MODES = ("auto", "require", "off")
# The [project] keys this backend turns into metadata; any other key is an
# error rather than metadata silently left out.
PROJECT_KEYS = {"name", "version", "dynamic", "description", "readme", "requires-python",
                "dependencies", "optional-dependencies", "license", "urls", "keywords",
                "classifiers"}
# The files an sdist carries besides the package (paths relative to PROJECT).
SDIST_FILES = ("pyproject.toml", "README.md")
SDIST_DIRS = ("_build_backend", "ext", "examples")


def _log(msg):
    print("shardcast build: " + msg, file=sys.stderr, flush=True)


# -- metadata -----------------------------------------------------------------

def _pyproject():
    if tomllib is None:
        raise RuntimeError("reading pyproject.toml needs Python 3.11 (tomllib) or tomli")
    with open(os.path.join(PROJECT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def version():
    """shardcast's version, as shardcast/_version.py computes it (from the
    repository's CMakeLists.txt, or the literal of an sdist)."""
    ns = {"__file__": os.path.join(PROJECT, PACKAGE, "_version.py")}
    with open(ns["__file__"], encoding="utf-8") as f:
        exec(compile(f.read(), ns["__file__"], "exec"), ns)
    v = ns["version"]
    if not re.fullmatch(r"\d+(\.\d+)*", v or ""):
        raise RuntimeError("no version: %r (shardcast/_version.py reads project(VERSION) "
                           "of the repository's CMakeLists.txt)" % (v,))
    return v


def _project():
    proj = dict(_pyproject()["project"])
    unknown = set(proj) - PROJECT_KEYS
    if unknown:
        raise RuntimeError("pyproject.toml [project] keys this backend does not write "
                           "into the metadata: %s" % ", ".join(sorted(unknown)))
    if "version" in proj:
        raise RuntimeError("pyproject.toml: the version is dynamic (CMakeLists.txt's "
                           "project(VERSION)), not [project] version")
    if proj.get("dynamic") != ["version"]:
        raise RuntimeError('pyproject.toml: expected dynamic = ["version"]')
    proj["version"] = version()
    return proj


def dist_name(proj):
    return re.sub(r"[-_.]+", "_", proj["name"]).lower()


def metadata(proj):
    """The METADATA (core metadata 2.1) text."""
    lines = ["Metadata-Version: 2.1", "Name: " + proj["name"], "Version: " + proj["version"]]
    if "description" in proj:
        lines.append("Summary: " + proj["description"])
    if "keywords" in proj:
        lines.append("Keywords: " + ",".join(proj["keywords"]))
    for label, url in proj.get("urls", {}).items():
        lines.append("Project-URL: %s, %s" % (label, url))
    lic = proj.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append("License: " + lic["text"])
    elif lic is not None:
        raise RuntimeError("pyproject.toml: license = {text = ...} only")
    for c in proj.get("classifiers", []):
        lines.append("Classifier: " + c)
    if "requires-python" in proj:
        lines.append("Requires-Python: " + proj["requires-python"])
    for d in proj.get("dependencies", []):
        lines.append("Requires-Dist: " + d)
    for extra, deps in proj.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        for d in deps:
            marker = 'extra == "%s"' % extra
            if ";" in d:
                req, _, m = d.partition(";")
                d = "%s; (%s) and %s" % (req.strip(), m.strip(), marker)
            else:
                d = "%s; %s" % (d, marker)
            lines.append("Requires-Dist: " + d)
    body = ""
    readme = proj.get("readme")
    if readme:
        if not isinstance(readme, str) or not readme.endswith(".md"):
            raise RuntimeError("pyproject.toml: readme must be a .md file name")
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(PROJECT, readme), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


# -- the accelerator ------------------------------------------------------------

def _accel_mode(config_settings):
    mode = (config_settings or {}).get("accel") or os.environ.get("SHARDCAST_ACCEL_BUILD") or "auto"
    if mode not in ACCEL_MODES:
        raise RuntimeError("accel=%r: expected one of %s" % (mode, ", ".join(ACCEL_MODES)))
    return mode


def c_sources():
    """(root, [wire module .c files relative to root], header template):
    from the repository (CMakeLists.txt says which files shardcast_wire is
    made of) or from an sdist's csrc/. None when neither is here."""
    cml = os.path.join(REPO, "CMakeLists.txt")
    in_repo = os.path.realpath(os.path.join(REPO, "clients", "python")) == \
        os.path.realpath(PROJECT)
    if in_repo and os.path.isfile(cml) and os.path.isdir(os.path.join(REPO, "shardio", "wire")):
        with open(cml, encoding="utf-8") as f:
            text = f.read()
        glob_m = re.search(r"file\(GLOB SHARDIO_WIRE_SOURCES\s+CONFIGURE_DEPENDS\s+"
                           r"\$\{PROJECT_SOURCE_DIR\}/(\S+)/\*\.c\)", text)
        extra_m = re.search(r"list\(APPEND SHARDIO_WIRE_SOURCES\s+([^)]*)\)", text)
        if not glob_m or not extra_m:
            raise RuntimeError("CMakeLists.txt: the SHARDIO_WIRE_SOURCES rules (file(GLOB) "
                               "and list(APPEND)) were not found; the accelerator's sources "
                               "are read from them")
        wire_dir = glob_m.group(1)
        files = sorted(wire_dir + "/" + n for n in os.listdir(os.path.join(REPO, wire_dir))
                       if n.endswith(".c"))
        for item in extra_m.group(1).split():
            if not item.startswith("${PROJECT_SOURCE_DIR}/"):
                raise RuntimeError("CMakeLists.txt: unexpected SHARDIO_WIRE_SOURCES item %r"
                                   % item)
            files.append(item[len("${PROJECT_SOURCE_DIR}/"):])
        return REPO, files, os.path.join(REPO, "cmake", "shardcast_version.h.in")
    csrc = os.path.join(PROJECT, "csrc")
    if os.path.isfile(os.path.join(csrc, "wire-sources.txt")):
        with open(os.path.join(csrc, "wire-sources.txt"), encoding="utf-8") as f:
            files = [line.strip() for line in f if line.strip()]
        return csrc, files, os.path.join(csrc, "cmake", "shardcast_version.h.in")
    return None


def _version_header(template, ver, out):
    parts = (ver.split(".") + ["0", "0"])[:3]
    subst = {"PROJECT_VERSION": ver, "PROJECT_VERSION_MAJOR": parts[0],
             "PROJECT_VERSION_MINOR": parts[1], "PROJECT_VERSION_PATCH": parts[2]}
    with open(template, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"@(\w+)@", lambda m: subst[m.group(1)], text)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)


def _pkg_config(args):
    pc = shutil.which(os.environ.get("PKG_CONFIG", "pkg-config"))
    if not pc:
        return None
    r = subprocess.run([pc] + args, capture_output=True, text=True)
    return shlex.split(r.stdout) if r.returncode == 0 else None


class AccelUnavailable(Exception):
    pass


def _first_error(text):
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1].strip() if lines else "(no output)"


def build_accel(tmp, ver):
    """Compile shardcast._frames into tmp; returns (path, note). Raises
    AccelUnavailable with the reason when it cannot be built here."""
    if sys.implementation.name != "cpython":
        raise AccelUnavailable("%s is not CPython (the accelerator uses CPython's C API)"
                               % sys.implementation.name)
    found = c_sources()
    if found is None:
        raise AccelUnavailable("the C sources are not here (neither the shardcast repository "
                               "around clients/python nor an sdist's csrc/)")
    root, wire, template = found
    ext_c = os.path.join(PROJECT, "ext", "frames_ext.c")
    pyinc = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(pyinc, "Python.h")):
        raise AccelUnavailable("Python.h not found in %s (Debian: apt install python3-dev)"
                               % pyinc)
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not shutil.which(cc[0]):
        raise AccelUnavailable("no C compiler (%s; Debian: apt install gcc)" % cc[0])
    gen = os.path.join(tmp, "include")
    os.makedirs(gen)
    _version_header(template, ver, os.path.join(gen, "shardcast_version.h"))
    jansson_cflags = _pkg_config(["--cflags", "jansson"]) or []
    jansson_libs = _pkg_config(["--libs", "jansson"]) or ["-ljansson"]
    cflags = (["-std=c11", "-D_GNU_SOURCE", "-O2", "-fPIC", "-fvisibility=hidden",
               "-fno-common", "-I" + os.path.join(root, "include"), "-I" + gen,
               "-I" + os.path.join(root, "shardio"), "-I" + pyinc] + jansson_cflags
              + shlex.split(os.environ.get("CPPFLAGS", ""))
              + shlex.split(os.environ.get("CFLAGS", "")))
    srcs = [ext_c] + [os.path.join(root, f) for f in wire]
    for s in srcs:
        if not os.path.isfile(s):
            raise RuntimeError("accelerator source missing: %s" % s)
    objdir = os.path.join(tmp, "obj")
    os.makedirs(objdir)

    def compile_one(i_src):
        i, src = i_src
        obj = os.path.join(objdir, "%02d_%s.o" % (i, os.path.basename(src)[:-2]))
        r = subprocess.run(cc + cflags + ["-c", src, "-o", obj], capture_output=True, text=True)
        return src, obj, r

    t0 = time.monotonic()
    _log("compiling the accelerator shardcast._frames (%s, %d files)" % (cc[0], len(srcs)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as ex:
        results = list(ex.map(compile_one, enumerate(srcs)))
    for src, obj, r in results:
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            err = _first_error(r.stderr)
            hint = ""
            if "jansson.h" in err:
                hint = " (Debian: apt install libjansson-dev)"
            raise AccelUnavailable("compiling %s failed: %s%s"
                                   % (os.path.relpath(src, root), err, hint))
    out = os.path.join(tmp, "_frames" + sysconfig.get_config_var("EXT_SUFFIX"))
    link = (cc + ["-shared", "-o", out] + [obj for _, obj, _ in results] + jansson_libs
            + shlex.split(os.environ.get("LDFLAGS", "")))
    r = subprocess.run(link, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        err = _first_error(r.stderr)
        hint = " (Debian: apt install libjansson-dev)" if "jansson" in err else ""
        raise AccelUnavailable("linking the accelerator failed: %s%s" % (err, hint))
    _log("accelerator built in %.1f s" % (time.monotonic() - t0))
    return out, "built by %s with %s" % (os.path.basename(__file__), " ".join(cc))


def _wheel_tag(with_ext):
    if not with_ext:
        return "py3-none-any"
    v = "%d%d" % sys.version_info[:2]
    abi = "cp" + v + ("d" if hasattr(sys, "gettotalrefcount") else "")
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "cp%s-%s-%s" % (v, abi, plat)


# -- archives -------------------------------------------------------------------

def _package_files():
    """Files of the package (relative to PROJECT): its .py files (and
    py.typed), never a __pycache__ or a compiled module of the source tree."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(PROJECT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for n in sorted(filenames):
            if n.endswith(".py") or n == "py.typed":
                out.append(os.path.relpath(os.path.join(dirpath, n), PROJECT))
    return out


def _version_py(ver, accel_note):
    return ('"""The version of shardcast: project(VERSION) of the repository\'s\n'
            'CMakeLists.txt, written here by the build (clients/python/_build_backend)."""\n\n'
            "version = %r\n\n"
            "# How the build of this copy went with the C accelerator\n"
            "# shardcast._frames (None: not built by the package build).\n"
            "accel_build = %r\n" % (ver, accel_note))


class _Wheel:
    def __init__(self, path):
        self.zf = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, arcname, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode("utf-8")
        zi = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
        zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(zi, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        self.records.append((arcname, "sha256=" + digest.decode(), str(len(data))))

    def close(self, record_name):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for r in self.records:
            w.writerow(r)
        w.writerow((record_name, "", ""))
        zi = zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0))
        zi.external_attr = (0o100000 | 0o644) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(zi, buf.getvalue())
        self.zf.close()


def _dist_info(proj, tag):
    name = "%s-%s.dist-info" % (dist_name(proj), proj["version"])
    wheel = ("Wheel-Version: 1.0\nGenerator: shardcast_backend\nRoot-Is-Purelib: %s\n"
             "Tag: %s\n" % ("true" if tag == "py3-none-any" else "false", tag))
    return name, {"METADATA": metadata(proj), "WHEEL": wheel,
                  "top_level.txt": PACKAGE + "\n"}


def _write_wheel(wheel_directory, proj, tag, files):
    """files: [(arcname, bytes or str, mode)]. Returns the wheel's name."""
    info, meta = _dist_info(proj, tag)
    name = "%s-%s-%s.whl" % (dist_name(proj), proj["version"], tag)
    w = _Wheel(os.path.join(wheel_directory, name))
    for arc, data, mode in files:
        w.add(arc, data, mode)
    for n, text in meta.items():
        w.add(info + "/" + n, text)
    w.close(info + "/RECORD")
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# -- PEP 517 / PEP 660 hooks ----------------------------------------------------

def _requires():
    return [] if tomllib is not None else ["tomli>=1.1"]


def get_requires_for_build_wheel(config_settings=None):
    return _requires()


def get_requires_for_build_sdist(config_settings=None):
    return _requires()


def get_requires_for_build_editable(config_settings=None):
    return _requires()


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    proj = _project()
    info, meta = _dist_info(proj, "py3-none-any")
    d = os.path.join(metadata_directory, info)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(meta["METADATA"])
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    proj = _project()
    mode = _accel_mode(config_settings)
    with tempfile.TemporaryDirectory(prefix="shardcast-build-") as tmp:
        ext, note = None, "not built (accel=off)"
        if mode != "off":
            try:
                ext, note = build_accel(tmp, proj["version"])
            except AccelUnavailable as e:
                if mode == "require":
                    raise RuntimeError("the accelerator cannot be built (accel=require): %s"
                                       % e) from None
                note = "not built: %s" % e
                _log("accelerator %s; the wheel has the pure-Python reader only" % note)
        files = []
        for rel in _package_files():
            if rel == os.path.join(PACKAGE, "_version.py"):
                continue
            files.append((rel.replace(os.sep, "/"), _read(os.path.join(PROJECT, rel)), 0o644))
        files.append((PACKAGE + "/_version.py", _version_py(proj["version"], note), 0o644))
        if ext:
            files.append((PACKAGE + "/" + os.path.basename(ext), _read(ext), 0o755))
        return _write_wheel(wheel_directory, proj, _wheel_tag(ext is not None), files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    proj = _project()
    pth = "%s.pth" % dist_name(proj)
    return _write_wheel(wheel_directory, proj, "py3-none-any",
                        [(pth, PROJECT + "\n", 0o644)])


def build_sdist(sdist_directory, config_settings=None):
    proj = _project()
    base = "%s-%s" % (dist_name(proj), proj["version"])
    found = c_sources()
    if found is None:
        raise RuntimeError("an sdist is made from the repository (its C sources)")
    root, wire, template = found
    members = []   # (arcname relative to base, bytes)
    for rel in SDIST_FILES:
        members.append((rel, _read(os.path.join(PROJECT, rel))))
    for d in SDIST_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(PROJECT, d)):
            dirnames[:] = sorted(x for x in dirnames if x != "__pycache__")
            for n in sorted(filenames):
                if n.endswith((".pyc", ".so", ".o")):
                    continue
                p = os.path.join(dirpath, n)
                members.append((os.path.relpath(p, PROJECT), _read(p)))
    for rel in _package_files():
        data = _read(os.path.join(PROJECT, rel))
        if rel == os.path.join(PACKAGE, "_version.py"):
            data = _version_py(proj["version"], None).encode()
        members.append((rel, data))
    # csrc/: the wire module's sources, every header of include/ and
    # shardio/, the version header's template and the list of sources.
    for rel in wire:
        members.append(("csrc/" + rel, _read(os.path.join(root, rel))))
    for sub in ("include", "shardio"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, sub)):
            dirnames.sort()
            for n in sorted(filenames):
                if n.endswith(".h"):
                    p = os.path.join(dirpath, n)
                    members.append(("csrc/" + os.path.relpath(p, root), _read(p)))
    members.append(("csrc/cmake/shardcast_version.h.in", _read(template)))
    members.append(("csrc/wire-sources.txt", "".join(f + "\n" for f in wire).encode()))
    members.append(("PKG-INFO", metadata(proj).encode()))
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz",
                      format=tarfile.PAX_FORMAT) as tf:
        for rel, data in members:
            ti = tarfile.TarInfo(base + "/" + rel.replace(os.sep, "/"))
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = 0
            tf.addfile(ti, io.BytesIO(data))
    return name
