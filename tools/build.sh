#!/usr/bin/env bash
# Configures and builds libtransformer into build/ (or $BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DTRANSFORMER_PYTHON=/usr/bin/python3 >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
