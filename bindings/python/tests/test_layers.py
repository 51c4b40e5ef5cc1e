"""LayerNorm, encoder/decoder layers and stacks, Transformer and Embedding
against torch.nn (float64 references, copied weights)."""

import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

import transformer
from conftest import assert_close, rand, randomize, ref64, t64

B, L, S, D, H, F = 2, 5, 6, 16, 4, 32

ACTIVATIONS = {
    "relu": ("relu", "relu"),
    "gelu": ("gelu", "gelu"),
    # a function, not nn.GELU(): PyTorch 1.13's deepcopy of a decoder layer
    # replaces a module activation with relu (its __setstate__)
    "gelu_tanh": (functools.partial(torch.nn.functional.gelu,
                                    approximate="tanh"), "gelu_tanh"),
}


def seq_first(x, batch_first):
    return x if batch_first else np.ascontiguousarray(x.swapaxes(0, 1))


def bool_block(rng, *shape):
    m = rng.random(shape) < 0.3
    m[..., 0] = False
    return m


def float_block(rng, *shape):
    f = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    f[bool_block(rng, *shape)] = -np.inf
    return f


def causal_float(n):
    return np.triu(np.full((n, n), -np.inf, np.float32), 1)


# ---- LayerNorm -----------------------------------------------------------------

@pytest.mark.parametrize("shape,normalized", [
    ((D,), D), ((B, L, D), D), ((B, L, D), (D,)), ((3, B, L, D), D),
    ((2, 2, B, L, D), D), ((B, L, 4, 6), (4, 6)), ((B, 3, 4, 5), (3, 4, 5))])
def test_layer_norm(shape, normalized, rng):
    tm = randomize(nn.LayerNorm(normalized, eps=1e-4))
    ours = transformer.LayerNorm(normalized, eps=1e-4)
    ours.load_state_dict(tm.state_dict())
    x = rand(rng, *shape) * 3 + 5
    assert_close(ours(x), ref64(tm)(t64(x)))
    assert list(ours.state_dict()) == ["weight", "bias"]
    assert ours.state_dict()["weight"].shape == tuple(tm.weight.shape)
    assert ours.num_parameters() == tm.weight.numel() * 2


def test_layer_norm_without_affine(rng):
    tm = nn.LayerNorm(D, elementwise_affine=False)
    ours = transformer.LayerNorm(D, elementwise_affine=False)
    assert ours.state_dict() == {} and ours.num_parameters() == 0
    ours.load_state_dict(tm.state_dict())
    x = rand(rng, B, L, D)
    assert_close(ours(x), ref64(tm)(t64(x)))


def test_layer_norm_without_bias(rng):
    ours = transformer.LayerNorm(D, bias=False)
    assert list(ours.state_dict()) == ["weight"]
    w = rand(rng, D)
    ours.load_state_dict({"weight": w})
    x = rand(rng, B, D).astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w
    assert_close(ours(x), ref)


def test_layer_norm_repr():
    assert repr(transformer.LayerNorm(8)) == \
        "LayerNorm((8,), eps=1e-05, elementwise_affine=True)"
    assert repr(transformer.LayerNorm(8)) == repr(nn.LayerNorm(8))


def test_layer_norm_shape_error(rng):
    with pytest.raises(transformer.ShapeError):
        transformer.LayerNorm(D)(rand(rng, B, D + 1))


# ---- Encoder layer ---------------------------------------------------------------

def layer_pair(torch_cls, our_cls, activation, norm_first, batch_first, seed):
    """(ours, torch's) layer of the same class with torch's random weights."""
    torch_act, our_act = ACTIVATIONS[activation]
    tm = randomize(torch_cls(
        D, H, F, dropout=0.0, activation=torch_act, batch_first=batch_first,
        norm_first=norm_first), seed)
    ours = our_cls(D, H, F, activation=our_act, batch_first=batch_first,
                   norm_first=norm_first)
    ours.load_state_dict(tm.state_dict())
    return ours, tm


