#!/bin/sh
# Builds llama.cpp's llama-bench and bench/llama_logits.cpp (a tiny
# libllama program: greedy tokens and logits of a prompt given as token
# ids), the rival of bench/llama_compare.py (issue 45):
#
#   bash bench/build_llama_cpp.sh [OUT_DIR]     # default build/llama-rival
#   /usr/bin/python3 bench/llama_compare.py --llama OUT_DIR
#
# LLAMA_SRC: a llama.cpp git repository (or bundle) to clone from, e.g. a
# local checkout (saves the download).  Without it, the sources come from
# the npm package node-llama-cpp (NODE_LLAMA_CPP_VERSION, default 3.22.1),
# which ships them as the git bundle llama/gitRelease.bundle.  llama.cpp is
# built as llama.cpp builds it by default on a CPU: Release, GGML_NATIVE,
# its CPU backend only, no BLAS, OpenMP threads.  JOBS: make's parallelism
# (default 2).  Nothing here is a build dependency of libtransformer.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/llama-rival}
mkdir -p "$out"
out=$(cd "$out" && pwd)
src=$out/src
jobs=${JOBS:-2}

if [ ! -d "$src" ]; then
    if [ -n "${LLAMA_SRC:-}" ]; then
        origin="git clone of $LLAMA_SRC"
        git clone --quiet "$LLAMA_SRC" "$src"
    else
        version=${NODE_LLAMA_CPP_VERSION:-3.22.1}
        origin="npm node-llama-cpp@$version"
        tmp=$(mktemp -d)
        (cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null &&
         tar xzf "node-llama-cpp-$version.tgz" package/llama/gitRelease.bundle)
        git clone --quiet "$tmp/package/llama/gitRelease.bundle" "$src"
        rm -rf "$tmp"
    fi
    echo "$origin" >"$out/origin"
fi

cmake -S "$src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >"$out/cmake.log"
cmake --build "$out/build" -j "$jobs" --target llama-bench llama \
    >"$out/build.log"

# The logits program links the static libraries llama-bench was built from.
b=$out/build
c++ -O2 -std=c++17 -o "$out/llama-logits" "$here/llama_logits.cpp" \
    -I"$src/include" -I"$src/ggml/include" "$b/src/libllama.a" \
    "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" \
    "$b/ggml/src/libggml-base.a" -fopenmp -lpthread -lm -ldl
cp "$b/bin/llama-bench" "$out/llama-bench"
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "llama.cpp $commit ($(cat "$out/origin" 2>/dev/null || echo unknown))," \
     "Release, GGML_NATIVE, CPU backend, no BLAS, OpenMP" >"$out/llama.source"
echo "$out"
