#!/usr/bin/env python3
"""Writes the seed corpus of the directory-file harnesses (issue 44):

    /usr/bin/python3 tests/fuzz/make_file_corpus.py [--out tests/fuzz/corpus]

corpus/hub/               fuzz_hub inputs: GPT-2 and Llama checkpoints of a
                          few parameters (one model.safetensors; a sharded
                          GPT-2 with its index), broken variants (a tensor
                          missing, twice, in the wrong shard), BERT, Marian
                          and ViT configurations.
corpus/marian/            fuzz_marian inputs: a mode byte, vocab.json,
                          source.spm, target.spm, tokenizer_config.json, a
                          text.
corpus/image/             fuzz_image inputs: a mode byte, a PNG or JPEG
                          image (grey, RGB, RGBA, palette, 16-bit,
                          interlaced; baseline and progressive JPEG, an
                          EXIF orientation), preprocessor_config.json.
corpus/optimizer/         fuzz_optimizer inputs: a mode byte, then an
                          optimizer state file as tfm_optimizer_save writes
                          it for the harness' Linear(3, 2), and variants.
corpus/generation_config/ fuzz_generation_config inputs:
                          generation_config.json, config.json.

Parts are separated by the bytes 0xFF 0xFF (tests/fuzz/fuzz_files.h).
Needs the standard library and, for the JPEG seeds only, Pillow
(python3-pil); the output is deterministic.  The committed corpus is this
script's output; rerun it after changing it.
"""
import argparse
import io
import json
import os
import random
import shutil
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_corpus import safetensors  # noqa: E402
from make_tokenizer_corpus import spm_model  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEP = b"\xff\xff"


def js(doc):
    return json.dumps(doc, separators=(",", ":")).encode()


def parts(*items):
    return SEP.join(items)


def vals(rng, n):
    return [round(rng.uniform(-0.5, 0.5), 3) for _ in range(n)]


# ---- hub directories -------------------------------------------------------

def gpt2_tensors(rng, d=4, ff=8, layers=1, vocab=6, ctx=4, prefix=""):
    t = [("wte.weight", [vocab, d]), ("wpe.weight", [ctx, d])]
    for i in range(layers):
        h = "h.%d." % i
        t += [(h + "ln_1.weight", [d]), (h + "ln_1.bias", [d]),
              (h + "attn.c_attn.weight", [d, 3 * d]),
              (h + "attn.c_attn.bias", [3 * d]),
              (h + "attn.c_proj.weight", [d, d]), (h + "attn.c_proj.bias", [d]),
              (h + "ln_2.weight", [d]), (h + "ln_2.bias", [d]),
              (h + "mlp.c_fc.weight", [d, ff]), (h + "mlp.c_fc.bias", [ff]),
              (h + "mlp.c_proj.weight", [ff, d]), (h + "mlp.c_proj.bias", [d])]
    t += [("ln_f.weight", [d]), ("ln_f.bias", [d])]
    out = []
    for name, shape in t:
        n = 1
        for s in shape:
            n *= s
        out.append((prefix + name, "F32", shape, vals(rng, n)))
    return out


