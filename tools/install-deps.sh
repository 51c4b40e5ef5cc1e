#!/usr/bin/env bash
# Installs the Debian 12 packages libtransformer needs to build, test and run.
# Runs apt-get as root (directly when root, otherwise through sudo).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libopenblas-dev libcjson-dev libcmocka-dev
  python3 python3-numpy python3-torch python3-pytest
  swig liblua5.4-dev lua5.4
  python3-dev abigail-tools
  python3-nbclient python3-nbformat python3-ipykernel python3-matplotlib
  jupyter-notebook jupyter-nbconvert python3-nbconvert
  debhelper dh-python dpkg-dev lintian
  clang libclang-rt-14-dev valgrind
  libpcre2-dev libutf8proc-dev bible-kjv
  sentencepiece python3-sentencepiece python3-protobuf
  openmpi-bin python3-mpi4py python3-distributed
  libpng-dev libjpeg62-turbo-dev libexif-dev python3-pil
)
# node and npm fetch and run the tokenizers' reference implementations at
# test time (tools/fetch-tokenizer-refs.sh); Debian's own unless some other
# node (NodeSource's, which carries npm) is already there.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

# Skip apt entirely when everything is already installed.
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
