#!/usr/bin/env python3
"""The GGUF reader (src/formats/gguf.h) against gguf-py, llama.cpp's own
Python package: files written by its GGUFWriter (every metadata value
type, arrays of strings and numbers, F32/F16/BF16/Q8_0/Q4_0 tensors of
rank 1 to 4, alignments 32, 64 and 1024) and llama.cpp's own vocabulary
files (models/ggml-vocab-*.gguf) are read by tests/gguf_dump.c
and by gguf-py's GGUFReader, and every key, type, value, tensor name,
shape, type, file offset, size and byte checksum must agree.

Usage: gguf_reference.py --llama-cpp DIR --dump GGUF_DUMP --out DIR
($TFM_LLAMA_CPP, when set, replaces DIR.)  Exits 77 (ctest: skipped) with a message when DIR/gguf-py is absent.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

SKIP = 77
TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
              "string", "array", "u64", "i64", "f64"]
FLOATS = {"f32", "f64"}


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def write_files(gguf, out):
    """Writes the test files with GGUFWriter; returns their paths."""
    from gguf import GGUFWriter, GGUFValueType as V, GGMLQuantizationType as Q
    from gguf.quants import quantize

    rng = np.random.default_rng(45)
    paths = []
    for name, alignment in (("align32", None), ("align64", 64),
                            ("align1024", 1024)):
        path = os.path.join(out, name + ".gguf")
        w = GGUFWriter(path, "llama")
        if alignment:
            w.add_custom_alignment(alignment)
        w.add_uint8("t.u8", 255)
        w.add_int8("t.i8", -128)
        w.add_uint16("t.u16", 65535)
        w.add_int16("t.i16", -32768)
        w.add_uint32("t.u32", 4294967295)
        w.add_int32("t.i32", -2147483648)
        w.add_float32("t.f32", 0.1)
        w.add_uint64("t.u64", 18446744073709551615)
        w.add_int64("t.i64", -9223372036854775808)
        w.add_float64("t.f64", -1e300)
        w.add_bool("t.true", True)
        w.add_bool("t.false", False)
        w.add_string("t.str", "Grüße, 世界 🙂")
        w.add_array("tokenizer.ggml.tokens",
                    ["<s>", "</s>", "▁the", "é", "<0xFF>", "🙂"])
        w.add_key_value("t.bytes_tokens", [b"\xff\xfe", b"ok", b""],
                        V.ARRAY, sub_type=V.STRING)
        w.add_array("tokenizer.ggml.scores", [0.0, -1.5, 3.25, -1e30])
        w.add_array("tokenizer.ggml.token_type", [1, 3, 6, -1])
        w.add_key_value("t.u8s", [0, 7, 255], V.ARRAY, sub_type=V.UINT8)
        w.add_key_value("t.i64s", [-(2 ** 52), 2 ** 52], V.ARRAY,
                        sub_type=V.INT64)
        w.add_key_value("t.f64s", [0.1, -2.5e-300], V.ARRAY,
                        sub_type=V.FLOAT64)
        w.add_key_value("t.bools", [True, False, True], V.ARRAY,
                        sub_type=V.BOOL)
        w.add_key_value("t.u16s", [1, 65535], V.ARRAY, sub_type=V.UINT16)

        def f32(*shape):
            return rng.standard_normal(shape).astype(np.float32)

        w.add_tensor("token_embd.weight", f32(7, 64))
        w.add_tensor("blk.0.attn_norm.weight", f32(64))
        w.add_tensor("blk.0.attn_q.weight", f32(64, 64).astype(np.float16))
        bf = quantize(f32(3, 96), Q.BF16)
        w.add_tensor("blk.0.attn_k.weight", bf, raw_shape=bf.shape,
                     raw_dtype=Q.BF16)
        q8 = quantize(f32(5, 64), Q.Q8_0)
        w.add_tensor("blk.0.ffn_up.weight", q8, raw_shape=q8.shape,
                     raw_dtype=Q.Q8_0)
        q4 = quantize(f32(2, 3, 128), Q.Q4_0)
        w.add_tensor("blk.0.ffn_down.weight", q4, raw_shape=q4.shape,
                     raw_dtype=Q.Q4_0)
        w.add_tensor("t.rank4", f32(2, 1, 3, 4).astype(np.float16))
        w.add_tensor("t.one", f32(1))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(path)
    return paths


def scalar_text(t, v):
    if t in FLOATS:
        return float(v)
    if t == "bool":
        return str(int(bool(v)))
    return str(int(v))


def expected(gguf, path):
    """GGUFReader's view, in gguf_dump's form (floats as floats)."""
    from gguf import GGUFReader, GGUFValueType as V
    r = GGUFReader(path)
    items = []
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue  # the header's counts, not key-value pairs
        t = TYPE_NAMES[field.types[0]]
        if field.types[0] == V.STRING:
            items.append(("kv", field.name, t,
                          bytes(field.parts[field.data[0]]).hex() or "-"))
        elif field.types[0] == V.ARRAY:
            et = TYPE_NAMES[field.types[1]]
            elems = []
            for idx in field.data:
                part = field.parts[idx]
                if field.types[1] == V.STRING:
                    elems.append(bytes(part).hex() or "-")
                else:
                    elems.append(scalar_text(et, part[0]))
            items.append(("kv", field.name, "array", et, len(field.data),
                          elems))
        else:
            items.append(("kv", field.name, t,
                          scalar_text(t, field.parts[field.data[0]][0])))
    for ten in r.tensors:
        items.append(("tensor", ten.name, int(ten.tensor_type),
                      ",".join(str(int(d)) for d in ten.shape),
                      int(ten.data_offset), int(ten.n_bytes),
                      fnv1a64(ten.data.tobytes())))
    return items


def dumped(dump, path):
    """gguf_dump's lines, parsed into the same form."""
    out = subprocess.run([dump, path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("gguf_dump refused %s: %s%s" % (path, out.stdout,
                                                         out.stderr))
    items = []
    lines = out.stdout.split("\n")
    i = 0
    while i < len(lines) and lines[i]:
        f = lines[i].split(" ")
        i += 1
        if f[0] == "kv" and f[2] == "array":
            n = int(f[4])
            elems = [lines[i + k].strip() for k in range(n)]
            i += n
            if f[3] in FLOATS:
                elems = [float(e) for e in elems]
            items.append(("kv", f[1], "array", f[3], n, elems))
        elif f[0] == "kv":
            v = float(f[3]) if f[2] in FLOATS else f[3]
            items.append(("kv", f[1], f[2], v))
        else:
            items.append(("tensor", f[1], int(f[2]), f[3], int(f[4]),
                          int(f[5]), f[6]))
    return items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--all-vocab", action="store_true")
    a = ap.parse_args()
    gguf = os.path.join(os.environ.get("TFM_LLAMA_CPP") or a.llama_cpp,
                        "gguf-py")
    if not os.path.isdir(os.path.join(gguf, "gguf")):
        print("skipped: no gguf-py at %s (set TFM_LLAMA_CPP or run "
              "tools/fetch-llama-cpp.sh)" % gguf)
        return SKIP
    sys.path.insert(0, gguf)
    os.makedirs(a.out, exist_ok=True)
    failures = 0
    # llama.cpp's own vocabulary files (models/ggml-vocab-*.gguf, written
    # by its converters from real tokenizers: string arrays of up to 262k
    # tokens, merges, token types, scores).
    models = os.path.join(os.path.dirname(gguf), "models")
    vocab = sorted(os.path.join(models, f) for f in os.listdir(models)
                   if f.startswith("ggml-vocab-") and f.endswith(".gguf")) \
        if os.path.isdir(models) else []
    # GGUFReader takes seconds to a minute a file: by default the files
    # under 2 MB (a dozen, SentencePiece, WordPiece and byte-level BPE
    # vocabularies) and those of another version (only their refusal is
    # checked); --all-vocab: all (about 4 minutes).
    def version(path):
        with open(path, "rb") as f:
            return int.from_bytes(f.read(8)[4:], "little")

    if not a.all_vocab:
        vocab = [v for v in vocab
                 if os.path.getsize(v) < 2_000_000 or version(v) != 3]
    if not vocab:
        print("note: no models/ggml-vocab-*.gguf in %s" % models)
    for path in write_files(gguf, a.out) + vocab:
        v = version(path)
        if v != 3:
            # Version 2 has version 3's layout and llama.cpp still reads
            # it; the reader takes version 3 only (gguf.h), so it must
            # refuse the file, naming the version.
            out = subprocess.run([a.dump, path], capture_output=True,
                                 text=True)
            why = "GGUF version %d is not supported" % v
            if out.returncode != 1 or why not in out.stdout:
                print("%s: version %d not refused: %s" % (path, v,
                                                         out.stdout[:200]))
                failures += 1
            else:
                print("%s: version %d refused" % (os.path.basename(path),
                                                  v))
            continue
        t0 = time.time()
        want, got = expected(gguf, path), dumped(a.dump, path)
        bad = 0
        if len(want) != len(got):
            print("%s: %d items from gguf-py, %d from gguf_dump"
                  % (path, len(want), len(got)))
            bad += 1
        for w, g in zip(want, got):
            if w != g:
                print("%s:\n  gguf-py:   %r\n  gguf_dump: %r" % (path, w, g))
                bad += 1
        n_kv = sum(1 for w in want if w[0] == "kv")
        print("%s: %d keys, %d tensors: %s (%.1f s)" % (
            os.path.basename(path), n_kv, len(want) - n_kv,
            "%d differences" % bad if bad else "all agree", time.time() - t0))
        failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