def gpt2_config(**kw):
    c = {"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1,
         "n_inner": 8, "n_positions": 4, "vocab_size": 6,
         "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
    c.update(kw)
    return c


def llama_tensors(rng, d=4, ff=8, kv=2, layers=1, vocab=6):
    t = [("model.embed_tokens.weight", [vocab, d])]
    for i in range(layers):
        p = "model.layers.%d." % i
        t += [(p + "input_layernorm.weight", [d]),
              (p + "self_attn.q_proj.weight", [d, d]),
              (p + "self_attn.k_proj.weight", [kv, d]),
              (p + "self_attn.v_proj.weight", [kv, d]),
              (p + "self_attn.o_proj.weight", [d, d]),
              (p + "post_attention_layernorm.weight", [d]),
              (p + "mlp.gate_proj.weight", [ff, d]),
              (p + "mlp.up_proj.weight", [ff, d]),
              (p + "mlp.down_proj.weight", [d, ff])]
    t += [("model.norm.weight", [d]), ("lm_head.weight", [vocab, d])]
    return [(n, "F32", s, vals(rng, s[0] * (s[1] if len(s) > 1 else 1)))
            for n, s in t]


def marian_tensors(rng, d=4, ff=8, vocab=6):
    t = [("model.shared.weight", [vocab, d])]
    norms = {"encoder": ["self_attn_layer_norm", "final_layer_norm"],
             "decoder": ["self_attn_layer_norm", "encoder_attn_layer_norm",
                         "final_layer_norm"]}
    for stack in ("encoder", "decoder"):
        p = "model.%s.layers.0." % stack
        for att in ["self_attn"] + (["encoder_attn"] if stack == "decoder" else []):
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                t += [(p + "%s.%s.weight" % (att, proj), [d, d]),
                      (p + "%s.%s.bias" % (att, proj), [d])]
        for n in norms[stack]:
            t += [(p + n + ".weight", [d]), (p + n + ".bias", [d])]
        t += [(p + "fc1.weight", [ff, d]), (p + "fc1.bias", [ff]),
              (p + "fc2.weight", [d, ff]), (p + "fc2.bias", [d])]
    t += [("final_logits_bias", [1, vocab])]
    return [(n, "F32", s, vals(rng, s[0] * (s[1] if len(s) > 1 else 1)))
            for n, s in t]


def bert_layer(prefix, self_prefix, d, ff, n1, n2):
    t = []
    for k in ("query", "key", "value"):
        t += [(prefix + self_prefix + k + ".weight", [d, d]),
              (prefix + self_prefix + k + ".bias", [d])]
    t += [(prefix + "attention.output.dense.weight", [d, d]),
          (prefix + "attention.output.dense.bias", [d]),
          (prefix + n1 + ".weight", [d]), (prefix + n1 + ".bias", [d]),
          (prefix + "intermediate.dense.weight", [ff, d]),
          (prefix + "intermediate.dense.bias", [ff]),
          (prefix + "output.dense.weight", [d, ff]),
          (prefix + "output.dense.bias", [d]),
          (prefix + n2 + ".weight", [d]), (prefix + n2 + ".bias", [d])]
    return t


def f32(rng, t):
    out = []
    for n, s in t:
        k = 1
        for x in s:
            k *= x
        out.append((n, "F32", s, vals(rng, k)))
    return out


def bert_tensors(rng, d=4, ff=8, vocab=6, ctx=8):
    t = [("bert.embeddings.word_embeddings.weight", [vocab, d]),
         ("bert.embeddings.position_embeddings.weight", [ctx, d]),
         ("bert.embeddings.token_type_embeddings.weight", [2, d]),
         ("bert.embeddings.LayerNorm.weight", [d]),
         ("bert.embeddings.LayerNorm.bias", [d])]
    t += bert_layer("bert.encoder.layer.0.", "attention.self.", d, ff,
                    "attention.output.LayerNorm", "output.LayerNorm")
    t += [("cls.predictions.transform.dense.weight", [d, d]),
          ("cls.predictions.transform.dense.bias", [d]),
          ("cls.predictions.transform.LayerNorm.weight", [d]),
          ("cls.predictions.transform.LayerNorm.bias", [d]),
          ("cls.predictions.bias", [vocab])]
    return f32(rng, t)


def vit_tensors(rng, d=4, ff=8, labels=2, size=4, patch=2, ch=3):
    n = (size // patch) ** 2 + 1
    t = [("vit.embeddings.cls_token", [1, 1, d]),
         ("vit.embeddings.position_embeddings", [1, n, d]),
         ("vit.embeddings.patch_embeddings.projection.weight", [d, ch, patch, patch]),
         ("vit.embeddings.patch_embeddings.projection.bias", [d]),
         ("vit.layernorm.weight", [d]), ("vit.layernorm.bias", [d])]
    t += bert_layer("vit.encoder.layer.0.", "attention.attention.", d, ff,
                    "layernorm_before", "layernorm_after")
    t += [("classifier.weight", [labels, d]), ("classifier.bias", [labels])]
    return f32(rng, t)


def hub(config, index=b"", single=b"", shard1=b"", shard2=b""):
    return parts(config if isinstance(config, bytes) else js(config),
                 index, single, shard1, shard2)


def hub_corpus(rng):
    out = {}
    t = gpt2_tensors(rng)
    out["gpt2"] = hub(gpt2_config(), single=safetensors(t))
    out["gpt2_prefixed"] = hub(gpt2_config(),
                               single=safetensors(gpt2_tensors(rng, prefix="transformer.")))
    out["gpt2_f16"] = hub(gpt2_config(), single=safetensors(
        [(n, "F16", s, v) for n, _, s, v in t]))
    out["gpt2_untied"] = hub(gpt2_config(tie_word_embeddings=False),
                             single=safetensors(t + [("lm_head.weight", "F32", [6, 4],
                                                      vals(rng, 24))]))
    half = len(t) // 2
    names = {n: "model-00001-of-00002.safetensors" for n, *_ in t[:half]}
    names.update({n: "model-00002-of-00002.safetensors" for n, *_ in t[half:]})
    index = js({"metadata": {"total_size": 0}, "weight_map": names})
    a, b = safetensors(t[:half]), safetensors(t[half:])
    out["gpt2_sharded"] = hub(gpt2_config(), index, b"", a, b)
    wrong = dict(names)
    wrong[t[0][0]] = "model-00002-of-00002.safetensors"
    out["gpt2_sharded_wrong_shard"] = hub(gpt2_config(), js({"weight_map": wrong}),
                                          b"", a, b)
    out["gpt2_sharded_twice"] = hub(gpt2_config(), index, b"",
                                    safetensors(t[:half + 1]), b)
    out["gpt2_missing"] = hub(gpt2_config(), single=safetensors(t[1:]))
    out["gpt2_no_weights"] = hub(gpt2_config())
    out["gpt2_bad_json"] = hub(b'{"model_type": "gpt2", "n_embd": 4,', single=safetensors(t))
    out["gpt2_dup_key"] = hub(b'{"model_type":"gpt2","n_embd":4,"n_embd":8}',
                              single=safetensors(t))
    out["gpt2_huge_positions"] = hub(gpt2_config(n_positions=400000000),
                                     single=safetensors(t))
    out["llama"] = hub({"model_type": "llama", "hidden_size": 4,
                        "intermediate_size": 8, "num_attention_heads": 2,
                        "num_key_value_heads": 1, "num_hidden_layers": 1,
                        "vocab_size": 6, "max_position_embeddings": 8,
                        "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                        "hidden_act": "silu", "tie_word_embeddings": False},
                       single=safetensors(llama_tensors(rng)))
    bert = {"model_type": "bert", "hidden_size": 4, "num_attention_heads": 2,
            "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 6,
            "max_position_embeddings": 8, "type_vocab_size": 2,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12}
    bt = bert_tensors(rng)
    out["bert"] = hub(bert, single=safetensors(bt))
    out["bert_config"] = hub(bert, single=safetensors(bt[:1]))
    marian = {"model_type": "marian", "d_model": 4,
              "encoder_layers": 1, "decoder_layers": 1,
              "encoder_attention_heads": 2, "decoder_attention_heads": 2,
              "encoder_ffn_dim": 8, "decoder_ffn_dim": 8,
              "vocab_size": 6, "max_position_embeddings": 8,
              "activation_function": "swish", "scale_embedding": True,
              "pad_token_id": 5}
    mt = marian_tensors(rng)
    out["marian"] = hub(marian, single=safetensors(mt))
    out["marian_positions"] = hub(marian, single=safetensors(
        mt + [("model.encoder.embed_positions.weight", "F32", [8, 4],
               vals(rng, 32))]))
    out["marian_config"] = hub(marian, single=safetensors(mt[:1]))
    vit = {"model_type": "vit", "hidden_size": 4, "num_attention_heads": 2,
           "num_hidden_layers": 1, "intermediate_size": 8, "image_size": 4,
           "patch_size": 2, "num_channels": 3, "qkv_bias": True,
           "hidden_act": "gelu", "layer_norm_eps": 1e-12,
           "id2label": {"0": "a", "1": "b"}}
    vt = vit_tensors(rng)
    out["vit"] = hub(vit, single=safetensors(vt))
    out["vit_config"] = hub(vit, single=safetensors(vt[:1]))
    return out


# ---- Marian tokenizer --------------------------------------------------------

def marian_corpus():
    pieces = ["</s>", "<unk>", "\u2581", "a", "b", "c", "\u2581a", "ab",
              "\u2581ab", "bc", "abc", "<pad>"]
    vocab = js({p: i for i, p in enumerate(pieces)})
    cfg = js({"model_max_length": 512, "eos_token": "</s>", "unk_token": "<unk>",
              "pad_token": "<pad>"})
    src, tgt = spm_model(False), spm_model(True)
    out = {}
    for mode in (0, 1, 3, 5):
        out["marian_mode%d" % mode] = bytes([mode]) + parts(
            vocab, src, tgt, cfg, "abc ab \u4e2d >>fra<< a".encode())
    out["marian_no_config"] = bytes([1]) + parts(vocab, src, tgt, b"", b"a bc")
    out["marian_lang_code"] = bytes([1]) + parts(vocab, src, src, cfg, b">>fra<< abc")
    out["marian_no_target"] = bytes([0]) + parts(vocab, src, b"", cfg, b"abc")
    out["marian_bad_vocab"] = bytes([0]) + parts(b'{"a": -1, "b": 1.5}', src, tgt,
                                                b"", b"ab")
    out["marian_vocab_list"] = bytes([0]) + parts(b'["a","b"]', src, tgt, b"", b"ab")
    return out


# ---- images ------------------------------------------------------------------

def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png(w, h, color, depth, rows, interlace=0, extra=b""):
    """rows: raw scanline bytes without filter bytes (filter 0 added)."""
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" +
            png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0,
                                           interlace)) +
            extra + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
            png_chunk(b"IEND", b""))


