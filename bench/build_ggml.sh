#!/bin/sh
# Builds ggml's flash attention harness (bench/ggml_attention.c), the
# opt-in rival of bench/run.py's attention-core rows (issue 20):
#
#   bash bench/build_ggml.sh [OUT_DIR]          # default build/ggml-rival
#   /usr/bin/python3 bench/run.py --ggml OUT_DIR/ggml-attention
#
# GGML_SRC: a llama.cpp source tree (ggml under ggml/) or a ggml one.
# Without it, the script takes llama.cpp's sources from the npm package
# node-llama-cpp (NODE_LLAMA_CPP_VERSION, default 3.22.1), which ships them
# as the git bundle llama/gitRelease.bundle, and clones that under OUT_DIR
# (tools/fetch-llama-cpp.sh).
# ggml is built for this machine (GGML_NATIVE, its CPU backend only, no
# BLAS), as llama.cpp builds it by default; the harness links it
# statically.  Nothing here is a build dependency of libtransformer.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/ggml-rival}
mkdir -p "$out"
out=$(cd "$out" && pwd)

origin=GGML_SRC
if [ -z "${GGML_SRC:-}" ]; then
    version=${NODE_LLAMA_CPP_VERSION:-3.22.1}
    GGML_SRC=$out/llama.cpp-$version
    origin="npm node-llama-cpp@$version"
    NODE_LLAMA_CPP_VERSION=$version bash "$here/../tools/fetch-llama-cpp.sh" \
        "$GGML_SRC"
fi

if [ -f "$GGML_SRC/ggml/include/ggml.h" ]; then
    # llama.cpp: configure the whole tree with its programs off, build the
    # two ggml libraries the harness needs.
    cmake -S "$GGML_SRC" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF >"$out/cmake.log"
    inc=$GGML_SRC/ggml/include
    libs=$out/build/ggml/src
elif [ -f "$GGML_SRC/include/ggml.h" ]; then
    cmake -S "$GGML_SRC" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
        -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >"$out/cmake.log"
    inc=$GGML_SRC/include
    libs=$out/build/src
else
    echo "build_ggml.sh: no ggml.h under $GGML_SRC (a llama.cpp or ggml" \
         "source tree)" >&2
    exit 1
fi
cmake --build "$out/build" -j "$(nproc)" --target ggml-cpu ggml-base \
    >"$out/build.log"

# OpenMP: ggml's CPU backend runs its threads on it when found (the default).
cc -O2 -o "$out/ggml-attention" "$here/ggml_attention.c" -I"$inc" \
    "$libs/libggml-cpu.a" "$libs/libggml-base.a" -lstdc++ -fopenmp -lm \
    -lpthread
commit=$(git -C "$GGML_SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "ggml of llama.cpp $commit ($origin), GGML_NATIVE, CPU backend, OpenMP" \
    >"$out/ggml-attention.source"
echo "$out/ggml-attention"
