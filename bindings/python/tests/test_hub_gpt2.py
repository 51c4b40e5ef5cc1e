"""GPT-2 checkpoint directories in the Hugging Face hub layout
(tfm_model_load on a directory, hub_model.c) against GPT-2's forward pass
in plain torch float64 (hub_gpt2_reference.py)."""

import json
import os
import subprocess

import numpy as np
import pytest
import torch

import transformer
import hub_gpt2_reference as R
from conftest import rel_err


@pytest.mark.parametrize("dtype,prefix,shards,buffers,tied", [
    ("F32", "", 1, True, True),               # the original gpt2 upload
    ("F16", "transformer.", 3, False, True),  # sharded, GPT2LMHeadModel
    ("BF16", "transformer.", 1, False, True),
    ("F32", "transformer.", 2, False, False),  # untied lm_head
])
def test_logits_and_greedy(tmp_path, dtype, prefix, shards, buffers, tied):
    config = dict(R.CONFIG, tie_word_embeddings=tied)
    w = R.random_weights(config, seed=1, tied=tied)
    R.write_checkpoint(str(tmp_path), w, config, dtype=dtype, prefix=prefix,
                       shards=shards, mask_buffers=buffers)
    ref_w = R.rounded(w, dtype)
    model = transformer.from_pretrained(tmp_path)
    assert model.config["tied_embeddings"] == tied
    ids = [R.PROMPT, R.PROMPT[::-1]]
    ref = R.gpt2_logits(ref_w, config, ids)
    assert rel_err(model.logits(np.array(ids)), ref) <= 1e-5
    assert model.generate(R.PROMPT, max_new_tokens=10) == \
        R.greedy(ref_w, config, R.PROMPT, 10)
    assert model.tokenizer.kind == "byte_bpe"
    sd = model.state_dict()
    np.testing.assert_array_equal(
        sd["layers.0.self_attn.in_proj_weight"],
        ref_w["h.0.attn.c_attn.weight"].T.float().numpy())


def test_load_model_same_as_from_pretrained(tmp_path):
    R.write_checkpoint(str(tmp_path), R.random_weights(R.CONFIG),
                       tokenizer=False)
    a = transformer.load_model(str(tmp_path))
    b = transformer.Model.from_pretrained(tmp_path)
    assert a.tokenizer is None
    np.testing.assert_array_equal(a.logits(R.PROMPT), b.logits(R.PROMPT))


def _edit(tmp_path, config=None, drop=None, extra=None, reshape=None,
          prefix=""):
    w = R.random_weights(R.CONFIG)
    if drop:
        del w[drop]
    if reshape:
        w[reshape] = w[reshape][:-1]
    R.write_checkpoint(str(tmp_path), w, config, extra=extra,
                       prefix=prefix, tokenizer=False)
    return str(tmp_path)


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(config=dict(R.CONFIG, model_type="t5")),
     transformer.UnsupportedError, "model_type"),
    (dict(config=dict(R.CONFIG, activation_function="quick_gelu")),
     transformer.UnsupportedError, "activation_function"),
    (dict(config=dict(R.CONFIG, n_head=5)), transformer.FormatError,
     "n_head"),
    (dict(drop="h.2.mlp.c_fc.bias"), transformer.FormatError,
     "h.2.mlp.c_fc.bias"),
    (dict(reshape="wpe.weight"), transformer.FormatError, "wpe.weight"),
    # A GPT2LMHeadModel save without its wte: named with the "transformer."
    # prefix its other tensors carry.
    (dict(drop="wte.weight", prefix="transformer."), transformer.FormatError,
     "transformer.wte.weight"),
    (dict(extra={"h.3.ln_1.weight": torch.ones(32)}),
     transformer.FormatError, "h.3.ln_1.weight"),
    (dict(extra={"h.0.ln_1.weight": torch.full((32,), float("inf"))}),
     transformer.NonFiniteError, "h.0.ln_1.weight"),
])
def test_refused_with_the_name(tmp_path, kwargs, error, words):
    path = _edit(tmp_path, **kwargs)
    with pytest.raises(error, match=words.replace(".", r"\.")):
        transformer.from_pretrained(path)