def encoder_pair(activation="relu", norm_first=False, batch_first=True, seed=0):
    return layer_pair(nn.TransformerEncoderLayer,
                      transformer.TransformerEncoderLayer, activation,
                      norm_first, batch_first, seed)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer(norm_first, activation, batch_first, rng):
    ours, tm = encoder_pair(activation, norm_first, batch_first)
    x = seq_first(rand(rng, B, L, D), batch_first)
    kpm = bool_block(rng, B, L)
    mask = float_block(rng, L, L)
    out = ours(x, src_mask=mask, src_key_padding_mask=kpm)
    ref = ref64(tm)(t64(x), src_mask=t64(mask), src_key_padding_mask=t64(kpm))
    assert out.shape == x.shape
    assert_close(out, ref)
    assert list(ours.state_dict()) == list(tm.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in tm.parameters())


@pytest.mark.parametrize("case", ["none", "mask2_bool", "mask3_bool",
                                  "mask3_float", "kpm_bool", "causal",
                                  "causal+kpm"])
def test_encoder_layer_masks(case, rng):
    ours, tm = encoder_pair()
    x = rand(rng, B, L, D)
    mask = kpm = None
    if case == "mask2_bool":
        mask = bool_block(rng, L, L)
    elif case == "mask3_bool":
        mask = bool_block(rng, B * H, L, L)
    elif case == "mask3_float":
        mask = float_block(rng, B * H, L, L)
    if "kpm" in case:
        kpm = bool_block(rng, B, L)
    causal = "causal" in case
    out = ours(x, src_mask=mask, src_key_padding_mask=kpm, is_causal=causal)
    ref_mask = causal_float(L) if causal else mask
    ref = ref64(tm)(t64(x), src_mask=t64(ref_mask),
                    src_key_padding_mask=t64(kpm))
    assert_close(out, ref)


def test_encoder_layer_unbatched(rng):
    ours, tm = encoder_pair(batch_first=False)
    x = rand(rng, L, D)
    mask = bool_block(rng, L, L)
    out = ours(x, src_mask=mask)
    assert out.shape == (L, D)
    assert_close(out, ref64(tm)(t64(x), src_mask=t64(mask)))


def test_encoder_layer_accepts_torch_activation_objects():
    layer = transformer.TransformerEncoderLayer(
        D, H, F, activation=torch.nn.functional.gelu)
    assert layer.activation == "gelu"
    layer = transformer.TransformerEncoderLayer(D, H, F, activation=nn.ReLU())
    assert layer.activation == "relu"
    layer = transformer.TransformerDecoderLayer(
        D, H, F, activation=nn.GELU(approximate="tanh"))
    assert layer.activation == "gelu_tanh"
    with pytest.raises(transformer.UnsupportedError):
        transformer.TransformerEncoderLayer(D, H, F, activation="tanh")


def test_encoder_layer_macs():
    layer = transformer.TransformerEncoderLayer(D, H, F)
    per_seq = 4 * D * D * L + 2 * L * L * D + 2 * L * D * F
    assert layer.forward_macs(B, L) == B * per_seq


# ---- Decoder layer ---------------------------------------------------------------

def decoder_pair(activation="relu", norm_first=False, batch_first=True, seed=0):
    return layer_pair(nn.TransformerDecoderLayer,
                      transformer.TransformerDecoderLayer, activation,
                      norm_first, batch_first, seed)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer(norm_first, activation, batch_first, rng):
    ours, tm = decoder_pair(activation, norm_first, batch_first)
    tgt = seq_first(rand(rng, B, L, D), batch_first)
    mem = seq_first(rand(rng, B, S, D), batch_first)
    tgt_mask = causal_float(L)
    mem_kpm = bool_block(rng, B, S)
    out = ours(tgt, mem, tgt_mask=tgt_mask, memory_key_padding_mask=mem_kpm)
    ref = ref64(tm)(t64(tgt), t64(mem), tgt_mask=t64(tgt_mask),
                    memory_key_padding_mask=t64(mem_kpm))
    assert out.shape == tgt.shape
    assert_close(out, ref)
    assert list(ours.state_dict()) == list(tm.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in tm.parameters())


