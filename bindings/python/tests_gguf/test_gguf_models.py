"""GGUF files (tfm_model_load / from_pretrained on a .gguf,
formats/gguf_model.c) written by llama.cpp's gguf-py (gguf_reference.py),
against (1) the same weights as a Hugging Face hub directory loaded by the
library's hub loader, (2) the float64 forward passes of
../tests/hub_*_reference.py on the values the file holds (gguf-py's
dequantize for Q8_0 / Q4_0), and (3) greedy tokens of that reference;
plus the hostile files a loader must refuse by name."""

import os
import subprocess

import numpy as np
import pytest
import torch

import gguf_reference as F
from gguf_reference import G, R, gguf

import transformer

pytestmark = pytest.mark.skipif(
    gguf is None, reason="no llama.cpp checkout with gguf-py "
    "($TFM_LLAMA_CPP; tools/fetch-llama-cpp.sh)")

IDS = [G.PROMPT, G.PROMPT[::-1]]


def rel_err(ours, ref):
    ours = np.asarray(ours, np.float64)
    ref = np.asarray(ref.detach().numpy() if hasattr(ref, "detach") else ref,
                     np.float64)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    return np.max(np.abs(ours - ref)) / np.max(np.abs(ref))


def _hub(tmp_path, write, weights, config):
    d = str(tmp_path / "hub")
    write(d, {k: v.float() for k, v in weights.items()}, config)
    return transformer.from_pretrained(d)


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0"])
def test_gpt2(tmp_path, qtype):
    cfg = F.GPT2_CONFIG
    w = G.random_weights(cfg, seed=5)
    path = str(tmp_path / "gpt2.gguf")
    held = F.write_gpt2(path, w, cfg, qtype)   # float64, GPT2Model layout
    model = transformer.from_pretrained(path)
    assert model.config["tied_embeddings"]
    ours = model.logits(np.array(IDS))
    # The float32 model of the values the file holds, through the hub
    # loader (Q8_0 / Q4_0: gguf-py's dequantize; widening is exact).
    hub = _hub(tmp_path, G.write_checkpoint, held, cfg)
    assert rel_err(ours, hub.logits(np.array(IDS))) <= 1e-5
    assert rel_err(ours, G.gpt2_logits(held, cfg, IDS)) <= 1e-5
    assert model.generate(G.PROMPT, max_new_tokens=10) == \
        G.greedy(held, cfg, G.PROMPT, 10)
    # Its tokenizer is the directory's.
    for text in ["hello the world", "other <|endoftext|> t", "\u00e9t\u00e9"]:
        assert model.tokenizer.encode(text) == hub.tokenizer.encode(text)
    # Weights kept in the file's type; biases and norms float32.
    want = "F16" if qtype == "F16" else qtype
    for name in ("token_embedding.weight", "layers.1.linear2.weight",
                 "layers.0.self_attn.in_proj_weight"):
        assert model.parameter_dtype(name) == want
    assert model.parameter_dtype("layers.0.norm1.bias") == "F32"


@pytest.mark.parametrize("qtype,tied", [("F32", False), ("F16", False),
                                        ("Q8_0", False), ("Q4_0", True)])
def test_llama(tmp_path, qtype, tied):
    cfg = dict(F.LLAMA_CONFIG, tie_word_embeddings=tied)
    w = R.random_weights(cfg, seed=6)
    path = str(tmp_path / "llama.gguf")
    held = F.write_llama(path, w, cfg, qtype)
    model = transformer.from_pretrained(path)
    assert model.config["tied_embeddings"] == tied
    ours = model.logits(np.array(IDS))
    hub = _hub(tmp_path, R.write_checkpoint, held, cfg)
    assert rel_err(ours, hub.logits(np.array(IDS))) <= 1e-5
    assert rel_err(ours, R.llama_logits(held, cfg, IDS)) <= 1e-5
    assert model.generate(G.PROMPT, max_new_tokens=10) == \
        R.greedy(held, cfg, G.PROMPT, 10)


@pytest.mark.parametrize("dtype,mmap", [("float32", True), ("q4_0", False),
                                        ("auto", False)])
def test_load_options(tmp_path, dtype, mmap):
    """from_pretrained(dtype=, mmap=) on a Q8_0 GGUF: converted as asked
    (float32: the very values the file holds, so the logits are those of
    the kept Q8_0 weights to float32 rounding), or kept."""
    cfg = F.LLAMA_CONFIG
    path = str(tmp_path / "m.gguf")
    held = F.write_llama(path, R.random_weights(cfg, seed=9), cfg, "Q8_0")
    model = transformer.from_pretrained(path, dtype=dtype, mmap=mmap)
    want = {"float32": "F32", "q4_0": "Q4_0", "auto": "Q8_0"}[dtype]
    assert model.parameter_dtype("layers.1.self_attn.in_proj_weight") == want
    assert model.parameter_dtype("token_embedding.weight") == want
    if dtype != "q4_0":
        assert rel_err(model.logits(np.array(IDS)),
                       R.llama_logits(held, cfg, IDS)) <= 1e-5


