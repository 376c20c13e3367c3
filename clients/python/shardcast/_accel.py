"""Finding the optional C accelerator of the frames reader (shardcast._frames,
compiled from clients/python/ext/frames_ext.c over the frames decoder of the
wire module, shardcast_wire: by `pip install clients/python` into the
installed package, or by CMake into <build>/python/).

Looked for, in order: an installed shardcast/_frames*.so next to this file
(what pip installs), then <SHARDCAST_BUILD>/python/ and <repo>/build/python/
(a source tree).
Only a file whose name ends in one of this interpreter's extension suffixes
is loaded, so a module built for another Python is never tried.
SHARDCAST_ACCEL=0 turns the accelerator off (the pure-Python reader is then
used); load() returns None when it is off or not found. describe() says in
words which reader is used and why.
"""

import importlib.machinery
import importlib.util
import os
import sys

_NAME = "shardcast._frames"
_cache = []


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    build = os.environ.get("SHARDCAST_BUILD")
    if build:
        dirs.append(os.path.join(build, "python"))
    dirs.append(os.path.join(here, "..", "..", "..", "build", "python"))
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if suffix == ".so":   # untagged: could be for any Python
                continue
            path = os.path.join(d, "_frames" + suffix)
            if os.path.isfile(path):
                yield path


def load():
    """The shardcast._frames module, or None."""
    if os.environ.get("SHARDCAST_ACCEL", "") == "0":
        return None
    if _cache:
        return _cache[0]
    mod = sys.modules.get(_NAME)
    if mod is None:
        for path in _candidates():
            try:
                spec = importlib.util.spec_from_file_location(_NAME, path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
            except ImportError:
                mod = None
                continue
            sys.modules[_NAME] = mod
            break
    _cache.append(mod)
    return mod


def describe():
    """One line: the frames decoder in use (the C accelerator and its file,
    or the pure-Python reader and why)."""
    if os.environ.get("SHARDCAST_ACCEL", "") == "0":
        return "python (SHARDCAST_ACCEL=0)"
    mod = load()
    if mod is not None:
        return "c (%s)" % os.path.normpath(getattr(mod, "__file__", _NAME))
    from . import _version
    note = _version.accel_build
    if note and note.startswith("not built"):
        return "python (accelerator %s)" % note   # what the package build said
    return "python (no shardcast._frames for this Python next to the package, in " \
           "$SHARDCAST_BUILD/python or the repository's build/python)"