@pytest.mark.parametrize("case", ["none", "memory_mask2_bool",
                                  "memory_mask3_float", "tgt_kpm",
                                  "tgt_is_causal", "memory_is_causal",
                                  "all"])
def test_decoder_layer_masks(case, rng):
    ours, tm = decoder_pair()
    tgt, mem = rand(rng, B, L, D), rand(rng, B, S, D)
    kw, ref_kw = {}, {}
    if case in ("memory_mask2_bool", "all"):
        kw["memory_mask"] = ref_kw["memory_mask"] = bool_block(rng, L, S)
    if case == "memory_mask3_float":
        kw["memory_mask"] = ref_kw["memory_mask"] = float_block(rng, B * H, L, S)
    if case in ("tgt_kpm", "all"):
        kw["tgt_key_padding_mask"] = ref_kw["tgt_key_padding_mask"] = \
            bool_block(rng, B, L)
    if case in ("tgt_is_causal", "all"):
        kw["tgt_is_causal"] = True
        ref_kw["tgt_mask"] = causal_float(L)
    if case == "all":
        kw["memory_key_padding_mask"] = ref_kw["memory_key_padding_mask"] = \
            bool_block(rng, B, S)
    if case == "memory_is_causal":
        kw["memory_is_causal"] = True
        ref_kw["memory_mask"] = np.triu(np.full((L, S), -np.inf), 1)
    out = ours(tgt, mem, **kw)
    ref = ref64(tm)(t64(tgt), t64(mem),
                    **{k: t64(v) for k, v in ref_kw.items()})
    assert_close(out, ref)


def test_decoder_layer_unbatched(rng):
    ours, tm = decoder_pair(batch_first=False)
    tgt, mem = rand(rng, L, D), rand(rng, S, D)
    out = ours(tgt, mem, tgt_is_causal=True)
    ref = ref64(tm)(t64(tgt), t64(mem), tgt_mask=t64(causal_float(L)))
    assert out.shape == (L, D)
    assert_close(out, ref)


# ---- Stacks ----------------------------------------------------------------------

