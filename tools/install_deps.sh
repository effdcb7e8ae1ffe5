#!/usr/bin/env bash
# Installs the Debian 12 packages ps needs, only those that are missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java gcc-12 g++-12 clang-14 llvm-14 libclang-rt-14-dev
  googletest protobuf-compiler nanopb libnanopb-dev
  # transports
  libibverbs-dev librdmacm-dev libfabric-dev libucx-dev libsodium-dev
  # tools the benchmarks and tests use as references and helpers
  libfabric-bin ucx-utils ibverbs-utils iperf3 gnuplot-nox iproute2 nftables python3 valgrind
  # the ibverbs van's hardware tests in a soft-RoCE VM (tools/softroce)
  qemu-system-x86 linux-image-amd64 busybox-static
  # the Python package (ps/python) and its tests
  python3-dev python3-numpy python3-torch python3-pytest
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "ps: installing missing packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "ps: packages installed" >&2