def image_corpus():
    out = {}
    prep = js({"do_resize": True, "size": {"height": 4, "width": 4},
               "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255,
               "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
               "image_std": [0.5, 0.5, 0.5]})
    mode = bytes([3])  # image_size 4
    rgb = [bytes((x * 40 + y * 7 + c * 90) % 256 for x in range(5) for c in range(3))
           for y in range(3)]
    out["png_rgb"] = mode + parts(png(5, 3, 2, 8, rgb), prep)
    out["png_rgb_defaults"] = mode + parts(png(5, 3, 2, 8, rgb), b"")
    out["png_grey"] = mode + parts(png(4, 4, 0, 8, [bytes(range(y, y + 4)) for y in range(4)]), prep)
    out["png_grey1"] = mode + parts(png(8, 2, 0, 1, [b"\xa5", b"\x5a"]), prep)
    out["png_grey16"] = mode + parts(png(2, 2, 0, 16, [b"\x01\x00\x00\x80"] * 2), prep)
    out["png_rgba"] = mode + parts(png(2, 2, 6, 8, [bytes(range(8))] * 2), prep)
    out["png_rgb16"] = mode + parts(png(2, 1, 2, 16, [bytes(range(12))]), prep)
    plte = png_chunk(b"PLTE", bytes(range(12))) + png_chunk(b"tRNS", b"\x80")
    out["png_palette"] = mode + parts(png(4, 1, 3, 8, [b"\x00\x01\x02\x03"], extra=plte), prep)
    out["png_interlaced"] = mode + parts(png(5, 3, 2, 8, rgb, interlace=1), prep)
    out["png_truncated"] = mode + parts(png(5, 3, 2, 8, rgb)[:60], prep)
    bad_crc = bytearray(png(5, 3, 2, 8, rgb))
    bad_crc[29] ^= 1  # IHDR's CRC; mode bit 5 keeps it wrong
    out["png_bad_crc"] = bytes([3 | 32]) + parts(bytes(bad_crc), prep)
    out["prep_size_int"] = bytes([7]) + parts(png(5, 3, 2, 8, rgb), js({"size": 8}))
    out["prep_bad_size"] = mode + parts(png(5, 3, 2, 8, rgb), js({"size": 224}))
    out["prep_bad_resample"] = mode + parts(png(5, 3, 2, 8, rgb), js({"resample": 3}))
    out["prep_std_zero"] = mode + parts(png(5, 3, 2, 8, rgb), js({"image_std": 0}))
    out["prep_mean_one"] = mode + parts(png(5, 3, 2, 8, rgb), js({"image_mean": [0.1]}))
    out["prep_no_resize"] = mode + parts(png(4, 4, 2, 8, [bytes(12)] * 4),
                                         js({"do_resize": False}))
    out["not_an_image"] = mode + parts(b"GIF89a....", prep)
    try:
        from PIL import Image
    except ImportError:
        print("make_file_corpus.py: no Pillow, no JPEG seeds", file=sys.stderr)
        return out
    im = Image.new("RGB", (5, 3))
    im.putdata([(x * 40, y * 80, 128) for y in range(3) for x in range(5)])
    for name, kw in (("jpeg_baseline", {}), ("jpeg_progressive", {"progressive": True}),
                     ("jpeg_subsampled", {"subsampling": 2})):
        b = io.BytesIO()
        im.save(b, "JPEG", quality=90, **kw)
        out[name] = mode + parts(b.getvalue(), prep)
    b = io.BytesIO()
    im.convert("L").save(b, "JPEG", quality=90)
    out["jpeg_grey"] = mode + parts(b.getvalue(), prep)
    b = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90
    im.save(b, "JPEG", quality=90, exif=exif.tobytes())
    out["jpeg_exif_rotate"] = mode + parts(b.getvalue(), prep)
    b = io.BytesIO()
    im.convert("CMYK").save(b, "JPEG", quality=90)
    out["jpeg_cmyk"] = mode + parts(b.getvalue(), prep)
    return out


