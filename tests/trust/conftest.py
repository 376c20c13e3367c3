"""The suite of what shardcast does not trust: its own state on disk (the
shard cache, index sidecars and files) and job specs (SECURITY.md). It
runs with the server suite's fixtures (tests/server/server_fixtures.py).

Run: /usr/bin/python3 -m pytest tests/trust
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))

from server_fixtures import *  # noqa: F401,F403,E402
