"""Fixtures of the object-store suite live in objstore_support.py (a module
with a unique name, so that test modules can import its helpers without
colliding with other suites' conftest modules)."""
from objstore_support import dataset, dump, dump_bin, nginx, s3  # noqa: F401
