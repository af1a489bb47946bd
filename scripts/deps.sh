#!/usr/bin/env bash
# deps.sh: installs the Debian packages the build and the tests need, when they are missing.
# Called by every Makefile target, so a fresh Debian 12 machine needs nothing installed by hand.
set -euo pipefail
need=(cmake ninja-build gcc clang libclang-rt-14-dev llvm pkg-config clang-format librsvg2-bin netpbm
      libzydis-dev python3-onnx)
# python3-onnx (with python3-numpy): the trace tests write their ONNX model with it
# (tests/trace/onnx_model.py, run by Debian's /usr/bin/python3).
# `deps.sh python`: also what the Python package needs (python/; make python, make test-python):
# Python's headers, pip and venv to build and install it (its build backend is its own:
# python/pyproject.toml; no setuptools), NumPy, PyTorch (CPU) and pytest for its tests, and
# DLPack's header.
if [ "${1:-}" = python ]; then
  need+=(python3-dev python3-pip python3-venv python3-numpy python3-torch python3-pytest
         libdlpack-dev)
fi
# `deps.sh arm64`: the AArch64 cross build and its tests (make arm64, make test-arm64): Debian's
# cross compiler, qemu-user, and libc6:arm64, the loader and C library qemu runs the tests with. Multiarch needs the arm64
# architecture added to dpkg once, and the package lists fetched again after that.
if [ "${1:-}" = arm64 ]; then
  need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libc6:arm64)
fi
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "deps: missing packages (${missing[*]}) and not root: install them with apt-get" >&2; exit 1; fi
else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
if [ "${1:-}" = arm64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
