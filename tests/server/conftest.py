"""The server suite's fixtures: server_fixtures.py.

Run: /usr/bin/python3 -m pytest tests/server
"""

from server_fixtures import *  # noqa: F401,F403
