#!/usr/bin/env bash
# bench/deps.sh — Debian packages that only the benchmark needs, on top of
# scripts/deps.sh (which the test suite runs): matplotlib for the plot,
# linux-perf for the server profiles (bench/profile.py).
# Idempotent and non-interactive; run as root (or with sudo available).
# Set SHARDCAST_DEPS_SKIP=1 to skip.
set -euo pipefail

[ "${SHARDCAST_DEPS_SKIP:-0}" = 1 ] && exit 0

PKGS=(python3-matplotlib linux-perf)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "bench deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
