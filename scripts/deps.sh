#!/usr/bin/env bash
# deps.sh — install what building and testing shardcast needs on Debian 12.
# Idempotent and non-interactive: packages already present are not touched.
# Run as root (or with sudo available). Set SHARDCAST_DEPS_SKIP=1 to skip.
set -euo pipefail

[ "${SHARDCAST_DEPS_SKIP:-0}" = 1 ] && exit 0

PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libarchive-dev
  libjansson-dev libxml2-dev libzstd-dev zstd curl
  python3-dev python3-torch python3-pytest python3-pytest-xdist python3-numpy
  python3-setuptools
  python3-pip python3-venv python3-boto3 python3-botocore python3-pil
  nginx-light nodejs
  yamllint iproute2
  prometheus
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

# Debian's nodejs comes without npm (other node builds bundle it).
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
