#!/bin/sh
# install.sh — install the pinned npm tooling of tests/k8s (kubernetes-models
# schemas, the prometheus-operator models, TypeScript) into
# tests/k8s/node_modules (git-ignored), exactly as package-lock.json pins it.
#
# Idempotent: when node_modules already matches the lock file (a SHA-256 of
# package-lock.json is kept in node_modules/.shardcast-lock.sha256), nothing
# is downloaded. Needs node and npm (scripts/deps.sh installs nodejs; npm
# comes with it, or apt-get install npm). Called by scripts/test.sh.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
stamp=$here/node_modules/.shardcast-lock.sha256

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "tests/k8s/install.sh: node and npm are required (apt-get install nodejs npm)" >&2
    exit 1
fi

want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

# npm ci: exactly the lock file's versions, node_modules recreated.
(cd "$here" && npm ci --no-audit --no-fund --no-update-notifier --loglevel=error) 1>&2
echo "$want" > "$stamp"