# ---- optimizer state ---------------------------------------------------------

def optimizer_corpus(rng):
    """Linear(3, 2): weight [2, 3], bias [2] (fuzz_optimizer.c)."""
    params = {"weight": [2, 3], "bias": [2]}
    kinds = [(0, "sgd", ["momentum_buffer"]),
             (1, "adam", ["exp_avg", "exp_avg_sq"]),
             (2, "adamw", ["exp_avg", "exp_avg_sq"]),
             (3, "adamw", ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"])]
    out = {}

    def state(kind, names, meta=None, edit=None):
        t = []
        for p, shape in params.items():
            n = shape[0] * (shape[1] if len(shape) > 1 else 1)
            for s in names:
                v = [abs(x) for x in vals(rng, n)] if s.endswith("_sq") else vals(rng, n)
                t.append(("%s.%s" % (p, s), "F32", shape, v))
            t.append(("%s.step" % p, "F32", [1], [2.0]))
        if edit:
            t = edit(t)
        m = {"optimizer": kind, "lr": "0.001"}
        if meta:
            m.update(meta)
        return safetensors(t, m)

    for mode, kind, names in kinds:
        out["%s_%d" % (kind, mode)] = bytes([mode]) + state(kind, names)
    adam = kinds[1]
    out["adam_wrong_kind"] = bytes([1]) + state("sgd", ["momentum_buffer"])
    out["adam_lr_hex"] = bytes([1]) + state("adam", adam[2], {"lr": "0x1p-3"})
    out["adam_lr_space"] = bytes([1]) + state("adam", adam[2], {"lr": " 0.5"})
    out["adam_lr_negative"] = bytes([1]) + state("adam", adam[2], {"lr": "-1"})
    out["adam_no_lr"] = bytes([1]) + safetensors([], {"optimizer": "adam"})
    out["adam_negative_sq"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, d, s, [-1.0] * len(v)) if n.endswith("_sq")
                                         else (n, d, s, v) for n, d, s, v in t])
    out["adam_nan"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, d, s, [float("nan")] * len(v))
                                         if n.endswith("exp_avg") else (n, d, s, v)
                                         for n, d, s, v in t])
    out["adam_step_fraction"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, d, s, [1.5]) if n.endswith("step")
                                         else (n, d, s, v) for n, d, s, v in t])
    out["adam_step_huge"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, d, s, [16777217.0]) if n.endswith("step")
                                         else (n, d, s, v) for n, d, s, v in t])
    out["adam_extra_tensor"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: t + [("layers.9.weight.exp_avg", "F32", [1], [0.0])])
    out["adam_missing"] = bytes([1]) + state("adam", adam[2], edit=lambda t: t[1:])
    out["adam_wrong_shape"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, d, [3, 2] if s == [2, 3] else s, v)
                                         for n, d, s, v in t])
    out["adam_f16"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, "F16", s, v) for n, d, s, v in t])
    out["adam_i64_step"] = bytes([1]) + state(
        "adam", adam[2], edit=lambda t: [(n, "I64", s, [3]) if n.endswith("step")
                                         else (n, d, s, v) for n, d, s, v in t])
    return out


