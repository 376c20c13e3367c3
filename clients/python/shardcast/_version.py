"""The version of shardcast in a source tree: project(VERSION ...) of the
repository's CMakeLists.txt, the one place it is set (the server, the C
command and the pkg-config files get it from there too). A built wheel or
sdist replaces this file with the literal value (clients/python/_build_backend).
"""

import os
import re


def _from_cmake():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    try:
        with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
            m = re.search(r"^project\(\s*shardcast\s+VERSION\s+([0-9][0-9.]*)", f.read(), re.M)
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


version = _from_cmake()

# How the package build went with the C accelerator shardcast._frames; None
# here: in a source tree CMake builds it (into <build>/python/).
accel_build = None
