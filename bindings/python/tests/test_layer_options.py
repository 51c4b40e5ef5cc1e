"""Constructor options of the layers against torch.nn (float64 references,
relative error <= 1e-5): activation="silu" (and F.silu, nn.SiLU()), and
bias=False on TransformerEncoderLayer, TransformerDecoderLayer and
Transformer.  PyTorch 1.13 has no bias argument on the layers; its
bias=False (torch >= 2.1) removes every bias, including the LayerNorms',
which is the same computation as a 1.13 layer whose biases are all zero,
so the reference is that."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer
from conftest import assert_close, rand, randomize, ref64, t64

B, L, S, D, H, FF = 2, 5, 6, 16, 4, 32


def zero_biases(module):
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    return module


def without_biases(state_dict):
    return {k: v for k, v in state_dict.items() if not k.endswith("bias")}


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
    assert_close(ours(x), ref64(tm)(t64(x)))


def test_decoder_layer_and_transformer_silu(rng):
    tm = randomize(nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation=F.silu, batch_first=True,
        norm_first=True))
    ours = transformer.TransformerDecoderLayer(
        D, H, FF, activation=nn.SiLU(), batch_first=True, norm_first=True)
    ours.load_state_dict(tm.state_dict())
    x, mem = rand(rng, B, L, D), rand(rng, B, S, D)
    assert_close(ours(x, mem), ref64(tm)(t64(x), t64(mem)))
    tt = randomize(nn.Transformer(D, H, 1, 1, FF, dropout=0.0,
                                  activation=F.silu, batch_first=True))
    ot = transformer.Transformer(D, H, 1, 1, FF, activation="silu",
                                 batch_first=True)
    ot.load_state_dict(tt.state_dict())
    assert_close(ot(mem, x), ref64(tt)(t64(mem), t64(x)))


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
    tm = zero_biases(randomize(nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)))
    ours = transformer.TransformerEncoderLayer(
        D, H, FF, batch_first=True, norm_first=norm_first, bias=False)
    assert list(ours.state_dict()) == list(without_biases(tm.state_dict()))
    assert ours.num_parameters() == sum(
        p.numel() for n, p in tm.named_parameters() if not n.endswith("bias"))
    ours.load_state_dict(without_biases(tm.state_dict()))
    x = rand(rng, B, L, D)
    kpm = np.zeros((B, L), bool)
    kpm[1, -2:] = True
    assert_close(ours(x, src_key_padding_mask=kpm, is_causal=True),
                 ref64(tm)(t64(x), src_mask=t64(np.triu(
                     np.full((L, L), -np.inf), 1)),
                     src_key_padding_mask=t64(kpm)))
    # a state dict with biases is refused, as torch's bias=False layer would
    with pytest.raises(KeyError):
        ours.load_state_dict(tm.state_dict())
    # views: the attention, linear and norm parts have no bias either
    assert "in_proj_bias" not in ours.self_attn.state_dict()
    assert list(ours.linear1.state_dict()) == ["weight"]
    assert list(ours.norm1.state_dict()) == ["weight"]
    # reset_parameters keeps the hidden biases at zero
    ours.reset_parameters(seed=1)
    ours2 = transformer.TransformerEncoderLayer(D, H, FF, batch_first=True,
                                                norm_first=norm_first)
    ours2.load_state_dict({**{k: np.zeros(v.shape) for k, v in
                              ours2.state_dict().items()},
                           **ours.state_dict()})
    assert_close(ours(x), ours2(x).astype(np.float64))


def test_decoder_layer_and_transformer_without_bias(rng):
    tm = zero_biases(randomize(nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, batch_first=True)))
    ours = transformer.TransformerDecoderLayer(D, H, FF, batch_first=True,
                                               bias=False)
    assert list(ours.state_dict()) == list(without_biases(tm.state_dict()))
    ours.load_state_dict(without_biases(tm.state_dict()))
    x, mem = rand(rng, B, L, D), rand(rng, B, S, D)
    assert_close(ours(x, mem), ref64(tm)(t64(x), t64(mem)))

    tt = zero_biases(randomize(nn.Transformer(D, H, 2, 1, FF, dropout=0.0,
                                              batch_first=True)))
    ot = transformer.Transformer(D, H, 2, 1, FF, batch_first=True,
                                 bias=False)
    assert list(ot.state_dict()) == list(without_biases(tt.state_dict()))
    ot.load_state_dict(without_biases(tt.state_dict()))
    assert_close(ot(mem, x), ref64(tt)(t64(mem), t64(x)))
    # a stack of bias=False layers has none either
    enc = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(D, H, FF, bias=False), 2)
    assert not [k for k in enc.state_dict() if k.endswith("bias")]
