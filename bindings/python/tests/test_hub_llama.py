"""Llama checkpoint directories in the Hugging Face hub layout
(tfm_model_load on a directory, hub_model.c) against Llama's forward pass
in plain torch float64 (hub_llama_reference.py): RMSNorm, SwiGLU,
rotary positions on half-split pairs, grouped-query attention, no
biases, untied lm_head."""

import numpy as np
import pytest
import torch

import transformer
import hub_gpt2_reference as G
import hub_llama_reference as R
from conftest import rel_err


@pytest.mark.parametrize("dtype,prefix,shards,tied", [
    ("F32", "model.", 1, False),     # LlamaForCausalLM.save_pretrained
    ("BF16", "model.", 3, False),    # sharded bfloat16, as on the hub
    ("F16", "", 1, False),           # LlamaModel names, unprefixed
    ("F32", "model.", 2, True),      # tied head (Llama 3.2 1B)
])
def test_logits_and_greedy(tmp_path, dtype, prefix, shards, tied):
    config = dict(R.CONFIG, tie_word_embeddings=tied)
    w = R.random_weights(config, seed=3)
    R.write_checkpoint(str(tmp_path), w, config, dtype=dtype, prefix=prefix,
                       shards=shards)
    ref_w = G.rounded(w, dtype)
    model = transformer.from_pretrained(tmp_path)
    assert model.config["tied_embeddings"] == tied
    ids = [R.PROMPT, R.PROMPT[::-1]]
    ref = R.llama_logits(ref_w, config, ids)
    assert rel_err(model.logits(np.array(ids)), ref) <= 1e-5
    assert model.generate(R.PROMPT, max_new_tokens=12) == \
        R.greedy(ref_w, config, R.PROMPT, 12)
    sd = model.state_dict()
    d, kv = 48, 16
    qkv = sd["layers.1.self_attn.in_proj_weight"]
    assert qkv.shape == (d + 2 * kv, d)
    np.testing.assert_array_equal(
        qkv[d:d + kv], ref_w["layers.1.self_attn.k_proj.weight"].float())
    np.testing.assert_array_equal(
        sd["layers.2.linear3.weight"],
        ref_w["layers.2.mlp.up_proj.weight"].float())
    assert "layers.0.norm1.bias" not in sd


def test_bf16_equals_f32_of_the_same_weights(tmp_path):
    """A BF16 shard gives exactly the model of its values written as F32."""
    w = G.rounded(R.random_weights(R.CONFIG, seed=4), "BF16")
    w = {k: v.float() for k, v in w.items()}
    R.write_checkpoint(str(tmp_path / "bf16"), w, dtype="BF16")
    R.write_checkpoint(str(tmp_path / "f32"), w, dtype="F32")
    a = transformer.from_pretrained(tmp_path / "bf16").state_dict()
    b = transformer.from_pretrained(tmp_path / "f32").state_dict()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_save_and_load_keeps_the_architecture(tmp_path):
    """A loaded Llama saved as a model file comes back the same model
    (tfm.rms_norm / tfm.gated metadata)."""
    R.write_checkpoint(str(tmp_path / "hub"), R.random_weights(R.CONFIG),
                       tokenizer=False)
    model = transformer.from_pretrained(tmp_path / "hub")
    model.save(tmp_path / "llama.safetensors")
    again = transformer.load_model(str(tmp_path / "llama.safetensors"))
    np.testing.assert_array_equal(again.logits(R.PROMPT),
                                  model.logits(R.PROMPT))