@pytest.mark.parametrize("with_norm", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_encoder_stack(with_norm, norm_first, batch_first, rng):
    tlayer = nn.TransformerEncoderLayer(D, H, F, dropout=0.0,
                                        batch_first=batch_first,
                                        norm_first=norm_first)
    tm = randomize(nn.TransformerEncoder(
        tlayer, 3, norm=nn.LayerNorm(D) if with_norm else None,
        enable_nested_tensor=False))
    layer = transformer.TransformerEncoderLayer(D, H, F,
                                                batch_first=batch_first,
                                                norm_first=norm_first)
    ours = transformer.TransformerEncoder(
        layer, 3, norm=transformer.LayerNorm(D) if with_norm else None)
    assert list(ours.state_dict()) == list(tm.state_dict())
    ours.load_state_dict(tm.state_dict())
    x = seq_first(rand(rng, B, L, D), batch_first)
    kpm = bool_block(rng, B, L)
    out = ours(x, mask=causal_float(L), src_key_padding_mask=kpm)
    ref = ref64(tm)(t64(x), mask=t64(causal_float(L)),
                    src_key_padding_mask=t64(kpm))
    assert_close(out, ref)
    assert ours.num_parameters() == sum(p.numel() for p in tm.parameters())
    assert ours.forward_macs(B, L) == 3 * layer.forward_macs(B, L)


@pytest.mark.parametrize("with_norm", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack(with_norm, norm_first, rng):
    tlayer = nn.TransformerDecoderLayer(D, H, F, dropout=0.0,
                                        batch_first=True,
                                        norm_first=norm_first)
    tm = randomize(nn.TransformerDecoder(
        tlayer, 2, norm=nn.LayerNorm(D) if with_norm else None))
    ours = transformer.TransformerDecoder(
        transformer.TransformerDecoderLayer(D, H, F, batch_first=True,
                                            norm_first=norm_first),
        2, norm=transformer.LayerNorm(D) if with_norm else None)
    assert list(ours.state_dict()) == list(tm.state_dict())
    ours.load_state_dict(tm.state_dict())
    tgt, mem = rand(rng, B, L, D), rand(rng, B, S, D)
    mem_kpm = bool_block(rng, B, S)
    out = ours(tgt, mem, tgt_is_causal=True, memory_key_padding_mask=mem_kpm)
    ref = ref64(tm)(t64(tgt), t64(mem), tgt_mask=t64(causal_float(L)),
                    memory_key_padding_mask=t64(mem_kpm))
    assert_close(out, ref)


def test_stack_copies_the_template(rng):
    """Like PyTorch's deep copy, every layer starts with the template's
    weights."""
    tlayer = randomize(nn.TransformerEncoderLayer(D, H, F, dropout=0.0,
                                                  batch_first=True))
    tm = nn.TransformerEncoder(tlayer, 2, enable_nested_tensor=False).train()
    layer = transformer.TransformerEncoderLayer(D, H, F, batch_first=True)
    layer.load_state_dict(tlayer.state_dict())
    ours = transformer.TransformerEncoder(layer, 2)
    x = rand(rng, B, L, D)
    assert_close(ours(x), ref64(tm)(t64(x)))
    sd = ours.state_dict()
    for k, v in layer.state_dict().items():
        assert (sd[f"layers.0.{k}"] == v).all() and (sd[f"layers.1.{k}"] == v).all()


def test_stack_keeps_the_norm_object(rng):
    norm = transformer.LayerNorm(D)
    enc = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(D, H, F), 2, norm=norm)
    assert enc.norm is norm
    w = rand(rng, D)
    enc.load_state_dict({"norm.weight": w}, strict=False)
    assert (norm.state_dict()["weight"] == w).all()
    assert "TransformerEncoder(" in repr(enc) and "(norm): LayerNorm" in repr(enc)


# ---- Transformer -----------------------------------------------------------------

@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer(batch_first, norm_first, activation, rng):
    tm = randomize(nn.Transformer(D, H, 2, 2, F, dropout=0.0,
                                  activation=activation,
                                  batch_first=batch_first,
                                  norm_first=norm_first))
    ours = transformer.Transformer(D, H, 2, 2, F, activation=activation,
                                   batch_first=batch_first,
                                   norm_first=norm_first)
    assert list(ours.state_dict()) == list(tm.state_dict())
    ours.load_state_dict(tm.state_dict())
    src = seq_first(rand(rng, B, S, D), batch_first)
    tgt = seq_first(rand(rng, B, L, D), batch_first)
    masks = dict(
        src_mask=float_block(rng, S, S),
        tgt_mask=transformer.Transformer.generate_square_subsequent_mask(L),
        memory_mask=bool_block(rng, L, S),
        src_key_padding_mask=bool_block(rng, B, S),
        tgt_key_padding_mask=bool_block(rng, B, L),
        memory_key_padding_mask=bool_block(rng, B, S))
    out = ours(src, tgt, **masks)
    ref = ref64(tm)(t64(src), t64(tgt), **{k: t64(v) for k, v in masks.items()})
    assert out.shape == tgt.shape
    assert_close(out, ref)
    assert ours.num_parameters() == sum(p.numel() for p in tm.parameters())


def test_transformer_plain_and_causal_flag(rng):
    tm = randomize(nn.Transformer(D, H, 1, 2, F, dropout=0.0))
    ours = transformer.Transformer(D, H, 1, 2, F)
    ours.load_state_dict(tm.state_dict())
    src, tgt = rand(rng, S, B, D), rand(rng, L, B, D)
    assert_close(ours(src, tgt), ref64(tm)(t64(src), t64(tgt)))
    ref = ref64(tm)(t64(src), t64(tgt), tgt_mask=t64(causal_float(L)))
    assert_close(ours(src, tgt, tgt_is_causal=True), ref)
    # unbatched
    src1, tgt1 = rand(rng, S, D), rand(rng, L, D)
    assert_close(ours(src1, tgt1), ref64(tm)(t64(src1), t64(tgt1)))


def test_generate_square_subsequent_mask():
    ours = transformer.Transformer.generate_square_subsequent_mask(5)
    ref = nn.Transformer.generate_square_subsequent_mask(5)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref.numpy())


