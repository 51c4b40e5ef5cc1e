"""Attention variants (include/transformer/variants.h) through the Python
bindings: Attention, MultiheadAttention / TransformerEncoderLayer keywords,
sinusoidal layouts and model options.

Every expected value is computed in float64 numpy by variant_reference.py,
from the equations as the papers (and variants.h) give them; nothing
calls the library for a reference.  Learned parameters are random, so that each
term matters.
"""

import copy
import math
import pickle

import numpy as np
import pytest
import torch

import transformer
from transformer import _lowlevel as ll
from conftest import REPO, assert_close
from variant_reference import (alibi_slopes, attention_ref, concat_ref,
                               mha_ref, t5_bucket)

def rnd(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def qkv(rng, B=2, H=4, Hkv=None, L=6, S=None, dk=8, dv=None):
    S = L if S is None else S
    Hkv = H if Hkv is None else Hkv
    dv = dk if dv is None else dv
    return (rnd(rng, B, H, L, dk), rnd(rng, B, Hkv, S, dk),
            rnd(rng, B, Hkv, S, dv))


def random_params(module, rng, scale=0.5):
    """Random values for every parameter of the module (temperatures
    positive); returns them as a dict."""
    params = {}
    for name, a in module.state_dict().items():
        if name.endswith("temperature"):
            params[name] = (1.0 + rng.random(a.shape) * 3).astype(np.float32)
        else:
            params[name] = rnd(rng, *a.shape, scale=scale)
    module.load_state_dict(params)
    return params


# ---- Attention (the functional form) ----------------------------------------

def test_defaults_are_scaled_dot_product(rng):
    q, k, v = qkv(rng)
    attn = transformer.Attention(8, 4)
    assert attn.state_dict() == {}
    cfg = attn.attention_config
    assert cfg["score"] == "scaled_dot" and cfg["rope"] == "none"
    assert cfg["relative"] == "none" and cfg["sparsity"] == "none"
    assert cfg["bidirectional"] is True and cfg["dilation"] == 1
    out, w = attn(q, k, v, need_weights=True)
    ref, ref_w = attention_ref(q, k, v)
    assert_close(out, ref)
    assert_close(w, ref_w)
    assert_close(attn(q, k, v, is_causal=True),
                 attention_ref(q, k, v, causal="top_left")[0])
    # unbatched [H, L, d]
    assert_close(attn(q[1], k[1], v[1]), ref[1])


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_grouped_and_multi_query(rng, n_kv_heads):
    q, k, v = qkv(rng, H=4, Hkv=n_kv_heads, L=5, S=7, dv=3)
    attn = transformer.Attention(8, 4, value_dim=3, n_kv_heads=n_kv_heads)
    assert attn.attention_config["n_kv_heads"] in (n_kv_heads,)
    out, w = attn(q, k, v, need_weights=True)
    ref, ref_w = attention_ref(q, k, v)
    assert_close(out, ref)
    assert_close(w, ref_w)
    # query heads 0 and 1 share key/value head 0 when n_kv_heads = 2
    q2 = q.copy()
    q2[:, 1] = q2[:, 0]
    out2 = attn(q2, k, v)
    np.testing.assert_array_equal(out2[:, 0], out2[:, 1])
    # the functional one-shot form reads n_kv_heads from the key's shape
    assert_close(transformer.attention(q, k, v), ref)


@pytest.mark.parametrize("layout", ["adjacent", "half"])
@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
def test_rope(rng, layout, causal):
    q, k, v = qkv(rng, H=2, L=4 if causal == "bottom_right" else 6, S=6,
                  dk=8)
    attn = transformer.Attention(8, 2, rope=layout)
    got = attn(q, k, v, is_causal=causal or False)
    assert_close(got, attention_ref(q, k, v, causal=causal, rope=layout)[0])
    # partial rotation with another base (GPT-NeoX's rotary_pct)
    part = transformer.Attention(8, 2, rope=layout, rope_dims=4,
                                 rope_base=500.0)
    assert part.attention_config["rope_dims"] == 4
    assert part.attention_config["rope_base"] == 500.0
    assert_close(part(q, k, v, is_causal=causal or False),
                 attention_ref(q, k, v, causal=causal, rope=layout,
                               rope_dims=4, rope_base=500.0)[0])


def test_rope_layouts_differ_and_depend_on_relative_position(rng):
    q, k, v = qkv(rng, H=1, L=5, dk=8)
    adj = transformer.Attention(8, 1, rope="adjacent")
    half = transformer.Attention(8, 1, rope="half")
    assert not np.allclose(adj(q, k, v), half(q, k, v))
    # the same query and key at every position: the logits depend only on
    # j - i, so every row of weights is a shifted copy
    qq = np.repeat(q[:, :, :1], 5, axis=2)
    kk = np.repeat(k[:, :, :1], 5, axis=2)
    _, w = adj(qq, kk, v, need_weights=True)
    _, ref_w = attention_ref(qq, kk, v, rope="adjacent")
    assert_close(w, ref_w)


def test_alibi_six_heads(rng):
    # not a power of two: 4 slopes of the 4-head sequence, then every
    # other one of the 8-head sequence
    assert alibi_slopes(6) == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    q, k, v = qkv(rng, H=6, L=7, dk=4)
    attn = transformer.Attention(4, 6, relative="alibi")
    assert attn.state_dict() == {}
    for causal in (None, "top_left"):
        out, w = attn(q, k, v, is_causal=causal or False, need_weights=True)
        ref, ref_w = attention_ref(q, k, v, causal=causal, relative="alibi")
        assert_close(out, ref)
        assert_close(w, ref_w)
    # a decoding step: 2 new queries at positions 5, 6 of 7
    out = attn(q[:, :, 5:], k, v, is_causal="bottom_right")
    assert_close(out, attention_ref(q[:, :, 5:], k, v, causal="bottom_right",
                                    relative="alibi")[0])


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets(rng, bidirectional):
    cfg = dict(relative="t5", num_buckets=8, max_distance=20,
               bidirectional=bidirectional)
    # distances up to 11: exact buckets, log buckets and the last bucket
    q, k, v = qkv(rng, H=3, L=12, dk=4)
    attn = transformer.Attention(4, 3, **cfg)
    assert attn.state_dict()["relative_attention_bias.weight"].shape == (8, 3)
    params = random_params(attn, rng, scale=1.5)
    got = attn(q, k, v, need_weights=True)
    ref = attention_ref(q, k, v, params, **cfg)
    assert_close(got[0], ref[0])
    assert_close(got[1], ref[1])
    back = attn.attention_config
    assert (back["relative"], back["num_buckets"], back["max_distance"],
            back["bidirectional"]) == ("t5", 8, 20, bidirectional)


def hf_relative_position_bucket(relative_position, bidirectional=True,
                                num_buckets=32, max_distance=128):
    """Hugging Face transformers' T5Attention._relative_position_bucket
    (torch, as published), to check t5_bucket against."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += ((relative_position > 0).to(torch.long)
                             * num_buckets)
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position,
                                       torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large,
        torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position,
                                    relative_position_if_large)
    return relative_buckets


@pytest.mark.parametrize("args", [(32, 128, True), (8, 20, True),
                                  (8, 20, False), (32, 128, False)])
def test_t5_bucket_reference_matches_hugging_face(args):
    num_buckets, max_distance, bidirectional = args
    d = torch.arange(-40, 41)
    hf = hf_relative_position_bucket(d, bidirectional, num_buckets,
                                     max_distance)
    ours = [t5_bucket(int(x), num_buckets, max_distance, bidirectional)
            for x in d]
    assert hf.tolist() == ours


@pytest.mark.parametrize("values", [False, True])
def test_shaw(rng, values):
    cfg = dict(relative="shaw", max_distance=2, relative_values=values)
    q, k, v = qkv(rng, H=2, L=6, dk=4)
    attn = transformer.Attention(4, 2, **cfg)
    names = set(attn.state_dict())
    assert names == ({"relative_key.weight", "relative_value.weight"}
                     if values else {"relative_key.weight"})
    assert attn.state_dict()["relative_key.weight"].shape == (5, 4)
    params = random_params(attn, rng)
    for causal in (None, "top_left"):
        got = attn(q, k, v, is_causal=causal or False)
        assert_close(got, attention_ref(q, k, v, params, causal=causal,
                                        **cfg)[0])


@pytest.mark.parametrize("cfg", [
    dict(sparsity="sliding_window", window=1),
    dict(sparsity="sliding_window", window=2, n_global=1),
    dict(sparsity="dilated", window=2, dilation=2),
    dict(sparsity="bigbird", block_size=2, window=0, n_global=1),
    dict(sparsity="bigbird", block_size=2, window=1, n_global=1,
         n_random_blocks=2, seed=7),
], ids=["window", "window_global", "dilated", "bigbird", "bigbird_random"])
@pytest.mark.parametrize("causal", [None, "top_left"])
def test_sparse_patterns(rng, cfg, causal):
    q, k, v = qkv(rng, H=2, L=12, dk=4)
    attn = transformer.Attention(4, 2, **cfg)
    out, w = attn(q, k, v, is_causal=causal or False, need_weights=True)
    ref, ref_w = attention_ref(q, k, v, causal=causal, **cfg)
    assert_close(out, ref)
    assert_close(w, ref_w)
    # keys outside the pattern get exactly zero weight
    assert np.all(w[ref_w == 0] == 0)


def test_sparse_pattern_combines_with_masks(rng):
    q, k, v = qkv(rng, H=2, L=8, dk=4)
    attn = transformer.Attention(4, 2, sparsity="sliding_window", window=2)
    allow = rng.random((8, 8)) < 0.7
    np.fill_diagonal(allow, True)
    got = attn(q, k, v, attn_mask=allow)
    ref = attention_ref(q, k, v, mask=np.where(allow, 0.0, -np.inf),
                        sparsity="sliding_window", window=2)[0]
    assert_close(got, ref)
    add = rnd(rng, 2, 1, 8, 8)
    got = attn(q, k, v, attn_mask=add, is_causal=True)
    ref = attention_ref(q, k, v, mask=add.astype(np.float64),
                        causal="top_left", sparsity="sliding_window",
                        window=2)[0]
    assert_close(got, ref)


def test_general_score(rng):
    q, k, v = qkv(rng, H=2, L=5, S=6, dk=4)
    attn = transformer.Attention(4, 2, score="general")
    assert attn.state_dict()["score_weight"].shape == (2, 4, 4)
    params = random_params(attn, rng)
    out, w = attn(q, k, v, need_weights=True)
    ref, ref_w = attention_ref(q, k, v, params, score="general")
    assert_close(out, ref)
    assert_close(w, ref_w)
    # W_h = I / sqrt(d_k) is scaled dot-product attention
    eye = np.broadcast_to(np.eye(4, dtype=np.float32) / 2, (2, 4, 4))
    attn.load_state_dict({"score_weight": eye})
    assert_close(attn(q, k, v), attention_ref(q, k, v)[0])


@pytest.mark.parametrize("additive_dim", [None, 3])
def test_additive_score(rng, additive_dim):
    q, k, v = qkv(rng, H=2, L=4, S=5, dk=4)
    attn = transformer.Attention(4, 2, score="additive",
                                 additive_dim=additive_dim)
    d_a = additive_dim or 4
    shapes = {n: a.shape for n, a in attn.state_dict().items()}
    assert shapes == {"additive_query": (2, d_a, 4),
                      "additive_key": (2, d_a, 4), "additive_v": (2, d_a)}
    params = random_params(attn, rng)
    for causal in (None, "top_left"):
        out, w = attn(q, k, v, is_causal=causal or False, need_weights=True)
        ref, ref_w = attention_ref(q, k, v, params, causal=causal,
                                   score="additive")
        assert_close(out, ref)
        assert_close(w, ref_w)


def test_dot_score_and_explicit_scale(rng):
    q, k, v = qkv(rng, H=2, L=5, dk=4)
    assert_close(transformer.Attention(4, 2, score="dot")(q, k, v),
                 attention_ref(q, k, v, score="dot")[0])
    assert_close(transformer.Attention(4, 2, scale=0.3)(q, k, v),
                 attention_ref(q, k, v, scale=0.3)[0])
    assert_close(transformer.Attention(4, 2, score="dot", scale=0.7)(q, k, v),
                 attention_ref(q, k, v, score="dot", scale=0.7)[0])


def test_learned_temperature(rng):
    q, k, v = qkv(rng, H=3, L=5, dk=4)
    attn = transformer.Attention(4, 3, score="learned_temperature")
    # starts at sqrt(d_k): the default scaling
    np.testing.assert_allclose(attn.state_dict()["temperature"], [2, 2, 2])
    assert_close(attn(q, k, v), attention_ref(q, k, v)[0])
    params = random_params(attn, rng)
    out, w = attn(q, k, v, need_weights=True)
    ref, ref_w = attention_ref(q, k, v, params, score="learned_temperature")
    assert_close(out, ref)
    assert_close(w, ref_w)
    # a temperature <= 0 fails the forward pass, the output untouched
    attn.load_state_dict({"temperature": np.array([1, 0, 1], np.float32)})
    out = np.full((2, 3, 5, 4), 7, np.float32)
    with pytest.raises(transformer.InvalidArgumentError):
        ll.tfm_attention_forward(attn._ptr, q, k, v, None, out, None)
    assert np.all(out == 7)
    with pytest.raises(ValueError):
        attn(q, k, v)


def test_attention_module_api(rng):
    attn = transformer.Attention(4, 2, rope="half", relative="shaw",
                                 max_distance=3)
    assert "rope='half'" in repr(attn) and "relative='shaw'" in repr(attn)
    params = random_params(attn, rng)
    q, k, v = qkv(rng, H=2, L=5, dk=4)
    want = attn(q, k, v)
    for other in (copy.deepcopy(attn), pickle.loads(pickle.dumps(attn))):
        assert other.attention_config == attn.attention_config
        np.testing.assert_array_equal(other(q, k, v), want)
    # the config dict works as keywords again
    again = transformer.Attention(4, 2, **attn.attention_config)
    again.load_state_dict(params)
    np.testing.assert_array_equal(again(q, k, v), want)
    assert attn.num_parameters() == 7 * 4
    attn.close()
    with pytest.raises(transformer.ClosedError):
        attn.attention_config


# ---- MultiheadAttention and TransformerEncoderLayer with a variant ----------

@pytest.mark.parametrize("cfg", [
    dict(n_kv_heads=2, rope="half"),
    dict(n_kv_heads=1, rope="adjacent", rope_dims=2),
    dict(relative="alibi"),
    dict(relative="t5", num_buckets=8, max_distance=20),
    dict(relative="shaw", max_distance=2, relative_values=True),
    dict(sparsity="sliding_window", window=2, n_kv_heads=2),
    dict(score="general"),
    dict(score="additive", additive_dim=5),
    dict(score="learned_temperature"),
], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("causal", [False, True])
def test_mha_variants(rng, cfg, causal):
    E, H, B, L = 16, 4, 2, 7
    mha = transformer.MultiheadAttention(E, H, batch_first=True, **cfg)
    n_kv = cfg.get("n_kv_heads", H)
    sd = mha.state_dict()
    assert sd["in_proj_weight"].shape == (E + 2 * n_kv * (E // H), E)
    assert sd["in_proj_bias"].shape == (E + 2 * n_kv * (E // H),)
    params = random_params(mha, rng)
    x = rnd(rng, B, L, E)
    out, w = mha(x, x, x, is_causal=causal, need_weights=True)
    assert w.shape == (B, L, L)
    assert_close(out, mha_ref(x, params, E, H, n_kv, causal, **cfg))
    back = mha.attention_config
    for key, value in cfg.items():
        assert back[key] == value, key
    # batch_first=False: the same numbers in [L, N, E]
    seq = transformer.MultiheadAttention(E, H, **cfg)
    seq.load_state_dict(params)
    out2, _ = seq(x.swapaxes(0, 1), x.swapaxes(0, 1), x.swapaxes(0, 1),
                  is_causal=causal)
    assert_close(out2.swapaxes(0, 1), out)


def test_mha_variant_copies_and_repr(rng):
    mha = transformer.MultiheadAttention(8, 2, batch_first=True,
                                         n_kv_heads=1, rope="half")
    assert "n_kv_heads=1" in repr(mha) and "rope='half'" in repr(mha)
    random_params(mha, rng)
    x = rnd(rng, 1, 4, 8)
    want = mha(x, x, x)[0]
    for other in (copy.deepcopy(mha), pickle.loads(pickle.dumps(mha))):
        assert other.attention_config == mha.attention_config
        np.testing.assert_array_equal(other(x, x, x)[0], want)
    # a torch state_dict of the wrong (full-head) shape is refused whole
    torch_sd = torch.nn.MultiheadAttention(8, 2).state_dict()
    before = mha.state_dict()
    with pytest.raises(transformer.ShapeError):
        mha.load_state_dict(torch_sd)
    for name, a in mha.state_dict().items():
        np.testing.assert_array_equal(a, before[name])
    # a plain module reports the defaults
    plain = transformer.MultiheadAttention(8, 2).attention_config
    assert plain["score"] == "scaled_dot" and plain["rope"] == "none"


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_variant(rng, norm_first):
    E, H, F_, B, L = 16, 4, 24, 2, 6
    cfg = dict(n_kv_heads=2, rope="half", relative="alibi")
    layer = transformer.TransformerEncoderLayer(
        E, H, F_, batch_first=True, norm_first=norm_first, **cfg)
    assert layer.attention_config["rope"] == "half"
    assert layer.state_dict()["self_attn.in_proj_weight"].shape == (32, E)
    params = random_params(layer, rng)
    x = rnd(rng, B, L, E)
    got = layer(x, is_causal=True)

    p64 = {n: np.asarray(a, np.float64) for n, a in params.items()}

    def norm(h, i):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return ((h - mu) / np.sqrt(var + 1e-5) * p64[f"norm{i}.weight"]
                + p64[f"norm{i}.bias"])

    def sa(h):
        attn = {n[len("self_attn."):]: a for n, a in params.items()
                if n.startswith("self_attn.")}
        return mha_ref(h, attn, E, H, 2, True, **cfg)

    def ff(h):
        h = np.maximum(h @ p64["linear1.weight"].T + p64["linear1.bias"], 0)
        return h @ p64["linear2.weight"].T + p64["linear2.bias"]

    h = x.astype(np.float64)
    if norm_first:
        h = h + sa(norm(h, 1))
        h = h + ff(norm(h, 2))
    else:
        h = norm(h + sa(h), 1)
        h = norm(h + ff(h), 2)
    assert_close(got, h)
    with pytest.raises(transformer.UnsupportedError):
        transformer.TransformerEncoder(layer, 2)


# ---- sinusoidal layouts -----------------------------------------------------

@pytest.mark.parametrize("d,offset,base", [(8, 0, 10000.0), (7, 3, 10000.0),
                                           (12, 5, 500.0), (4, 0, 10.0)])
def test_sinusoidal_concat(d, offset, base):
    pe = transformer.sinusoidal_positional_encoding(6, d, offset, base,
                                                    layout="concat")
    assert pe.dtype == np.float32 and pe.shape == (6, d)
    assert_close(pe, concat_ref(6, d, offset, base))
    if d % 2:
        assert np.all(pe[:, -1] == 0)


def test_sinusoidal_interleaved_layout_is_the_default():
    a = transformer.sinusoidal_positional_encoding(5, 8)
    b = transformer.sinusoidal_positional_encoding(5, 8, layout="interleaved")
    np.testing.assert_array_equal(a, b)
    pos = np.arange(5)[:, None]
    freq = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    ref = np.zeros((5, 8))
    ref[:, 0::2] = np.sin(pos * freq)
    ref[:, 1::2] = np.cos(pos * freq)
    assert_close(a, ref)


def test_sinusoidal_layout_errors():
    with pytest.raises(transformer.InvalidArgumentError, match="'concat'"):
        transformer.sinusoidal_positional_encoding(4, 8, layout="halves")
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.sinusoidal_positional_encoding(4, 2, layout="concat")


# ---- models with options ----------------------------------------------------

def variant_model(attention, positional="learned", **extra):
    cfg = dict(vocab_size=11, d_model=16, n_heads=4, d_ff=24, n_layers=2,
               context_length=10, positional=positional, attention=attention)
    cfg.update(extra)
    return transformer.Model(cfg)


def randomize_model(model, rng):
    def value(name, shape):
        if "norm" in name and name.endswith("weight"):
            return 1 + 0.1 * rng.standard_normal(shape)
        if name.endswith("temperature"):
            return 1 + 2 * rng.random(shape)
        return 0.5 * rng.standard_normal(shape)
    model.load_state_dict({n: value(n, a.shape).astype(np.float32)
                           for n, a in model.state_dict().items()})


@pytest.mark.parametrize("attention,positional", [
    (dict(n_kv_heads=2, rope="half"), "none"),
    (dict(relative="alibi", sparsity="sliding_window", window=3), "none"),
    (dict(relative="t5", num_buckets=8, max_distance=20,
          bidirectional=False), "sinusoidal_concat"),
    (dict(score="learned_temperature", relative="shaw", max_distance=2),
     "learned"),
])
def test_model_with_attention_options(rng, tmp_path, attention, positional):
    model = variant_model(attention, positional)
    cfg = model.config
    assert cfg["attention"] == attention
    assert cfg["positional"] == positional
    full = model.attention_config
    for key, value in attention.items():
        assert full[key] == value
    names = model.state_dict()
    assert names["layers.0.self_attn.in_proj_weight"].shape[0] == \
        16 + 2 * 4 * attention.get("n_kv_heads", 4)
    randomize_model(model, rng)
    ids = rng.integers(0, 11, (2, 8))
    logits = model.logits(ids)
    # KV-cache decoding gives the rows of the full pass
    cache = model.kv_cache()
    steps = np.concatenate([cache.decode(ids[0, :3]),
                            cache.decode(ids[0, 3:5]),
                            cache.decode(ids[0, 5:])])
    assert_close(steps, logits[0])
    # the file records the options; loading gives the same model
    path = tmp_path / "variant.safetensors"
    model.save(path)
    again = transformer.load_model(path)
    assert again.config == cfg
    np.testing.assert_array_equal(again.logits(ids), logits)
    # and so do Model(config) and pickling
    fresh = transformer.Model(cfg)
    fresh.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(fresh.logits(ids), logits)
    np.testing.assert_array_equal(
        pickle.loads(pickle.dumps(model)).logits(ids), logits)


def test_model_positional_base(rng):
    a = variant_model({}, "sinusoidal", positional_base=100.0)
    assert a.config["positional_base"] == 100.0
    assert "attention" not in a.config
    b = variant_model({}, "sinusoidal")
    assert "positional_base" not in b.config
    state = {n: (0.5 * rng.standard_normal(v.shape)).astype(np.float32)
             for n, v in a.state_dict().items()}
    a.load_state_dict(state)
    b.load_state_dict(state)
    ids = np.arange(6)[None]
    assert not np.allclose(a.logits(ids), b.logits(ids))


def test_encoder_decoder_takes_only_the_default_attention():
    cfg = dict(architecture="encoder_decoder", vocab_size=7, d_model=8,
               n_heads=2, context_length=6)
    transformer.Model(cfg, attention={})
    before = transformer.live_handles("module")
    with pytest.raises(transformer.UnsupportedError):
        transformer.Model(cfg, attention={"rope": "half"})
    assert transformer.live_handles("module") == before


VARIANT_MODELS = REPO / "tests" / "models" / "variants"


@pytest.mark.parametrize("name", sorted(
    p.name[:-len(".ref.safetensors")]
    for p in VARIANT_MODELS.glob("*.ref.safetensors")) or ["(none)"])
def test_variant_model_files(name):
    """The C suite's model files (tools/make_variant_models.py, float64
    PyTorch written from the papers): their metadata select the variant,
    and the Python bindings give the recorded logits."""
    if name == "(none)":
        pytest.skip("no tests/models/variants in this tree")
    model = transformer.load_model(VARIANT_MODELS / f"{name}.safetensors")
    ref = transformer.load_safetensors(
        VARIANT_MODELS / f"{name}.ref.safetensors")
    ids = ref["ids"].astype(np.int32)
    assert_close(model.logits(ids), ref["logits"])


# ---- errors -----------------------------------------------------------------

@pytest.mark.parametrize("kwargs,allowed", [
    (dict(score="bahdanau"), "'additive'"),
    (dict(rope="neox"), "'half'"),
    (dict(relative="relative"), "'alibi'"),
    (dict(sparsity="local"), "'sliding_window'"),
])
def test_unknown_option_strings(kwargs, allowed):
    before = transformer.live_handles("module")
    for make in (lambda: transformer.Attention(8, 2, **kwargs),
                 lambda: transformer.MultiheadAttention(8, 2, **kwargs),
                 lambda: transformer.TransformerEncoderLayer(8, 2, **kwargs),
                 lambda: variant_model(kwargs)):
        with pytest.raises(ValueError, match=allowed) as info:
            make()
        assert isinstance(info.value, transformer.InvalidArgumentError)
        assert repr(next(iter(kwargs.values()))) in str(info.value)
    assert transformer.live_handles("module") == before


def test_option_strings_are_case_insensitive(rng):
    a = transformer.Attention(4, 2, rope="HALF", relative="ALiBi")
    assert a.attention_config["rope"] == "half"
    assert a.attention_config["relative"] == "alibi"


def test_bad_keyword_types():
    with pytest.raises(TypeError, match="rope_dim"):
        transformer.Attention(8, 2, rope_dim=4)
    with pytest.raises(TypeError, match="score"):
        transformer.Attention(8, 2, score=2)
    with pytest.raises(TypeError, match="window"):
        transformer.Attention(8, 2, sparsity="sliding_window", window=1.5)
    # Strings and bools are not numbers here, and only bools (or 0 / 1)
    # are flags: bool("no") would silently be True.
    with pytest.raises(TypeError, match="relative_values"):
        transformer.Attention(8, 2, relative="shaw", max_distance=2,
                              relative_values="no")
    with pytest.raises(TypeError, match="bidirectional"):
        transformer.Attention(8, 2, relative="t5", bidirectional=2)
    with pytest.raises(TypeError, match="window"):
        transformer.Attention(8, 2, sparsity="sliding_window", window=True)
    with pytest.raises(TypeError, match="scale"):
        transformer.Attention(8, 2, score="dot", scale="1")
    a = transformer.Attention(8, 2, relative="shaw", max_distance=2,
                              relative_values=1)
    assert a.attention_config["relative_values"] is True
    with pytest.raises(TypeError, match="attention"):
        variant_model("rope")
    with pytest.raises(TypeError, match="unexpected keyword"):
        variant_model({"ropes": "half"})
    with pytest.raises(transformer.InvalidArgumentError, match="is_causal"):
        transformer.Attention(4, 1)(*qkv(np.random.default_rng(0), H=1,
                                         dk=4), is_causal="upper")


@pytest.mark.parametrize("kwargs", [
    dict(n_kv_heads=3),                          # does not divide 4 heads
    dict(rope="half", rope_dims=3),              # odd
    dict(rope="half", rope_dims=10),             # wider than d_k = 8
    dict(relative="shaw"),                       # no max_distance
    dict(scale=-1.0),
    dict(scale=float("nan")),
    dict(score="learned_temperature", scale=0.5),
    dict(sparsity="sliding_window", window=-1),
    dict(sparsity="dilated", window=2, dilation=0),
    dict(sparsity="bigbird", window=1, block_size=0),
    dict(sparsity="bigbird", window=1, block_size=2, n_random_blocks=-1),
])
def test_invalid_configs(kwargs):
    before = transformer.live_handles("module")
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.Attention(8, 4, **kwargs)
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.MultiheadAttention(32, 4, **kwargs)
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.TransformerEncoderLayer(32, 4, 16, **kwargs)
    with pytest.raises(ValueError):
        transformer.Model(dict(vocab_size=5, d_model=32, n_heads=4,
                               context_length=4, attention=kwargs))
    assert transformer.live_handles("module") == before


@pytest.mark.parametrize("scale", [1e39, -1e39, 3.5e38])
def test_scale_beyond_float_range(scale):
    # Used to escape as SWIG's bare OverflowError ("in method
    # 'tfm_attention_config_scale_set'"); now the library's error type.
    before = transformer.live_handles("module")
    with pytest.raises(transformer.InvalidArgumentError, match="float range"):
        transformer.Attention(8, 4, scale=scale)
    with pytest.raises(transformer.InvalidArgumentError, match="float range"):
        transformer.Model(dict(vocab_size=5, d_model=32, n_heads=4,
                               context_length=4, attention=dict(scale=scale)))
    assert transformer.live_handles("module") == before


def test_huge_sparse_sizes(rng):
    # Sizes up to 2^63-1 are valid and mean "every key" (they overflowed
    # the kernel's position arithmetic: a sliding window of 2^63-1 gave
    # zeros); compared with float64 dense attention.
    q, k, v = (rnd(rng, 1, 2, 5, 4) for _ in range(3))
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) / 2.0
    w = np.exp(s - s.max(-1, keepdims=True))
    ref = (w / w.sum(-1, keepdims=True)) @ v.astype(np.float64)
    big = 2**63 - 1
    for kw in (dict(sparsity="sliding_window", window=big, n_global=big),
               dict(sparsity="dilated", window=big // 2, dilation=1),
               dict(sparsity="bigbird", block_size=big, window=big,
                    n_global=big, n_random_blocks=4096)):
        assert_close(transformer.Attention(4, 2, **kw)(q, k, v), ref)
    with pytest.raises(transformer.InvalidArgumentError,
                       match="n_random_blocks"):
        transformer.Attention(4, 2, sparsity="bigbird", block_size=1,
                              n_random_blocks=4097)


def test_shape_errors(rng):
    attn = transformer.Attention(8, 4, n_kv_heads=2)
    q, k, v = qkv(rng, H=4, Hkv=4)
    with pytest.raises(transformer.ShapeError):
        attn(q, k, v)                       # 4 key heads, the module has 2
    with pytest.raises(transformer.ShapeError):
        attn(q[0, 0], k[0, 0], v[0, 0])     # 2-D
    norm = transformer.LayerNorm(4)
    with pytest.raises(transformer.WrongKindError):
        ll.tfm_attention_get_config(norm._ptr, ll.tfm_attention_config())


def test_low_level_struct_defaults():
    c = ll.tfm_attention_config()
    assert c.struct_size > 0 and c.dilation == 1 and c.bidirectional == 1
    assert c.score == ll.TFM_SCORE_SCALED_DOT
    o = ll.tfm_model_options()
    assert o.positional_base in (0.0, 10000.0)
    assert o.attention.dilation == 1
    assert ll.TFM_MODULE_ATTENTION == 14
    assert ll.TFM_POSITIONAL_SINUSOIDAL_CONCAT == 3