def _edit(tmp_path, config=None, drop=None, extra=None, reshape=None):
    w = R.random_weights(R.CONFIG)
    if drop:
        del w[drop]
    if reshape:
        w[reshape] = w[reshape][:-1]
    R.write_checkpoint(str(tmp_path), w, config, extra=extra,
                       tokenizer=False)
    return str(tmp_path)


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(config=dict(R.CONFIG, num_key_value_heads=4)),
     transformer.FormatError, "num_key_value_heads"),
    (dict(config=dict(R.CONFIG, num_attention_heads=5)),
     transformer.FormatError, "num_attention_heads"),
    (dict(config=dict(R.CONFIG, rope_scaling={"rope_type": "llama3",
                                              "factor": 8.0})),
     transformer.UnsupportedError, "rope_scaling"),
    (dict(config=dict(R.CONFIG, attention_bias=True)),
     transformer.UnsupportedError, "attention_bias"),
    (dict(config=dict(R.CONFIG, hidden_act="gelu_quick")),
     transformer.UnsupportedError, "hidden_act"),
    (dict(config=dict(R.CONFIG, head_dim=16)),
     transformer.UnsupportedError, "head_dim"),
    (dict(config=dict(R.CONFIG, rope_theta=0.5)),
     transformer.UnsupportedError, "rope_theta"),
    (dict(config=dict(R.CONFIG, rms_norm_eps=1e300)),
     transformer.FormatError, "rms_norm_eps"),
    (dict(config=dict(R.CONFIG, rope_parameters={"rope_type": "llama3",
                                                 "rope_theta": 5e5})),
     transformer.UnsupportedError, "rope_type"),
    (dict(drop="layers.1.mlp.up_proj.weight"), transformer.FormatError,
     "model.layers.1.mlp.up_proj.weight"),
    # The prefix comes from the other tensors: the missing embedding is
    # named as the checkpoint would hold it.
    (dict(drop="embed_tokens.weight"), transformer.FormatError,
     "model.embed_tokens.weight"),
    (dict(reshape="layers.0.self_attn.k_proj.weight"),
     transformer.FormatError, "model.layers.0.self_attn.k_proj.weight"),
    (dict(config=dict(R.CONFIG, tie_word_embeddings=True)),
     None, None),  # an untied head left over is ignored as transformers does
    (dict(extra={"model.layers.3.input_layernorm.weight": torch.ones(48)}),
     transformer.FormatError, "model.layers.3.input_layernorm.weight"),
    (dict(extra={"model.layers.0.self_attn.rotary_emb.inv_freq":
                 torch.ones(4)}), None, None),  # older saves' buffer
])
def test_refused_with_the_name(tmp_path, kwargs, error, words):
    path = _edit(tmp_path, **kwargs)
    if error is None:
        transformer.from_pretrained(path).close()
        return
    with pytest.raises(error, match=words.replace(".", r"\.")):
        transformer.from_pretrained(path)


