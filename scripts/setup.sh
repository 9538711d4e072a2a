#!/usr/bin/env bash
# Installs the Debian packages AsymNVM needs, only those that are missing.
# Idempotent and non-interactive; a no-op (well under a second) when everything is present.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libibverbs-dev ibverbs-providers librdmacm-dev
      libpmem-dev libpmemobj-dev libpmempool-dev pmdk-tools
      libzookeeper-mt-dev zookeeper default-jre-headless libtbb-dev redis-tools redis-server
      libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev libxxhash-dev libisal-dev libssl-dev openssl
      prometheus-cpp-dev prometheus libsystemd-dev
      clang libclang-rt-14-dev clang-format gnuplot-nox python3 ccache tcl iproute2)
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
