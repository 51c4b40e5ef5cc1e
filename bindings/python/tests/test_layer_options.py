"""Constructor options of the layers against torch.nn (float64 references):
activation="silu" (and F.silu, nn.SiLU()), relative error <= 1e-5, and
bias=False on TransformerEncoderLayer, TransformerDecoderLayer and
Transformer, relative error <= 1e-6.

PyTorch 1.13 has no bias argument on the layers.  Torch 2.x's bias=False
builds every part without its bias: nn.Linear(bias=False) and the
attention's in_proj_bias / out_proj.bias registered as None, and
nn.LayerNorm(bias=False), whose bias is None too.  The reference here is
that module built by hand: a 1.13 layer whose bias parameters are
re-registered as None (drop_biases below).  Its forward then runs the same
torch ops with no bias (F.linear(x, w, None), F.layer_norm(x, shape, w,
None), F.multi_head_attention_forward with in_proj_bias None), its
state_dict has 2.x's keys (no "*.bias"), and from_torch sees `bias is
None` as it would on a 2.x module.  The reference runs in training mode
with dropout 0 (ref64), as 1.13's eval fast path needs the biases."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer
from conftest import assert_close, rand, randomize, ref64, t64

B, L, S, D, H, FF = 2, 5, 6, 16, 4, 32


def drop_biases(module):
    """The torch module without its biases (see the top): every bias
    parameter of every sub-module becomes None, as torch 2.x's
    bias=False builds it."""
    for mod in module.modules():
        for name in ("bias", "in_proj_bias"):
            if isinstance(getattr(mod, name, None), nn.Parameter):
                mod.register_parameter(name, None)
    return module


def no_bias_keys(module):
    keys = list(module.state_dict())
    assert keys and not [k for k in keys if "bias" in k]
    return keys


@pytest.mark.parametrize("activation", ["silu", F.silu, nn.SiLU()],
                         ids=["str", "F.silu", "nn.SiLU"])
def test_encoder_layer_silu(activation, rng):
    tm = randomize(nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=F.silu, batch_first=True))
    ours = transformer.TransformerEncoderLayer(
        D, H, FF, activation=activation, batch_first=True)
    assert ours.activation == "silu"
    ours.load_state_dict(tm.state_dict())
    x = rand(rng, B, L, D)
    assert_close(ours(x), ref64(tm)(t64(x)), 1e-6)


def test_decoder_layer_and_transformer_silu(rng):
    tm = randomize(nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation=F.silu, batch_first=True,
        norm_first=True))
    ours = transformer.TransformerDecoderLayer(
        D, H, FF, activation=nn.SiLU(), batch_first=True, norm_first=True)
    ours.load_state_dict(tm.state_dict())
    x, mem = rand(rng, B, L, D), rand(rng, B, S, D)
    assert_close(ours(x, mem), ref64(tm)(t64(x), t64(mem)), 1e-6)
    tt = randomize(nn.Transformer(D, H, 1, 1, FF, dropout=0.0,
                                  activation=F.silu, batch_first=True))
    ot = transformer.Transformer(D, H, 1, 1, FF, activation="silu",
                                 batch_first=True)
    ot.load_state_dict(tt.state_dict())
    assert_close(ot(mem, x), ref64(tt)(t64(mem), t64(x)), 1e-6)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_silu_in_the_feed_forward(scale):
    """Pre-norm layer whose attention sees zeros (norm1.weight = 0, zero
    biases: its output is 0) and whose feed-forward is silu between two
    identities: out = x + silu(scale * norm(x)); scale 100 drives
    exp(-x) past float's range (silu(-300) = -0, not NaN)."""
    lay = transformer.TransformerEncoderLayer(10, 1, 10, activation="silu",
                                              batch_first=True,
                                              norm_first=True)
    sd = {k: np.zeros(v.shape, np.float32)
          for k, v in lay.state_dict().items()}
    sd["linear1.weight"] = np.eye(10, dtype=np.float32)
    sd["linear2.weight"] = np.eye(10, dtype=np.float32)
    sd["norm2.weight"] = np.full(10, scale, np.float32)
    lay.load_state_dict(sd)
    x = np.array([-1e4, -100, -88, -20, -1, 0, 1e-3, 1, 30, 1e4], np.float32)
    out = lay(x[None, None, :])[0, 0].astype(np.float64)
    xd = x.astype(np.float64)
    n = scale * (xd - xd.mean()) / np.sqrt(xd.var() + 1e-5)
    want = xd + torch.nn.functional.silu(torch.from_numpy(n)).numpy()
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_without_bias(norm_first, rng):
    tm = drop_biases(randomize(nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)))
    ours = transformer.TransformerEncoderLayer(
        D, H, FF, batch_first=True, norm_first=norm_first, bias=False)
    assert list(ours.state_dict()) == no_bias_keys(tm)
    assert ours.num_parameters() == sum(p.numel() for p in tm.parameters())
    ours.load_state_dict(tm.state_dict())
    x = rand(rng, B, L, D)
    kpm = np.zeros((B, L), bool)
    kpm[1, -2:] = True
    assert_close(ours(x, src_key_padding_mask=kpm, is_causal=True),
                 ref64(tm)(t64(x), src_mask=t64(np.triu(
                     np.full((L, L), -np.inf), 1)),
                     src_key_padding_mask=t64(kpm)), 1e-6)
    # a state dict with biases is refused, as torch's bias=False layer would
    with_bias = randomize(nn.TransformerEncoderLayer(D, H, FF,
                                                     batch_first=True))
    with pytest.raises(KeyError):
        ours.load_state_dict(with_bias.state_dict())
    # views: the attention, linear and norm parts have no bias either
    assert list(ours.self_attn.state_dict()) == ["in_proj_weight",
                                                 "out_proj.weight"]
    assert list(ours.linear1.state_dict()) == ["weight"]
    assert list(ours.norm1.state_dict()) == ["weight"]
    # reset_parameters draws the weights and still has no bias
    ours.reset_parameters(seed=1)
    assert list(ours.state_dict()) == no_bias_keys(tm)
    tm.load_state_dict({k: torch.from_numpy(v)
                        for k, v in ours.state_dict().items()})
    assert_close(ours(x), ref64(tm)(t64(x)), 1e-6)