def test_rms_norm_and_gated_feed_forward_modules():
    """The public modules on their own against torch.autograd in float64:
    RMSNorm (forward and backward) and the gated feed-forward (SwiGLU)."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 12, dtype=torch.float64) * 2 + 1
    g = torch.randn(2, 5, 12, dtype=torch.float64)
    norm = transformer.RMSNorm(12, eps=1e-6)
    w = (torch.rand(12) + 0.5).double()
    norm.load_state_dict({"weight": w.float().numpy()})
    norm.train()
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    y = R._rms(xr, wr, 1e-6)
    y.backward(g)
    assert rel_err(norm(x.float().numpy()), y.detach()) <= 1e-6
    assert rel_err(norm.backward(g.float().numpy()), xr.grad) <= 1e-5
    assert rel_err(norm.grad("weight"), wr.grad) <= 1e-5
    assert transformer.RMSNorm(4).eps == float(np.finfo(np.float32).eps)

    for activation, fn in [("silu", torch.nn.functional.silu),
                           ("gelu", torch.nn.functional.gelu)]:
        for bias in (False, True):
            ff = transformer.GatedFeedForward(12, 20, activation=activation,
                                              bias=bias)
            names = [n for n, _ in ff.named_parameters()]
            want = ["linear1.weight", "linear3.weight"]
            want += ["linear1.bias", "linear3.bias"] if bias else []
            want += ["linear2.weight"] + (["linear2.bias"] if bias else [])
            assert names == want
            sd = {n: torch.randn(*p.shape, dtype=torch.float64) * 0.3
                  for n, p in ff.named_parameters()}
            sd = {n: t.float().double() for n, t in sd.items()}
            ff.load_state_dict({n: t.float().numpy() for n, t in sd.items()})
            ff.train()
            sd = {n: t.requires_grad_(True) for n, t in sd.items()}
            xr = x.clone().requires_grad_(True)

            def lin(name, t):
                out = t @ sd[name + ".weight"].T
                return out + sd[name + ".bias"] if bias else out
            y = lin("linear2", fn(lin("linear1", xr)) * lin("linear3", xr))
            y.backward(g)
            assert rel_err(ff(x.float().numpy()), y.detach()) <= 1e-5
            assert rel_err(ff.backward(g.float().numpy()), xr.grad) <= 1e-5
            for n in sd:
                assert rel_err(ff.grad(n), sd[n].grad) <= 1e-5, n
            assert ff.linear3.out_features == 20


def test_training_gradients_match_autograd(tmp_path):
    """Model.backward of a loaded Llama against torch.autograd through the
    float64 reference: every parameter's gradient (q, k, v as the rows of
    in_proj_weight, gate/up/down as linear1/linear3/linear2, the RMSNorm
    weights) within 1e-4 of the largest magnitude."""
    w = R.random_weights(R.CONFIG, seed=5)
    R.write_checkpoint(str(tmp_path), w, tokenizer=False)
    ours = transformer.from_pretrained(tmp_path)
    ref_w = {k: v.double().requires_grad_(True) for k, v in w.items()}
    ids = [R.PROMPT, R.PROMPT[::-1]]
    targets = torch.randint(0, 263, (2, len(R.PROMPT)),
                            generator=torch.Generator().manual_seed(7))
    logits = R.llama_logits(ref_w, R.CONFIG, ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 263),
                                             targets.reshape(-1))
    (dlogits,) = torch.autograd.grad(loss, logits, retain_graph=True)
    loss.backward()
    ours.train()
    assert rel_err(ours.logits(np.array(ids)), logits.detach()) <= 1e-5
    ours.backward(dlogits.float().numpy())

    def close(name, want):
        got = ours.grad(name)
        err = np.abs(got - want.numpy()).max() / np.abs(want.numpy()).max()
        assert err <= 1e-4, (name, err)

    close("token_embedding.weight", ref_w["embed_tokens.weight"].grad)
    close("lm_head.weight", ref_w["lm_head.weight"].grad)
    close("norm.weight", ref_w["norm.weight"].grad)
    for i in range(R.CONFIG["num_hidden_layers"]):
        p, q = f"layers.{i}.", f"layers.{i}."
        close(p + "self_attn.in_proj_weight", torch.cat(
            [ref_w[q + f"self_attn.{n}_proj.weight"].grad for n in "qkv"]))
        for ours_name, hf in [("self_attn.out_proj.weight", "self_attn.o_proj"),
                              ("norm1.weight", "input_layernorm"),
                              ("norm2.weight", "post_attention_layernorm"),
                              ("linear1.weight", "mlp.gate_proj"),
                              ("linear3.weight", "mlp.up_proj"),
                              ("linear2.weight", "mlp.down_proj")]:
            close(p + ours_name, ref_w[q + hf + ".weight"].grad)


def test_command_line(tmp_path):
    """transformer-generate --model DIR on a Llama directory: its tokenizer
    encodes the prompt, and the text printed is the prompt then the bytes
    of the float64 reference's greedy ids."""
    import os
    import subprocess
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    w = R.random_weights(R.CONFIG, seed=6)
    R.write_checkpoint(str(tmp_path), w, tokenizer=False)
    vocab = G.write_tokenizer(str(tmp_path))
    prompt = "hello the"
    ids = transformer.from_pretrained(tmp_path).tokenizer.encode(prompt)
    new = R.greedy(G.rounded(w, "F32"), R.CONFIG, ids, 12)
    want = G.cli_text(vocab, prompt, new)
    r = subprocess.run([cli, "--model", str(tmp_path), "--prompt", prompt,
                        "--max-tokens", "12", "--greedy"],
                       capture_output=True, check=True)
    assert r.stdout == want
    # the model line on stderr names the blocks as the checkpoint has them
    c = R.CONFIG
    assert (f"model: {c['num_hidden_layers']} layers, d_model "
            f"{c['hidden_size']}, {c['num_attention_heads']} heads, context "
            f"{c['max_position_embeddings']}; blocks: pre-norm RMSNorm (eps "
            f"{c['rms_norm_eps']:g}), gated feed-forward "
            f"{c['intermediate_size']} SiLU, no biases; positions: none; "
            ).encode() in r.stderr


