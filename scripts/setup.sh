#!/usr/bin/env bash
# Set up behavioral_pq on a fresh Debian/Ubuntu machine (as root, or with sudo): LLVM 19, clang 19, csmith,
# a virtual environment in .venv with torch 2.13.0 (CPU) installed before the package, then the package with
# what its tests and its documentation site need.
# Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

packages="llvm-19-dev clang-19 llvm-19 csmith libcsmith-dev bubblewrap cmake ninja-build g++ make python3-dev python3-venv zlib1g-dev"
missing=""
for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "== apt-get install$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first, pinned: an unpinned torch would pull several GB of CUDA packages.
"$VENV/bin/python" -c "import torch" 2>/dev/null || "$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q -e ".[test,docs]"
# inst2vec's vocabulary and embeddings, from CompilerGym 0.2.5's wheel on PyPI (checked, converted to JSON and .npy)
"$VENV/bin/python" scripts/inst2vec_data.py
echo "== behavioral_pq installed in $VENV ($("$VENV/bin/python" -c 'import behavioral_pq.core._native as n; print("LLVM", n.LLVM_VERSION)'))"
