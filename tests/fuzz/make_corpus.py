#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses (tests/fuzz/corpus/).

    python3 tests/fuzz/make_corpus.py [--out tests/fuzz/corpus]

corpus/safetensors/  small valid files (some of tests/fixtures, the numpy
                     reference file, every dtype and rank) and hand-made
                     malformed ones, one per check of the reader.
corpus/model_load/   tiny model files of each architecture (with and
                     without a tokenizer, F32/F16/BF16), the small models
                     of tests/models, and broken variants: missing, extra,
                     misshapen or non-finite parameters, bad or missing
                     configuration keys, bad tokenizer metadata.
corpus/tokenizer/    fuzz_tokenizer inputs: a vocabulary, 0xFF, a text.
corpus/model_metadata/ fuzz_model_metadata inputs: "key=value" lines over
                     a tiny model's metadata (numbers in strict and lenient
                     spellings, enums, variants, tokenizer keys).

Only the standard library is used; the output is deterministic.  The
committed corpus is this script's output; rerun it after changing it.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))

DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4,
              "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


# ---- encoding ---------------------------------------------------------------

def pack(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F64":
        return struct.pack("<%dd" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    if dtype == "BF16":
        out = bytearray()
        for v in values:
            out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
        return bytes(out)
    if dtype in ("I64", "I32", "I16", "I8"):
        fmt = {"I64": "q", "I32": "i", "I16": "h", "I8": "b"}[dtype]
        return struct.pack("<%d%s" % (len(values), fmt), *[int(v) for v in values])
    return bytes(int(v) & 0xFF for v in values)  # U8, BOOL


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def safetensors(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, values); returns file bytes."""
    header, data = {}, bytearray()
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, values in tensors:
        raw = pack(dtype, values)
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return raw_file(json.dumps(header, separators=(",", ":")).encode(), data, pad)


def raw_file(header, data=b"", pad=True, length=None):
    if pad:
        header += b" " * ((8 - (8 + len(header)) % 8) % 8)
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + bytes(data)


def values(rng, n, scale=0.5):
    return [rng.uniform(-scale, scale) for _ in range(n)]


# ---- the safetensors corpus ---------------------------------------------------

def safetensors_corpus(rng):
    out = {}
    for name in ("layer_norm_eps", "feed_forward_relu", "mha_single_head",
                 "mha_attn_mask_4d", "cross_attention_pre"):
        with open(os.path.join(ROOT, "tests", "fixtures", name + ".safetensors"), "rb") as f:
            out["fixture_" + name] = f.read()
    with open(os.path.join(ROOT, "tests", "data", "numpy_reference.safetensors"), "rb") as f:
        out["numpy_reference"] = f.read()

    every = [("t_" + dt.lower(), dt, [2, 3], values(rng, 6, 3.0) if dt[0] in "FB" and dt != "BOOL"
              else [1, 0, 1, 1, 0, 1]) for dt in DTYPE_SIZE]
    out["every_dtype"] = safetensors(every, {"k": "v", "café": "ünïcödé"})
    out["ranks"] = safetensors([
        ("r0", "F32", [], [1.5]), ("r1", "F32", [3], [1, 2, 3]),
        ("r4", "F32", [1, 2, 1, 2], [1, 2, 3, 4]),
        ("r5", "F32", [1, 1, 1, 1, 2], [1, 2]),
        ("r8", "F16", [1] * 8, [0.25]), ("empty", "F32", [2, 0], [])])
    out["metadata_only"] = safetensors([], {"format": "pt"})
    out["empty_object"] = raw_file(b"{}")
    out["unpadded"] = safetensors([("x", "F32", [2], [1, 2])], pad=False)
    out["specials"] = safetensors([
        ("f32", "F32", [4], [math.inf, -math.inf, math.nan, -0.0]),
        ("f16", "F16", [4], [65504.0, 6e-8, math.inf, math.nan]),
        ("f64", "F64", [3], [1e300, -1e-300, math.nan])])

    good = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    four = b"\0\0\x80\x3f"
    bad = {
        "empty": b"",
        "short": b"\x08\0\0\0\0\0\0",
        "length_only": struct.pack("<Q", 0),
        "length_huge": struct.pack("<Q", 2 ** 63) + b"{}",
        "length_beyond": raw_file(b"{}", pad=False, length=100),
        "length_above_max": raw_file(b"{}", pad=False, length=100000001),
        "not_json": raw_file(b"not json"),
        "json_array": raw_file(b"[1,2,3]"),
        "json_trailing": raw_file(b'{} {}'),
        "bom": raw_file(b"\xef\xbb\xbf{}"),
        "nul": raw_file(b'{"a\0":1}'),
        "bad_utf8": raw_file(b'{"\xff":{}}'),
        "overlong_utf8": raw_file(b'{"\xc0\xaf":{}}'),
        "surrogate_utf8": raw_file(b'{"\xed\xa0\x80":{}}'),
        "escaped_nul": raw_file(b'{"a\\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', four),
        "lone_surrogate_escape": raw_file(b'{"\\ud800":{}}'),
        "deep_nesting": raw_file(b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}"),
        "entry_not_object": raw_file(b'{"a":5}'),
        "missing_dtype": raw_file(b'{"a":{"shape":[1],"data_offsets":[0,4]}}', four),
        "extra_key": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}', four),
        "duplicate_key": raw_file(b'{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', four),
        "dtype_number": raw_file(b'{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}', four),
        "dtype_unknown": raw_file(b'{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}', b"\0"),
        "shape_not_array": raw_file(b'{"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}}', four),
        "shape_negative": raw_file(b'{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', four),
        "shape_fraction": raw_file(b'{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}', four),
        "shape_2_53": raw_file(b'{"a":{"dtype":"F32","shape":[9007199254740993],"data_offsets":[0,4]}}', four),
        "shape_rank9": raw_file(b'{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}', four),
        "shape_overflow": raw_file(b'{"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}}', four),
        "shape_string": raw_file(b'{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}', four),
        "offsets_three": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}', four),
        "offsets_reversed": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}', four),
        "offsets_beyond": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}', four),
        "offsets_size": raw_file(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', four),
        "offsets_huge": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551616]}}', four),
        "overlap": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                            b'"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', four),
        "gap": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', four + four),
        "trailing": raw_file(good, four + b"xx"),
        "duplicate_tensor": raw_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                     b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', four + four),
        "metadata_not_object": raw_file(b'{"__metadata__":[1]}'),
        "metadata_not_string": raw_file(b'{"__metadata__":{"k":1}}'),
        "metadata_duplicate": raw_file(b'{"__metadata__":{"k":"a","k":"b"}}'),
        "metadata_twice": raw_file(b'{"__metadata__":{},"__metadata__":{}}'),
        "metadata_tensor_name": raw_file(b'{"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', four),
        "int_dtype": raw_file(b'{"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}', four),
        "good": raw_file(good, four),
    }
    for k, v in bad.items():
        out["bad_" + k] = v
    return out


# ---- tiny models ------------------------------------------------------------

def mha_params(prefix, d):
    return [(prefix + "in_proj_weight", [3 * d, d]), (prefix + "in_proj_bias", [3 * d]),
            (prefix + "out_proj.weight", [d, d]), (prefix + "out_proj.bias", [d])]


def ff_norm_params(prefix, d, dff, norms):
    p = [(prefix + "linear1.weight", [dff, d]), (prefix + "linear1.bias", [dff]),
         (prefix + "linear2.weight", [d, dff]), (prefix + "linear2.bias", [d])]
    for n in norms:
        p += [(prefix + n + ".weight", [d]), (prefix + n + ".bias", [d])]
    return p


def encoder_layer(prefix, d, dff):
    return mha_params(prefix + "self_attn.", d) + ff_norm_params(prefix, d, dff, ["norm1", "norm2"])


def decoder_layer(prefix, d, dff):
    return (mha_params(prefix + "self_attn.", d) + mha_params(prefix + "multihead_attn.", d) +
            ff_norm_params(prefix, d, dff, ["norm1", "norm2", "norm3"]))


def model_params(cfg):
    d, dff, V, ctx = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"], cfg["context_length"]
    p = [("token_embedding.weight", [V, d])]
    if cfg["positional"] == "learned":
        p.append(("position_embedding.weight", [ctx, d]))
    if cfg["architecture"] == "encoder_decoder":
        for i in range(cfg["n_encoder_layers"]):
            p += encoder_layer("transformer.encoder.layers.%d." % i, d, dff)
        p += [("transformer.encoder.norm.weight", [d]), ("transformer.encoder.norm.bias", [d])]
        for i in range(cfg["n_decoder_layers"]):
            p += decoder_layer("transformer.decoder.layers.%d." % i, d, dff)
        p += [("transformer.decoder.norm.weight", [d]), ("transformer.decoder.norm.bias", [d])]
    else:
        for i in range(cfg["n_layers"]):
            p += encoder_layer("layers.%d." % i, d, dff)
        p += [("norm.weight", [d]), ("norm.bias", [d])]
    if not cfg["tied"]:
        p.append(("lm_head.weight", [V, d]))
    return p


def model_metadata(cfg, vocab=None):
    m = {"format": "libtransformer", "tfm.architecture": cfg["architecture"],
         "tfm.vocab_size": str(cfg["vocab_size"]), "tfm.d_model": str(cfg["d_model"]),
         "tfm.n_heads": str(cfg["n_heads"]), "tfm.d_ff": str(cfg["d_ff"]),
         "tfm.context_length": str(cfg["context_length"]),
         "tfm.norm_first": "true" if cfg["norm_first"] else "false",
         "tfm.activation": cfg["activation"], "tfm.layer_norm_eps": "1e-05",
         "tfm.positional": cfg["positional"],
         "tfm.tied_embeddings": "true" if cfg["tied"] else "false",
         "tfm.embedding_scale": "false"}
    if cfg["architecture"] == "encoder_decoder":
        m["tfm.n_encoder_layers"] = str(cfg["n_encoder_layers"])
        m["tfm.n_decoder_layers"] = str(cfg["n_decoder_layers"])
    else:
        m["tfm.n_layers"] = str(cfg["n_layers"])
    if vocab is not None:
        m["tfm.tokenizer"] = "char"
        m["tfm.vocab"] = vocab
    return m


def model_file(rng, cfg, vocab=None, dtype="F32", edit=None, meta_edit=None):
    tensors = []
    for name, shape in model_params(cfg):
        vals = values(rng, numel(shape))
        if "norm" in name and name.endswith(".weight"):
            vals = [1.0 + v / 10 for v in vals]
        tensors.append([name, dtype, shape, vals])
    if edit:
        tensors = edit(tensors)
    meta = model_metadata(cfg, vocab)
    if meta_edit:
        meta_edit(meta)
    return safetensors([tuple(t) for t in tensors], meta)


def tiny(arch, **kw):
    cfg = {"architecture": arch, "d_model": 4, "n_heads": 2, "d_ff": 8, "vocab_size": 5,
           "context_length": 4, "n_layers": 1, "n_encoder_layers": 1, "n_decoder_layers": 1,
           "norm_first": False, "activation": "relu", "positional": "learned", "tied": True}
    cfg.update(kw)
    return cfg


def model_corpus(rng):
    out = {}
    # One of tests/models (8 KB); the larger ones would slow every
    # mutation down, and the tiny models below cover each architecture.
    for name in ("encoder_only_learned",):
        with open(os.path.join(ROOT, "tests", "models", name + ".safetensors"), "rb") as f:
            out["model_" + name] = f.read()

    dec = tiny("decoder_only")
    out["tiny_decoder"] = model_file(rng, dec)
    out["tiny_decoder_tokenizer"] = model_file(rng, dec, vocab="abcde")
    out["tiny_decoder_unicode_tokenizer"] = model_file(rng, dec, vocab="aé€𝄞 ")
    out["tiny_decoder_f16"] = model_file(rng, dec, dtype="F16")
    out["tiny_decoder_bf16"] = model_file(rng, dec, dtype="BF16")
    out["tiny_decoder_untied_sinusoidal_gelu_tanh"] = model_file(
        rng, tiny("decoder_only", tied=False, positional="sinusoidal", activation="gelu_tanh",
                  norm_first=True, n_layers=2))
    out["tiny_decoder_no_positions"] = model_file(rng, tiny("decoder_only", positional="none"))
    out["tiny_decoder_ctx1"] = model_file(rng, tiny("decoder_only", context_length=1))
    out["tiny_encoder"] = model_file(rng, tiny("encoder_only", activation="gelu"), vocab="xyz12")
    out["tiny_encoder_decoder"] = model_file(rng, tiny("encoder_decoder", positional="sinusoidal"))
    out["tiny_encoder_decoder_untied"] = model_file(
        rng, tiny("encoder_decoder", tied=False, n_encoder_layers=2, positional="learned"))

    def drop_last(t):
        return t[:-1]

    def extra(t):
        return t + [["unexpected.weight", "F32", [1], [0.0]]]

    def misshape(t):
        t[0][2] = [t[0][2][1], t[0][2][0]]
        return t

    def nan(t):
        t[1][3][0] = math.nan
        return t

    def inf(t):
        t[2][3][-1] = math.inf
        return t

    def int_dtype(t):
        t[0][1] = "I32"
        return t

    def rank3(t):
        t[0][2] = [1] + t[0][2]
        return t

    for name, edit in (("missing_tensor", drop_last), ("extra_tensor", extra),
                       ("wrong_shape", misshape), ("nan_param", nan), ("inf_param", inf),
                       ("int_param", int_dtype), ("rank3_param", rank3)):
        out["bad_" + name] = model_file(rng, dec, vocab="abcde", edit=edit)

    def setter(key, value):
        def f(m):
            if value is None:
                m.pop(key, None)
            else:
                m[key] = value
        return f

    meta_cases = {
        "no_format": ("format", None), "wrong_format": ("format", "pt"),
        "no_arch": ("tfm.architecture", None), "bad_arch": ("tfm.architecture", "rnn"),
        "d_model_zero": ("tfm.d_model", "0"), "d_model_neg": ("tfm.d_model", "-4"),
        "d_model_text": ("tfm.d_model", "four"), "d_model_trailing": ("tfm.d_model", "4x"),
        "d_model_huge": ("tfm.d_model", "99999999999999999999"),
        "d_model_big": ("tfm.d_model", "1000000000"),
        "heads_not_dividing": ("tfm.n_heads", "3"), "heads_zero": ("tfm.n_heads", "0"),
        "d_ff_missing": ("tfm.d_ff", None), "vocab_zero": ("tfm.vocab_size", "0"),
        "vocab_2_31": ("tfm.vocab_size", "2147483648"), "ctx_zero": ("tfm.context_length", "0"),
        "layers_zero": ("tfm.n_layers", "0"), "layers_missing": ("tfm.n_layers", None),
        "layers_many": ("tfm.n_layers", "1000001"),
        "eps_text": ("tfm.layer_norm_eps", "tiny"), "eps_nan": ("tfm.layer_norm_eps", "nan"),
        "eps_inf": ("tfm.layer_norm_eps", "inf"), "eps_negative": ("tfm.layer_norm_eps", "-1"),
        "eps_huge": ("tfm.layer_norm_eps", "1e39"),
        "activation_bad": ("tfm.activation", "swish"), "positional_bad": ("tfm.positional", "rope"),
        "norm_first_bad": ("tfm.norm_first", "yes"), "tied_bad": ("tfm.tied_embeddings", "2"),
        "tokenizer_bpe": ("tfm.tokenizer", "bpe"), "vocab_missing": ("tfm.vocab", None),
        "vocab_empty": ("tfm.vocab", ""), "vocab_duplicate": ("tfm.vocab", "abcda"),
        "vocab_duplicate_wide": ("tfm.vocab", "aéb€é"), "vocab_size_mismatch": ("tfm.vocab", "abcdef"),
    }
    for name, (key, value) in meta_cases.items():
        out["meta_" + name] = model_file(rng, dec, vocab="abcde", meta_edit=setter(key, value))
    out["meta_arch_swap"] = model_file(rng, dec, vocab="abcde",
                                       meta_edit=setter("tfm.architecture", "encoder_decoder"))
    out.update(variant_corpus(rng))
    return out


def variant_model(rng, att, kv_heads=None, extra=(), ctx=6, positional="none"):
    """A tiny decoder-only model (d_model 4, 2 heads of 2) whose attention
    variant is the "tfm.attention.*" metadata att, with the key/value rows
    of kv_heads heads and the variant's own tensors extra (suffix, shape)
    in every layer (variants.h)."""
    cfg = tiny("decoder_only", context_length=ctx, positional=positional, n_layers=2)
    d = cfg["d_model"]
    rows = d + 2 * (kv_heads or cfg["n_heads"]) * (d // cfg["n_heads"])

    def edit(t):
        for x in t:
            if x[0].endswith("self_attn.in_proj_weight"):
                x[2] = [rows, d]
            elif x[0].endswith("self_attn.in_proj_bias"):
                x[2] = [rows]
            else:
                continue
            x[3] = values(rng, numel(x[2]))
        for i in range(cfg["n_layers"]):
            for suffix, shape, fill in extra:
                vals = [fill] * numel(shape) if fill is not None else values(rng, numel(shape))
                t.append(["layers.%d.self_attn.%s" % (i, suffix), "F32", shape, vals])
        return t

    def meta(m):
        m.update(att)

    return model_file(rng, cfg, vocab="abcde", edit=edit, meta_edit=meta)


def variant_corpus(rng):
    """Attention variants (docs/VARIANTS.md): one valid model of each kind,
    and hostile "tfm.attention.*" values that the loader must refuse or
    that must run without overflow (huge windows are all keys)."""
    A = "tfm.attention."
    big = "9223372036854775807"
    out = {}
    out["variant_gqa_rope_window"] = variant_model(
        rng, {A + "n_kv_heads": "1", A + "rope": "half", A + "rope_base": "500",
              A + "sparsity": "sliding_window", A + "window": "2"}, kv_heads=1)
    out["variant_t5_bigbird"] = variant_model(
        rng, {A + "relative": "t5", A + "num_buckets": "8", A + "max_distance": "6",
              A + "bidirectional": "false", A + "sparsity": "bigbird",
              A + "block_size": "2", A + "n_random_blocks": "2", A + "n_global": "1",
              A + "seed": "18446744073709551615"},
        extra=[("relative_attention_bias.weight", [8, 2], None)])
    out["variant_shaw_temperature"] = variant_model(
        rng, {A + "score": "learned_temperature", A + "relative": "shaw",
              A + "max_distance": "2", A + "relative_values": "true"},
        extra=[("temperature", [2], 1.5), ("relative_key.weight", [5, 2], None),
               ("relative_value.weight", [5, 2], None)])
    out["variant_alibi_dilated_global"] = variant_model(
        rng, {A + "relative": "alibi", A + "sparsity": "dilated", A + "window": "2",
              A + "dilation": "2", A + "n_global": "1", A + "rope": "adjacent"})
    out["variant_additive_mqa"] = variant_model(
        rng, {A + "score": "additive", A + "additive_dim": "3", A + "n_kv_heads": "1"},
        kv_heads=1, extra=[("additive_query", [2, 3, 2], None),
                           ("additive_key", [2, 3, 2], None), ("additive_v", [2, 3], None)])
    out["variant_general_sinusoidal"] = variant_model(
        rng, {A + "score": "general", A + "scale": "0.5", "tfm.positional_base": "100"},
        extra=[("score_weight", [2, 2, 2], None)], positional="sinusoidal_concat")
    # Huge sizes: valid, and every key visible.
    out["variant_huge_windows"] = variant_model(
        rng, {A + "sparsity": "bigbird", A + "block_size": big, A + "window": big,
              A + "n_global": big, A + "n_random_blocks": "4096",
              A + "relative": "t5", A + "max_distance": big},
        extra=[("relative_attention_bias.weight", [32, 2], None)])
    out["variant_huge_dilation"] = variant_model(
        rng, {A + "sparsity": "dilated", A + "window": big, A + "dilation": "1"})
    # Refused: too many random blocks, and Shaw's table bigger than the file.
    out["variant_bad_random_blocks"] = variant_model(
        rng, {A + "sparsity": "bigbird", A + "block_size": "1",
              A + "n_random_blocks": "1000000000000"})
    out["variant_bad_shaw_distance"] = variant_model(
        rng, {A + "relative": "shaw", A + "max_distance": "1000000000"},
        extra=[("relative_key.weight", [5, 2], None)])
    return out


def write(outdir, files):
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    for name, data in sorted(files.items()):
        with open(os.path.join(outdir, name + ".safetensors"), "wb") as f:
            f.write(data)


def tokenizer_corpus():
    """Vocabulary, 0xFF, text (fuzz_tokenizer.c)."""
    return {
        "ascii": b"abc \xffcab ba",
        "multibyte": "abé中".encode() + b"\xff" + "中bé".encode(),
        "unknown_char": b"abc\xffabd",
        "duplicate": b"aba\xffa",
        "empty_vocab": b"\xffabc",
        "invalid_utf8_vocab": b"a\xc3\x28\xffa",
        "invalid_utf8_text": b"ab\xffa\xe4\xb8",
        "newline_and_nul": b"a\nb\x00c\xffa\nb",
        "vocab_only": b"xyz",
    }


def metadata_corpus():
    """"key=value" lines (fuzz_model_metadata.c)."""
    lines = {
        "nothing": [],
        "d_model_plain": ["tfm.d_model=4"],
        "d_model_space": ["tfm.d_model= 4"],
        "d_model_newline_escape": ["tfm.n_heads=2", "tfm.d_ff=08"],
        "eps_forms": ["tfm.layer_norm_eps=1e-5"],
        "eps_hex": ["tfm.layer_norm_eps=0x1p-17"],
        "eps_inf": ["tfm.layer_norm_eps=inf"],
        "activation": ["tfm.activation=gelu_tanh", "tfm.norm_first=true"],
        "positional": ["tfm.positional=sinusoidal", "tfm.positional_base=500"],
        "architecture": ["tfm.architecture=encoder_only"],
        "layers": ["tfm.n_layers=2"],
        "tokenizer_size": ["tfm.vocab_size=5", "tfm.vocab=abcdf"],
        "tokenizer_size_bad": ["tfm.vocab=abc"],
        "tokenizer_kind": ["tfm.tokenizer=bpe"],
        "attention_score": ["tfm.attention.score=dot",
                            "tfm.attention.scale=0.5"],
        "attention_rope": ["tfm.attention.rope=half",
                           "tfm.attention.rope_dims=2",
                           "tfm.attention.rope_base=10000"],
        "attention_window": ["tfm.attention.sparsity=sliding_window",
                             "tfm.attention.window=2"],
        "attention_t5": ["tfm.attention.relative=t5",
                         "tfm.attention.num_buckets=4",
                         "tfm.attention.max_distance=8",
                         "tfm.attention.bidirectional=false"],
        "attention_gqa": ["tfm.attention.n_kv_heads=1"],
        "unknown_key": ["tfm.attention.bogus=1"],
    }
    return {k: "\n".join(v).encode() for k, v in lines.items()}


def write_raw(outdir, files):
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    for name, data in sorted(files.items()):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fuzz", "corpus"))
    args = ap.parse_args()
    rng = random.Random(20240601)
    st = safetensors_corpus(rng)
    models = model_corpus(rng)
    write(os.path.join(args.out, "safetensors"), st)
    write(os.path.join(args.out, "model_load"), models)
    write_raw(os.path.join(args.out, "tokenizer"), tokenizer_corpus())
    write_raw(os.path.join(args.out, "model_metadata"), metadata_corpus())
    print("%d safetensors and %d model files in %s" % (len(st), len(models), args.out))


if __name__ == "__main__":
    main()