def test_rope_parameters_of_newer_transformers(tmp_path):
    """transformers >= 5 writes rope_parameters {"rope_type": "default",
    "rope_theta": ...} in place of the top-level rope_theta: the same
    model as the top-level key gives (not the 10000 default)."""
    config = {k: v for k, v in R.CONFIG.items()
              if k not in ("rope_theta", "rope_scaling")}
    config["rope_parameters"] = {"rope_type": "default",
                                 "rope_theta": R.CONFIG["rope_theta"]}
    w = R.random_weights(R.CONFIG, seed=8)
    R.write_checkpoint(str(tmp_path), w, config, tokenizer=False)
    model = transformer.from_pretrained(tmp_path)
    assert model.config["attention"]["rope_base"] == R.CONFIG["rope_theta"]
    ref = R.llama_logits(G.rounded(w, "F32"), R.CONFIG, [R.PROMPT])
    assert rel_err(model.logits(np.array([R.PROMPT])), ref) <= 1e-5


def test_copies_keep_the_architecture(tmp_path):
    """pickle, deepcopy and Model(model.config) of a loaded Llama are the
    same model (config carries rms_norm and gated); a copied view of its
    final norm is still an RMSNorm."""
    import copy
    import pickle
    R.write_checkpoint(str(tmp_path), R.random_weights(R.CONFIG, seed=9),
                       tokenizer=False)
    model = transformer.from_pretrained(tmp_path)
    assert model.config["rms_norm"] and model.config["gated"]
    assert model.config["bias"] is False
    want = model.logits(R.PROMPT)
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        np.testing.assert_array_equal(other.logits(R.PROMPT), want)
    rebuilt = transformer.Model(model.config)
    rebuilt.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(rebuilt.logits(R.PROMPT), want)
    assert isinstance(model.norm, transformer.RMSNorm)
    x = np.random.default_rng(0).standard_normal((3, 48)).astype(np.float32)
    np.testing.assert_array_equal(copy.deepcopy(model.norm)(x),
                                  model.norm(x))


def test_layer_views_are_llama_layers(tmp_path):
    """model.layers[i] of a loaded Llama is a TransformerEncoderLayer with
    rms_norm and gated (no biases): its causal forward equals Llama's
    decoder layer in float64 (hub_llama_reference.llama_layer), and so do
    its deepcopy, its pickle and a new layer of the same arguments given
    its state dict."""
    import copy
    import pickle
    w = R.random_weights(R.CONFIG, seed=4)
    R.write_checkpoint(str(tmp_path), w, tokenizer=False)
    model = transformer.from_pretrained(tmp_path)
    layer = model.layers[1]
    assert layer.rms_norm and layer.gated and not layer.bias
    assert "rms_norm=True" in repr(layer) and "gated=True" in repr(layer)
    sd = layer.state_dict()
    assert "linear3.weight" in sd and not any(k.endswith("bias") for k in sd)
    assert isinstance(layer.norm1, transformer.RMSNorm)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 7, R.CONFIG["hidden_size"])).astype(np.float32)
    want = R.llama_layer(G.rounded(w, "F32"), R.CONFIG, 1,
                         torch.from_numpy(x).double()).numpy()
    assert rel_err(layer(x, is_causal=True), want) < 1e-5
    variant = model.config.get("attention") or {}
    fresh = transformer.TransformerEncoderLayer(
        R.CONFIG["hidden_size"], R.CONFIG["num_attention_heads"],
        R.CONFIG["intermediate_size"], dropout=0.0, activation="silu",
        layer_norm_eps=R.CONFIG["rms_norm_eps"], batch_first=True,
        norm_first=True, bias=False, rms_norm=True, gated=True, **variant)
    fresh.load_state_dict(sd)
    fresh.eval()
    for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer)),
                  fresh):
        np.testing.assert_array_equal(other(x, is_causal=True),
                                      layer(x, is_causal=True))