# ---- Embedding and positions ------------------------------------------------------

@pytest.mark.parametrize("shape", [(7,), (2, 5), (2, 2, 3), ()])
def test_embedding(shape, rng):
    tm = randomize(nn.Embedding(11, D))
    ours = transformer.Embedding(11, D)
    ours.load_state_dict(tm.state_dict())
    ids = rng.integers(0, 11, shape)
    out = ours(ids)
    assert out.shape == shape + (D,)
    assert_close(out, tm(torch.from_numpy(np.asarray(ids))).detach())
    scaled = transformer.Embedding(11, D, scale=True)
    scaled.load_state_dict(tm.state_dict())
    assert_close(scaled(ids), tm(torch.from_numpy(np.asarray(ids))).detach()
                 * math.sqrt(D))
    with pytest.raises(transformer.InvalidArgumentError):
        ours(np.array([0, 11]))
    with pytest.raises(TypeError):
        ours(np.array([0.5]))


def test_sinusoidal_positional_encoding():
    pe = transformer.sinusoidal_positional_encoding(10, 8, offset=3)
    pos = np.arange(3, 13)[:, None]
    i = np.arange(8)[None, :]
    angle = pos / np.power(10000.0, (i // 2 * 2) / 8)
    ref = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    assert pe.shape == (10, 8) and pe.dtype == np.float32
    np.testing.assert_allclose(pe, ref, atol=1e-6)


# ---- Files and parameters ------------------------------------------------------------

def test_safetensors_round_trip(tmp_path, rng):
    tm = randomize(nn.TransformerEncoder(
        nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True), 2,
        norm=nn.LayerNorm(D), enable_nested_tensor=False))
    a = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(D, H, F, batch_first=True), 2,
        norm=transformer.LayerNorm(D))
    a.load_state_dict(tm.state_dict())
    path = tmp_path / "enc.safetensors"
    a.save_safetensors(path, metadata={"note": "test"})
    assert transformer.load_safetensors_metadata(path) == {"note": "test"}
    b = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(D, H, F, batch_first=True), 2,
        norm=transformer.LayerNorm(D))
    b.load_safetensors(str(path))
    x = rand(rng, B, L, D)
    np.testing.assert_array_equal(a(x), b(x))
    loaded = transformer.load_safetensors(path)
    assert sorted(loaded) == sorted(tm.state_dict())
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(loaded[k], v.numpy())


def test_load_state_dict_accepts_numpy_and_reports_keys(rng):
    m = transformer.MultiheadAttention(D, H)
    sd = {k: v + 1 for k, v in m.state_dict().items()}
    result = m.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, sd[k])
    partial = {"out_proj.bias": np.zeros(D), "extra": np.zeros(1)}
    result = m.load_state_dict(partial, strict=False)
    assert "in_proj_weight" in result.missing_keys
    assert result.unexpected_keys == ["extra"]
    assert (m.state_dict()["out_proj.bias"] == 0).all()
