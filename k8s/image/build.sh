#!/bin/sh
# build.sh — build the shardcastd image with podman (or buildah).
#
# Usage: k8s/image/build.sh [TAG]            (default tag shardcast:dev)
# Environment:
#   BASE_IMAGE   a Debian 12 image (default docker.io/library/debian:12-slim)
#   BUILD_NET    network of the RUN steps (default: host, so apt reaches
#                the Debian mirror without a container network)
#   BUILD_ISOLATION  oci (default) or chroot: RUN steps in a plain chroot,
#                for hosts where the OCI runtime cannot create containers
#                (e.g. crun refusing a hybrid cgroup v1/v2 hierarchy)
# With no registry reachable, make a base image from a local debootstrap:
#   debootstrap --variant=minbase bookworm /tmp/rootfs http://deb.debian.org/debian
#   tar -C /tmp/rootfs -c . | podman import - localhost/debian:12-debootstrap
#   BASE_IMAGE=localhost/debian:12-debootstrap k8s/image/build.sh
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
tag=${1:-shardcast:dev}
base=${BASE_IMAGE:-docker.io/library/debian:12-slim}
net=${BUILD_NET:-host}
isolation=${BUILD_ISOLATION:-oci}

if command -v podman >/dev/null 2>&1; then
    tool=podman
elif command -v buildah >/dev/null 2>&1; then
    tool="buildah bud"
else
    echo "build.sh: neither podman nor buildah is installed" >&2
    exit 1
fi

cd "$root"
# shellcheck disable=SC2086  # $tool is "podman" or "buildah bud"
exec $tool build --isolation "$isolation" --network "$net" --build-arg "BASE_IMAGE=$base" \
    -f k8s/image/Containerfile --ignorefile k8s/image/containerignore \
    -t "$tag" .
