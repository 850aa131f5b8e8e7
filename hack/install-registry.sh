#!/usr/bin/env bash
# Installs the CNCF Distribution registry (Debian package docker-registry, binary
# /usr/bin/docker-registry): the OCI registry the tests push Fleet-shaped charts to and install
# from (tests/oci_registry.rs). Idempotent and quiet: nothing happens when the binary is there.
# Installing needs root (CI runs as root); elsewhere, install the package yourself or set
# REGISTRY_BIN to a registry binary.
set -euo pipefail

binary="${REGISTRY_BIN:-/usr/bin/docker-registry}"
if [[ -x "$binary" ]]; then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "docker-registry is missing at $binary: run 'apt-get install -y docker-registry' as root, or set REGISTRY_BIN" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends docker-registry >/dev/null 2>&1; then
  # A fresh machine may have no package lists yet.
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
fi
# The package starts a registry service on :5000 where an init system runs; the tests start
# their own, so stop it when it is there (and never fail on a machine without services).
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
  systemctl stop docker-registry >/dev/null 2>&1 || true
  systemctl disable docker-registry >/dev/null 2>&1 || true
fi
echo "docker-registry installed: $("$binary" --version 2>/dev/null || echo "$binary")"