def test_gradients_without_bias():
    """Training mode (named_grads) of a bias=False layer: one gradient per
    parameter of torch's bias-free layer, same names and shapes, zero."""
    ours = transformer.Transformer(D, H, 1, 1, FF, bias=False).train()
    tt = drop_biases(nn.Transformer(D, H, 1, 1, FF))
    grads = ours.named_grads()
    assert list(grads) == [n for n, _ in tt.named_parameters()]
    for name, p in tt.named_parameters():
        assert grads[name].shape == tuple(p.shape) and not grads[name].any()


def test_from_torch_without_bias(rng):
    """from_torch of a bias-free torch module (as torch 2.x's bias=False
    builds it) gives a bias=False module with its weights."""
    tm = drop_biases(randomize(nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, activation=F.silu)))
    ours = transformer.TransformerEncoderLayer.from_torch(tm)
    assert ours.bias is False and ours.activation == "silu"
    x = rand(rng, B, L, D)
    assert_close(ours(x), ref64(tm)(t64(x)), 1e-6)
    tt = drop_biases(randomize(nn.Transformer(D, H, 1, 2, FF, dropout=0.0,
                                              batch_first=True)))
    ot = transformer.Transformer.from_torch(tt)
    assert list(ot.state_dict()) == no_bias_keys(tt)
    mem = rand(rng, B, S, D)
    assert_close(ot(mem, x), ref64(tt)(t64(mem), t64(x)), 1e-6)
    tn = drop_biases(randomize(nn.LayerNorm(D)))
    on = transformer.LayerNorm.from_torch(tn)
    assert list(on.state_dict()) == ["weight"]
    assert_close(on(x), ref64(tn)(t64(x)), 1e-6)


def test_decoder_layer_and_transformer_without_bias(rng):
    tm = drop_biases(randomize(nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, activation="gelu",
        norm_first=True)))
    ours = transformer.TransformerDecoderLayer(
        D, H, FF, batch_first=True, activation="gelu", norm_first=True,
        bias=False)
    assert list(ours.state_dict()) == no_bias_keys(tm)
    ours.load_state_dict(tm.state_dict())
    x, mem = rand(rng, B, L, D), rand(rng, B, S, D)
    mpad = np.zeros((B, S), bool)
    mpad[0, -1] = True
    assert_close(ours(x, mem, tgt_is_causal=True,
                      memory_key_padding_mask=mpad),
                 ref64(tm)(t64(x), t64(mem), tgt_mask=t64(np.triu(
                     np.full((L, L), -np.inf), 1)),
                     memory_key_padding_mask=t64(mpad)), 1e-6)
    assert list(ours.multihead_attn.state_dict()) == ["in_proj_weight",
                                                      "out_proj.weight"]

    tt = drop_biases(randomize(nn.Transformer(D, H, 2, 1, FF, dropout=0.0,
                                              batch_first=True)))
    ot = transformer.Transformer(D, H, 2, 1, FF, batch_first=True,
                                 bias=False)
    assert list(ot.state_dict()) == no_bias_keys(tt)
    assert ot.num_parameters() == sum(p.numel() for p in tt.parameters())
    ot.load_state_dict(tt.state_dict())
    assert_close(ot(mem, x), ref64(tt)(t64(mem), t64(x)), 1e-6)
    # the encoder / decoder views and their final norms
    assert list(ot.encoder.norm.state_dict()) == ["weight"]
    assert_close(ot.encoder(mem), ref64(tt).encoder(t64(mem)), 1e-6)

    # stacks of bias=False layers have none either, final norm included
    enc = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(D, H, FF, bias=False,
                                            batch_first=True), 2,
        norm=transformer.LayerNorm(D, bias=False))
    te = nn.TransformerEncoder(drop_biases(randomize(
        nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True))),
        2, norm=drop_biases(randomize(nn.LayerNorm(D))))
    assert list(enc.state_dict()) == no_bias_keys(te)
    enc.load_state_dict(te.state_dict())
    assert_close(enc(mem), ref64(te)(t64(mem)), 1e-6)
    dec = transformer.TransformerDecoder(
        transformer.TransformerDecoderLayer(D, H, FF, bias=False), 2)
    assert not [k for k in dec.state_dict() if "bias" in k]


def test_encoder_layer_without_bias_keeps_its_variant():
    """bias=False with an attention variant (tfm_layer_options.attention):
    multi-query self-attention, in_proj_weight [D + 2 * D / H, D]."""
    ours = transformer.TransformerEncoderLayer(D, H, FF, bias=False,
                                               n_kv_heads=1)
    assert ours.attention_config["n_kv_heads"] == 1
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes["self_attn.in_proj_weight"] == (D + 2 * (D // H), D)
    assert not [k for k in shapes if "bias" in k]
