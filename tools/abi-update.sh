#!/usr/bin/env bash
# Rewrites the ABI baseline tests/abi/libtransformer.so.<major>.abi from a
# fresh build of the library, on purpose (docs/ABI.md, "Updating the
# baseline"): after reviewing what `ctest -R abi_check -V` reports as
# compatible additions, or after a deliberate major version bump.  Commit
# the new baseline together with the change that made it necessary.
#
#   bash tools/abi-update.sh          (builds into build/, or $BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
major=$(sed -n 's/^#define TFM_VERSION_MAJOR \([0-9][0-9]*\).*/\1/p' include/transformer/version.h)
baseline="tests/abi/libtransformer.so.${major}.abi"

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DTRANSFORMER_PYTHON=/usr/bin/python3 >/dev/null
cmake --build "$BUILD_DIR" --target transformer -j"$(nproc)"

if [ -f "$baseline" ]; then
  echo "== changes against the old baseline"
  bash tests/abi/abi-check.sh "$BUILD_DIR/src/libtransformer.so.${major}" \
    include/transformer "$baseline" tests/abi/suppressions.abignore \
    "$BUILD_DIR/tests/abi" || true
  echo "=="
fi
bash tests/abi/abi-check.sh --update "$BUILD_DIR/src/libtransformer.so.${major}" \
  include/transformer "$baseline" tests/abi/suppressions.abignore \
  "$BUILD_DIR/tests/abi"
git --no-pager diff --stat -- "$baseline" 2>/dev/null || true
