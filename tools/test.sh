#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: install the dependencies, build,
# and run the C, Python and Lua suites through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)"