# ---- generation_config.json --------------------------------------------------

def generation_config_corpus():
    g = {"bos_token_id": 0, "decoder_start_token_id": 58100, "eos_token_id": 0,
         "forced_eos_token_id": 0, "max_length": 512, "num_beams": 4,
         "pad_token_id": 58100, "bad_words_ids": [[58100]], "length_penalty": 1.0,
         "early_stopping": True, "renormalize_logits": True}
    out = {
        "marian": parts(js(g), b""),
        "config_only": parts(b"", js({"model_type": "marian", "bos_token_id": 0,
                                      "eos_token_id": [1, 2], "num_beams": 2,
                                      "max_new_tokens": 20, "min_length": 3})),
        "both": parts(js({"num_beams": 2, "eos_token_id": [7]}),
                      js({"num_beams": 5})),
        "notes": parts(js({"no_repeat_ngram_size": 3, "num_beam_groups": 2,
                           "diversity_penalty": 0.5, "repetition_penalty": 1.2,
                           "bad_words_ids": [[1, 2], [3], []],
                           "suppress_tokens": [4, -1, 2.5, 1e20, "x"],
                           "early_stopping": "never"}), b""),
        "wrong_types": parts(js({"num_beams": "4", "max_length": -1,
                                 "length_penalty": "x", "eos_token_id": {"a": 1},
                                 "bad_words_ids": 7, "suppress_tokens": {}}), b""),
        "huge": parts(js({"num_beams": 2147483648, "max_length": 1e300,
                          "decoder_start_token_id": 2147483647,
                          "eos_token_id": []}), b""),
        "not_object": parts(b"[1, 2, 3]", b""),
        "trailing": parts(b'{"num_beams": 2} x', b""),
        "nothing": parts(b"", b""),
    }
    return out


def write(outdir, files):
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    for name, data in sorted(files.items()):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fuzz", "corpus"))
    a = ap.parse_args()
    rng = random.Random(44)
    write(os.path.join(a.out, "hub"), hub_corpus(rng))
    write(os.path.join(a.out, "marian"), marian_corpus())
    write(os.path.join(a.out, "image"), image_corpus())
    write(os.path.join(a.out, "optimizer"), optimizer_corpus(rng))
    write(os.path.join(a.out, "generation_config"), generation_config_corpus())


if __name__ == "__main__":
    main()
