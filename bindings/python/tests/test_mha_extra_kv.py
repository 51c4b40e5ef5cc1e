"""MultiheadAttention(add_bias_kv=True, add_zero_attn=True) and the
static_k / static_v of F.multi_head_attention_forward, against PyTorch 1.13
in float64 (torch.nn.MultiheadAttention and F.multi_head_attention_forward
on the same parameters)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import transformer
from conftest import assert_close, rand, randomize, ref64, rel_err, t64

# Several shapes: (B, L, S, E, H)
SHAPES = [(2, 5, 5, 8, 2), (3, 4, 7, 12, 3), (1, 6, 2, 16, 4)]


def pair(E, H, bias_kv, zero_attn, bias=True, kdim=None, vdim=None, seed=0):
    tm = randomize(torch.nn.MultiheadAttention(
        E, H, dropout=0.0, bias=bias, add_bias_kv=bias_kv,
        add_zero_attn=zero_attn, kdim=kdim, vdim=vdim, batch_first=True),
        seed)
    return transformer.MultiheadAttention.from_torch(tm), ref64(tm)


def masks(rng, kind, B, H, L, S):
    """(ours kwargs, torch kwargs) for one mask case."""
    kpm = attn = None
    if "kpm" in kind:
        kpm = rng.random((B, S)) < 0.3
        kpm[:, 0] = False
    if "attn2" in kind:
        attn = rng.random((L, S)) < 0.3
        attn[:, 0] = False
    if "float" in kind:
        attn = (0.5 * rng.standard_normal((L, S))).astype(np.float32)
        attn[rng.random((L, S)) < 0.2] = -np.inf
        attn[:, 0] = 0.0
    if "causal" in kind:
        c = np.triu(np.ones((L, S), bool), 1)
        attn = c if attn is None else (attn | c if attn.dtype == bool else
                                       np.where(c, -np.inf, attn))
    ours = dict(key_padding_mask=kpm, attn_mask=attn)
    return ours, dict(key_padding_mask=t64(kpm), attn_mask=t64(attn))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("options", [(True, False), (False, True),
                                     (True, True)])
@pytest.mark.parametrize("kind", ["none", "kpm", "attn2", "float",
                                  "kpm+causal"])
def test_extra_rows_match_torch(rng, shape, options, kind):
    B, L, S, E, H = shape
    if kind == "kpm+causal" and S < L:
        pytest.skip("top-left causal with S < L masks whole rows")
    ours, ref = pair(E, H, *options)
    q, kv = rand(rng, B, L, E), rand(rng, B, S, E)
    mo, mt = masks(rng, kind, B, H, L, S)
    for average in (True, False):
        out, w = ours(q, kv, kv, average_attn_weights=average, **mo)
        r_out, r_w = ref(t64(q), t64(kv), t64(kv),
                         average_attn_weights=average, **mt)
        assert w.shape == tuple(r_w.shape)
        assert rel_err(out, r_out) <= 1e-6
        assert rel_err(w, r_w) <= 1e-6


def test_parameters_as_torch():
    ours, ref = pair(8, 2, True, True, kdim=6, vdim=4)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert ours.bias_k.shape == (1, 1, 8)
    np.testing.assert_array_equal(ours.bias_v,
                                  ref.bias_v.detach().float().numpy())
    assert ours.add_zero_attn
    plain = transformer.MultiheadAttention(8, 2)
    assert plain.bias_k is None and plain.bias_v is None
    assert not plain.add_zero_attn


def test_kdim_vdim_4d_mask(rng):
    B, L, S, E, H = 2, 3, 5, 8, 2
    ours, ref = pair(E, H, True, True, kdim=6, vdim=3, seed=4)
    q, k, v = rand(rng, B, L, E), rand(rng, B, S, 6), rand(rng, B, S, 3)
    attn = rng.random((B * H, L, S)) < 0.3
    attn[..., 0] = False
    out, w = ours(q, k, v, attn_mask=attn, average_attn_weights=False)
    r_out, r_w = ref(t64(q), t64(k), t64(v), attn_mask=t64(attn),
                     average_attn_weights=False)
    assert rel_err(out, r_out) <= 1e-6 and rel_err(w, r_w) <= 1e-6


def test_sequence_first_and_unbatched(rng):
    E, H = 8, 2
    tm = randomize(torch.nn.MultiheadAttention(E, H, add_bias_kv=True,
                                               add_zero_attn=True))
    ours, ref = transformer.MultiheadAttention.from_torch(tm), ref64(tm)
    x = rand(rng, 4, 3, E)                 # [L, N, E]
    assert_close(ours(x, x, x)[0], ref(t64(x), t64(x), t64(x))[0], 1e-6)
    u = rand(rng, 4, E)                    # unbatched [L, E]
    out, w = ours(u, u, u)
    r_out, r_w = ref(t64(u), t64(u), t64(u))
    assert w.shape == (4, 6)
    assert rel_err(out, r_out) <= 1e-6 and rel_err(w, r_w) <= 1e-6


def torch_static(ref, q, k, v, sk, sv, zero_attn, **masks):
    """F.multi_head_attention_forward with static_k / static_v ([B*H, S,
    d_k] float64) on ref's parameters, batch first in and out."""
    out, w = F.multi_head_attention_forward(
        t64(q).transpose(0, 1), t64(k).transpose(0, 1),
        t64(v).transpose(0, 1), ref.embed_dim, ref.num_heads,
        ref.in_proj_weight, ref.in_proj_bias, None, None, zero_attn, 0.0,
        ref.out_proj.weight, ref.out_proj.bias, training=True,
        static_k=t64(sk), static_v=t64(sv), average_attn_weights=False,
        **masks)
    return out.transpose(0, 1), w


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("which", ["k", "v", "kv"])
@pytest.mark.parametrize("zero_attn", [False, True])
def test_static_kv_match_torch(rng, shape, which, zero_attn):
    B, L, S, E, H = shape
    dk = E // H
    ours, ref = pair(E, H, False, zero_attn, seed=2)
    q, k, v = rand(rng, B, L, E), rand(rng, B, S, E), rand(rng, B, S, E)
    S_s = S + 2 if which == "kv" else S     # both static: any length
    sk = rand(rng, B * H, S_s, dk) if "k" in which else None
    sv = rand(rng, B * H, S_s, dk) if "v" in which else None
    kpm = rng.random((B, S_s)) < 0.3
    kpm[:, 0] = False
    mo = dict(key_padding_mask=kpm)
    mt = dict(key_padding_mask=t64(kpm))
    if which != "kv":
        attn = (0.5 * rng.standard_normal((L, S_s))).astype(np.float32)
        mo["attn_mask"], mt["attn_mask"] = attn, t64(attn)
    out, w = ours(q, k, v, static_k=sk, static_v=sv,
                  average_attn_weights=False, **mo)
    r_out, r_w = torch_static(ref, q, k, v, sk, sv, zero_attn, **mt)
    assert w.shape == tuple(r_w.shape)
    assert rel_err(out, r_out) <= 1e-6
    assert rel_err(w, r_w) <= 1e-6
    # [B, H, S, d_k] is accepted as well
    if sk is not None:
        out4, _ = ours(q, k, v, static_k=sk.reshape(B, H, S_s, dk),
                       static_v=sv, **mo)
        np.testing.assert_array_equal(out4, out)


def test_refusals(rng):
    ours, _ = pair(8, 2, True, False)
    x = rand(rng, 2, 3, 8)
    with pytest.raises(transformer.InvalidArgumentError, match="add_bias_kv"):
        ours(x, x, x, static_k=rand(rng, 4, 3, 4))
    plain, _ = pair(8, 2, False, False)
    with pytest.raises(transformer.ShapeError):
        plain(x, x, x, static_k=rand(rng, 4, 3, 5))
    with pytest.raises(transformer.InvalidArgumentError, match="add_zero"):
        transformer.MultiheadAttention(8, 2, add_zero_attn=True,
                                       relative="alibi")


def test_reset_parameters_bias_kv():
    """bias_k, bias_v ~ xavier_normal_ on [1, 1, E]: std 1/sqrt(E)."""
    E = 1024
    m = transformer.MultiheadAttention(E, 4, add_bias_kv=True)
    m.reset_parameters(seed=5)
    for name in ("bias_k", "bias_v"):
        a = np.asarray(getattr(m, name), np.float64).ravel()
        assert abs(np.mean(a * a) * E - 1.0) <= 6 * np.sqrt(2.0 / E)
        assert abs(a.mean()) <= 6 / E
