#!/usr/bin/env bash
# Fetches llama.cpp's sources into DIR (default build/llama.cpp) from the
# npm package node-llama-cpp (NODE_LLAMA_CPP_VERSION, default 3.22.1),
# which ships them as the git bundle llama/gitRelease.bundle.  Used by
# bench/build_ggml.sh (ggml, the benchmark's rival) and by the test
# quant_gguf_reference (gguf-py's numpy quantisers, DIR/gguf-py).
#
#   bash tools/fetch-llama-cpp.sh [DIR]
#
# Idempotent: a DIR that already holds a llama.cpp tree (ggml/include/
# ggml.h) is left as it is.  `npm pack` downloads the tarball (or takes it
# from npm's cache); nothing is installed and nothing is committed.
set -euo pipefail
dir="${1:-build/llama.cpp}"
version="${NODE_LLAMA_CPP_VERSION:-3.22.1}"
if [ -f "$dir/ggml/include/ggml.h" ]; then
  exit 0
fi
mkdir -p "$(dirname "$dir")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null &&
 tar xzf "node-llama-cpp-$version.tgz" package/llama/gitRelease.bundle)
rm -rf "$dir.tmp"
git clone --quiet "$tmp/package/llama/gitRelease.bundle" "$dir.tmp"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
