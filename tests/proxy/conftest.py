"""pytest set-up for the fault proxy's self-tests: make ``tests.support``
importable (the repository root on sys.path) and share the upstreams."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
