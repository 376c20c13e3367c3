#!/bin/sh
# s3rver-install.sh — install the S3-compatible test server s3rver (npm
# package, pinned version) into a project-local prefix and print the path of
# its executable on stdout (npm's own output goes to stderr).
#
# Usage: scripts/s3rver-install.sh [PREFIX]
#   PREFIX defaults to $S3RVER_PREFIX, else <repo>/build/node.
# Idempotent and non-interactive: when the pinned version is already there,
# nothing is downloaded. Used by CI and by tests/support/s3rver.py.
set -eu

VERSION=3.7.1
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-${S3RVER_PREFIX:-$repo/build/node}}
bin=$prefix/bin/s3rver
pkg=$prefix/lib/node_modules/s3rver/package.json

installed_version() {
    [ -f "$pkg" ] || return 1
    node -e 'process.stdout.write(require(process.argv[1]).version)' "$pkg"
}

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "s3rver-install: node and npm are required (apt-get install nodejs npm)" >&2
    exit 1
fi

if [ -x "$bin" ] && [ "$(installed_version 2>/dev/null || true)" = "$VERSION" ]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$prefix"
# --global with --prefix: the package lands in $prefix/lib/node_modules and
# its executable in $prefix/bin, outside any source directory.
npm install --global --prefix "$prefix" --no-audit --no-fund \
    --no-update-notifier --loglevel=error "s3rver@$VERSION" 1>&2

if [ ! -x "$bin" ] || [ "$(installed_version)" != "$VERSION" ]; then
    echo "s3rver-install: installation into $prefix failed" >&2
    exit 1
fi
echo "$bin"
