#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install the dependencies, build,
# and generate King James-like text with the shipped default model.
# Extra arguments go to transformer-generate, e.g. --prompt "And God said".
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
if [ $# -eq 0 ]; then
  set -- --prompt "In the beginning" --max-tokens 300 --temperature 0.7 --top-p 0.9 --seed 1
fi
exec "${BUILD_DIR:-build}/tools/transformer-generate" "$@"