def test_no_weights(tmp_path):
    with open(tmp_path / "config.json", "w") as f:
        json.dump(R.CONFIG, f)
    with pytest.raises(transformer.TransformerIOError,
                       match="model.safetensors"):
        transformer.from_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK")
    with pytest.raises(transformer.UnsupportedError,
                       match="pytorch_model.bin"):
        transformer.from_pretrained(tmp_path)
    os.remove(tmp_path / "config.json")
    with pytest.raises(transformer.TransformerIOError, match="config.json"):
        transformer.from_pretrained(tmp_path)


@pytest.mark.parametrize("name,text", [
    ("config.json", '{"model_type": "gpt2", "n_embd": 32,'),   # cut short
    ("config.json", '["gpt2"]'),                               # not an object
    ("model.safetensors.index.json", '{"weight_map": {"wte.weight": '),
])
def test_malformed_json(tmp_path, name, text):
    R.write_checkpoint(str(tmp_path), R.random_weights(R.CONFIG),
                       shards=2 if name != "config.json" else 1,
                       tokenizer=False)
    (tmp_path / name).write_text(text)
    with pytest.raises(transformer.FormatError, match=name.replace(".", r"\.")):
        transformer.from_pretrained(tmp_path)


def test_index_names_a_missing_shard(tmp_path):
    R.write_checkpoint(str(tmp_path), R.random_weights(R.CONFIG), shards=2,
                       tokenizer=False)
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(transformer.TransformerIOError,
                       match="model-00002-of-00002"):
        transformer.from_pretrained(tmp_path)


def test_auto_model_for_causal_lm(tmp_path):
    R.write_checkpoint(str(tmp_path / "gpt2"), R.random_weights(R.CONFIG))
    auto = transformer.AutoModelForCausalLM.from_pretrained(tmp_path / "gpt2")
    ref = R.gpt2_logits(R.rounded(R.random_weights(R.CONFIG), "F32"),
                        R.CONFIG, [R.PROMPT])
    assert rel_err(auto.logits(np.array([R.PROMPT])), ref) <= 1e-5
    assert auto.tokenizer.decode(auto.tokenizer.encode("hello the")) == \
        "hello the"
    with pytest.raises(TypeError):
        transformer.AutoModelForCausalLM()
    s2s = transformer.Model(architecture="encoder_decoder", vocab_size=13,
                            d_model=8, n_heads=2, d_ff=16,
                            n_encoder_layers=1, n_decoder_layers=1,
                            context_length=8)
    s2s.save(tmp_path / "s2s.safetensors")
    with pytest.raises(transformer.UnsupportedError, match="decoder-only"):
        transformer.AutoModelForCausalLM.from_pretrained(
            tmp_path / "s2s.safetensors")


def test_command_line(tmp_path):
    """transformer-generate --model DIR: the directory's tokenizer encodes
    the prompt, and the text printed is the prompt then the bytes of the
    reference's greedy ids (GPT-2's byte-level symbols mapped back to
    bytes here, bytes_to_unicode inverted)."""
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    w = R.random_weights(R.CONFIG, seed=2)
    R.write_checkpoint(str(tmp_path), w, tokenizer=False)
    vocab = R.write_tokenizer(str(tmp_path))
    prompt = "hello the"
    ids = transformer.from_pretrained(tmp_path).tokenizer.encode(prompt)
    new = R.greedy(R.rounded(w, "F32"), R.CONFIG, ids, 12)
    want = R.cli_text(vocab, prompt, new)
    r = subprocess.run([cli, "--model", str(tmp_path), "--prompt", prompt,
                        "--max-tokens", "12", "--greedy"],
                       capture_output=True, check=True)
    assert r.stdout == want