def test_head_equal_to_embedding_is_tied(tmp_path):
    """An "output" holding token_embd's very bytes is the tied head."""
    cfg = F.LLAMA_CONFIG
    w = R.random_weights(dict(cfg, tie_word_embeddings=True), seed=7)
    w["lm_head.weight"] = w["embed_tokens.weight"].clone()
    path = str(tmp_path / "m.gguf")
    held = F.write_llama(path, w, cfg, "Q8_0")
    model = transformer.from_pretrained(path)
    assert model.config["tied_embeddings"]
    assert rel_err(model.logits(np.array(IDS)),
                   R.llama_logits(held, cfg, IDS)) <= 1e-5


def test_cli_generates_from_gguf(tmp_path):
    exe = os.environ.get("TRANSFORMER_GENERATE")
    if not exe:
        pytest.skip("TRANSFORMER_GENERATE not set")
    cfg = F.GPT2_CONFIG
    w = G.random_weights(cfg, seed=8)
    path = str(tmp_path / "gpt2.gguf")
    held = F.write_gpt2(path, w, cfg, "Q8_0")
    out = subprocess.run([exe, "--model", path, "--prompt", "hello",
                          "--max-tokens", "8", "--greedy"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    vocab = G.write_tokenizer(str(tmp_path))
    prompt = transformer.from_pretrained(path).tokenizer.encode("hello")
    ids = G.greedy(held, cfg, prompt, 8)
    assert out.stdout == G.cli_text(vocab, "hello", ids)


# ---- hostile files ----------------------------------------------------------


def _load_error(path):
    with pytest.raises(transformer.TransformerError) as e:
        transformer.load_model(path)
    return e.value


def test_missing_tensor(tmp_path):
    p = str(tmp_path / "m.gguf")
    F.write_llama(p, R.random_weights(F.LLAMA_CONFIG),
                  drop="blk.1.attn_k.weight")
    e = _load_error(p)
    assert isinstance(e, transformer.FormatError)
    assert "blk.1.attn_k.weight" in str(e)


def test_wrong_shape(tmp_path):
    p = str(tmp_path / "m.gguf")
    F.write_gpt2(p, G.random_weights(F.GPT2_CONFIG),
                 reshape="blk.0.ffn_up.weight")
    e = _load_error(p)
    assert isinstance(e, transformer.FormatError)
    assert "blk.0.ffn_up.weight" in str(e)


def test_unknown_architecture(tmp_path):
    p = str(tmp_path / "m.gguf")
    F.write_gpt2(p, G.random_weights(F.GPT2_CONFIG), arch="falcon")
    e = _load_error(p)
    assert "falcon" in str(e) and isinstance(e, transformer.UnsupportedError)


def test_leftover_tensor(tmp_path):
    p = str(tmp_path / "m.gguf")
    F.write_llama(p, R.random_weights(F.LLAMA_CONFIG),
                  extra={"rope_freqs.weight": np.ones(8, np.float32)})
    e = _load_error(p)
    assert isinstance(e, transformer.UnsupportedError)
    assert "rope_freqs.weight" in str(e)


def test_unsupported_tensor_type(tmp_path):
    """A model weight of a type the library does not take (Q5_0, written
    by gguf-py's quantizer) is refused, naming the tensor and its type."""
    p = str(tmp_path / "m.gguf")
    F.write_llama(p, R.random_weights(F.LLAMA_CONFIG), qtype="Q5_0")
    e = _load_error(p)
    assert isinstance(e, transformer.UnsupportedError)
    assert "Q5_0" in str(e) and "token_embd.weight" in str(e)


def test_unsupported_model_features(tmp_path):
    cases = [({"add_rope_scaling_type": gguf.RopeScalingType.YARN}, "yarn"),
             ({"add_expert_count": 4}, "expert_count")]
    for keys, word in cases:
        p = str(tmp_path / "m.gguf")
        F.write_llama(p, R.random_weights(F.LLAMA_CONFIG), keys=keys)
        e = _load_error(p)
        assert isinstance(e, transformer.UnsupportedError) and word in str(e)


def test_tokenizer_pre_refused_by_name(tmp_path):
    p = str(tmp_path / "m.gguf")
    F.write_gpt2(p, G.random_weights(F.GPT2_CONFIG), pre="qwen2")
    with pytest.raises(transformer.UnsupportedError) as e:
        transformer.load_tokenizer(p)
    assert "qwen2" in str(e.value)
    F.write_gpt2(p, G.random_weights(F.GPT2_CONFIG), pre=None)
    with pytest.raises(transformer.UnsupportedError) as e:
        transformer.load_tokenizer(p)
    assert "default" in str(e.value)


def test_truncated_file(tmp_path):
    p = str(tmp_path / "m.gguf")
    F.write_gpt2(p, G.random_weights(F.GPT2_CONFIG), qtype="Q8_0")
    data = open(p, "rb").read()
    with open(p, "wb") as f:
        f.write(data[: len(data) - 100])
    _load_error(p)
