#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_gguf (tests/fuzz/corpus/gguf/) with
gguf-py, llama.cpp's GGUF writer:

    TFM_LLAMA_CPP=/path/to/llama.cpp python3 tests/fuzz/make_gguf_corpus.py

metadata.gguf   every value type, arrays of strings, ints, floats, bools
tensors.gguf    one tensor of each accepted type (F32, F16, BF16, Q8_0,
                Q4_0), ranks 1 to 4
align64.gguf    general.alignment 64, a vocabulary, two tensors
empty.gguf      general.architecture only, no tensors
Each stays under 4 KB.  The output is deterministic (fixed seed); the
committed corpus is this script's output.
"""
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.environ["TFM_LLAMA_CPP"], "gguf-py"))
from gguf import GGUFWriter, GGUFValueType as V, GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import quantize  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf")
rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def write(name, fill, alignment=None):
    w = GGUFWriter(os.path.join(OUT, name), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def metadata(w):
    w.add_uint8("a.u8", 1)
    w.add_int8("a.i8", -1)
    w.add_uint16("a.u16", 2)
    w.add_int16("a.i16", -2)
    w.add_uint32("a.u32", 3)
    w.add_int32("a.i32", -3)
    w.add_float32("a.f32", 0.5)
    w.add_bool("a.bool", True)
    w.add_string("a.str", "text é")
    w.add_uint64("a.u64", 2 ** 40)
    w.add_int64("a.i64", -2 ** 40)
    w.add_float64("a.f64", 0.25)
    w.add_array("a.strs", ["x", "yz", "<0x0A>"])
    w.add_array("a.ints", [1, -2, 3])
    w.add_array("a.floats", [0.5, -1.0])
    w.add_key_value("a.bools", [True, False], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("a.i64s", [5, -6], V.ARRAY, sub_type=V.INT64)


def tensors(w):
    w.add_tensor("f32", f32(2, 32))
    w.add_tensor("f16", f32(3).astype(np.float16))
    bf = quantize(f32(2, 32), Q.BF16)
    w.add_tensor("bf16", bf, raw_shape=bf.shape, raw_dtype=Q.BF16)
    q8 = quantize(f32(2, 32), Q.Q8_0)
    w.add_tensor("q8_0", q8, raw_shape=q8.shape, raw_dtype=Q.Q8_0)
    q4 = quantize(f32(2, 1, 64), Q.Q4_0)
    w.add_tensor("q4_0", q4, raw_shape=q4.shape, raw_dtype=Q.Q4_0)
    w.add_tensor("r4", f32(1, 2, 1, 2))


def align64(w):
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"])
    w.add_array("tokenizer.ggml.scores", [0.0, 0.0, -1.0, -2.0])
    w.add_tensor("token_embd.weight", f32(4, 8))
    q8 = quantize(f32(1, 32), Q.Q8_0)
    w.add_tensor("output.weight", q8, raw_shape=q8.shape, raw_dtype=Q.Q8_0)


os.makedirs(OUT, exist_ok=True)
write("metadata.gguf", metadata)
write("tensors.gguf", tensors)
write("align64.gguf", align64, alignment=64)
write("empty.gguf", lambda w: None)
