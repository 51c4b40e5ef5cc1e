"""MultiheadAttention.backward against torch.autograd (torch 1.13): the
same weights, inputs and grad_output; our (grad_query, grad_key,
grad_value) and every parameter gradient must equal torch's .grad
(float32; 2e-5 relative to the largest magnitude).

Variants torch's nn.MultiheadAttention lacks (grouped-query heads, ALiBi,
a sliding window) are compared with the same attention written in torch
ops from the definitions in variants.h (ALiBi: logits - m_h |j - i|, the
slopes of Press et al. 2022; GQA: query head h reads key/value head
h // (H / H_kv); sliding window w: key j visible from query i when
|j - i| <= w... restricted here to the causal case, j in [i - w, i]) and
differentiated by autograd."""

import math

import numpy as np
import pytest
import torch

import transformer
from grad_check import close, load
from variant_reference import alibi_slopes


def check_params(ours, ref):
    grads = ours.named_grads()
    for name, p in ref.named_parameters():
        close(grads[name], p.grad)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masks", ["none", "causal", "key_padding",
                                   "bool_attn", "float_attn"])
def test_self_attention(bias, masks):
    torch.manual_seed(0)
    E, H, B, L = 16, 4, 2, 6
    ref = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True)
    ours = transformer.MultiheadAttention(E, H, bias=bias, batch_first=True)
    load(ours, ref)
    ours.train()
    x = torch.randn(B, L, E, requires_grad=True)
    kw = {}
    if masks == "causal":
        kw["attn_mask"] = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    elif masks == "key_padding":
        kpm = torch.zeros(B, L, dtype=torch.bool)
        kpm[0, -2:] = True
        kw["key_padding_mask"] = kpm
    elif masks == "bool_attn":
        am = torch.rand(L, L) < 0.3
        am.fill_diagonal_(False)            # no fully masked row
        kw["attn_mask"] = am
    elif masks == "float_attn":
        kw["attn_mask"] = torch.randn(L, L)
    g = torch.randn(B, L, E)
    out_ref, _ = ref(x, x, x, need_weights=False, **kw)
    out_ref.backward(g)
    xn = x.detach().numpy()
    ours_kw = {k: v.numpy() for k, v in kw.items()}
    out, _ = ours(xn, xn, xn, need_weights=False, **ours_kw)
    close(out, out_ref)
    gq, gk, gv = ours.backward(g.numpy())
    close(gq + gk + gv, x.grad)
    check_params(ours, ref)


def test_cross_attention_kdim_vdim_seq_first():
    torch.manual_seed(1)
    E, H, B, L, S = 12, 3, 2, 4, 7
    ref = torch.nn.MultiheadAttention(E, H, kdim=5, vdim=9)
    ours = transformer.MultiheadAttention(E, H, kdim=5, vdim=9)
    load(ours, ref)
    ours.train()
    q = torch.randn(L, B, E, requires_grad=True)
    k = torch.randn(S, B, 5, requires_grad=True)
    v = torch.randn(S, B, 9, requires_grad=True)
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[1, :3] = True
    g = torch.randn(L, B, E)
    out_ref, _ = ref(q, k, v, key_padding_mask=kpm)
    out_ref.backward(g)
    ours(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
         key_padding_mask=kpm.numpy())
    gq, gk, gv = ours.backward(g.numpy())
    assert gq.shape == (L, B, E) and gk.shape == (S, B, 5)
    close(gq, q.grad)
    close(gk, k.grad)
    close(gv, v.grad)
    check_params(ours, ref)
    # a second backward accumulates
    ours.backward(g.numpy())
    close(ours.grad("q_proj_weight"), 2 * ref.q_proj_weight.grad)


def test_fully_masked_row_gives_zero_not_nan():
    # torch gives NaN for a query whose keys are all masked; ours gives a
    # zero attention output there (attention.h), so that row's output is
    # out_proj.bias and its query gradient is exactly zero.
    E, H, L = 8, 2, 3
    ours = transformer.MultiheadAttention(E, H, batch_first=True).train()
    x = np.random.default_rng(0).standard_normal((1, L, E)).astype(np.float32)
    am = np.zeros((L, L), bool)
    am[1, :] = True
    ours(x, x, x, attn_mask=am)
    gq, gk, gv = ours.backward(np.ones((1, L, E), np.float32))
    assert np.isfinite(gq).all() and np.isfinite(gk).all()
    np.testing.assert_array_equal(gq[0, 1], 0.0)
    assert np.abs(gq[0, 0]).max() > 0


def torch_rope(x, layout, base=10000.0, dims=None):
    """RoFormer (Su et al. 2021) eq. (34) in torch ops on x [B, H, L, d]:
    pair i of position p turns by p * base^(-2i/dims); pairs (2i, 2i+1)
    ("adjacent") or (i, i + dims/2) ("half"); columns past dims unrotated."""
    d = x.shape[-1]
    dims = dims or d
    half = dims // 2
    pos = torch.arange(x.shape[2], dtype=torch.float64)[:, None]
    theta = pos * base ** (-2.0 * torch.arange(half, dtype=torch.float64)
                           / dims)
    cos, sin = theta.cos().float(), theta.sin().float()
    if layout == "adjacent":
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        ra, rb = a * cos - b * sin, a * sin + b * cos
        rot = torch.stack([ra, rb], dim=-1).flatten(-2)
    else:
        a, b = x[..., :half], x[..., half:dims]
        rot = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return torch.cat([rot, x[..., dims:]], dim=-1)


def torch_variant_mha(x, sd, E, H, n_kv, alibi=False, window=None,
                      rope=None, rope_dims=None):
    """Self-attention with packed [W_q; W_k; W_v] of n_kv key/value heads,
    causal, in torch ops (autograd differentiates it)."""
    B, L, _ = x.shape
    dk = E // H
    kv = n_kv * dk
    w, b = sd["in_proj_weight"], sd["in_proj_bias"]
    q = (x @ w[:E].T + b[:E]).view(B, L, H, dk).transpose(1, 2)
    k = (x @ w[E:E + kv].T + b[E:E + kv]).view(B, L, n_kv, dk).transpose(1, 2)
    v = (x @ w[E + kv:].T + b[E + kv:]).view(B, L, n_kv, dk).transpose(1, 2)
    if rope:
        q, k = torch_rope(q, rope, dims=rope_dims), torch_rope(k, rope,
                                                              dims=rope_dims)
    k = k.repeat_interleave(H // n_kv, dim=1)
    v = v.repeat_interleave(H // n_kv, dim=1)
    if "temperature" in sd:       # learned temperature: q . k / tau_h
        logits = q @ k.transpose(-1, -2) / sd["temperature"][None, :, None,
                                                             None]
    elif "score_weight" in sd:    # Luong's general score: q^T W_h k
        qw = torch.einsum("bhid,hde->bhie", q, sd["score_weight"])
        logits = qw @ k.transpose(-1, -2)
    else:
        logits = q @ k.transpose(-1, -2) / math.sqrt(dk)
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    if alibi:
        m = torch.tensor(alibi_slopes(H))[:, None, None]
        logits = logits - m * (j - i).abs()
    visible = j <= i
    if window is not None:
        visible = visible & (i - j <= window)
    logits = logits.masked_fill(~visible, float("-inf"))
    o = torch.softmax(logits, -1) @ v
    o = o.transpose(1, 2).reshape(B, L, E)
    return o @ sd["out_proj.weight"].T + sd["out_proj.bias"]


@pytest.mark.parametrize("cfg", [dict(n_kv_heads=2), dict(n_kv_heads=1),
                                 dict(relative="alibi"),
                                 dict(sparsity="sliding_window", window=2,
                                      n_kv_heads=2),
                                 dict(rope="half"), dict(rope="adjacent"),
                                 dict(rope="half", rope_dims=2, n_kv_heads=2),
                                 dict(rope="adjacent", relative="alibi"),
                                 dict(score="learned_temperature"),
                                 dict(score="learned_temperature",
                                      rope="half", n_kv_heads=2),
                                 dict(score="general"),
                                 dict(score="general", rope="adjacent",
                                      n_kv_heads=2)],
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in
                                                c.items()))
def test_variants_against_torch_ops(cfg):
    torch.manual_seed(2)
    E, H, B, L = 16, 4, 2, 7
    n_kv = cfg.get("n_kv_heads", H)
    ours = transformer.MultiheadAttention(E, H, batch_first=True, **cfg)
    sd = {n: torch.randn(*a.shape) * 0.5 for n, a in ours.state_dict().items()}
    if "temperature" in sd:        # positive, around sqrt(d_k) = 2
        sd["temperature"] = torch.rand(H) * 2 + 1
    ours.load_state_dict({n: t.numpy() for n, t in sd.items()})
    for t in sd.values():
        t.requires_grad_()
    ours.train()
    x = torch.randn(B, L, E, requires_grad=True)
    g = torch.randn(B, L, E)
    ref = torch_variant_mha(x, sd, E, H, n_kv, cfg.get("relative") == "alibi",
                            cfg.get("window"), cfg.get("rope"),
                            cfg.get("rope_dims"))
    ref.backward(g)
    xn = x.detach().numpy()
    out, _ = ours(xn, xn, xn, is_causal=True, need_weights=False)
    close(out, ref)
    gq, gk, gv = ours.backward(g.numpy())
    close(gq + gk + gv, x.grad)
    grads = ours.named_grads()
    for n, t in sd.items():
        close(grads[n], t.grad)


def test_unsupported_variant_and_errors():
    learned = transformer.MultiheadAttention(8, 2, batch_first=True,
                                             score="additive").train()
    x = np.ones((1, 3, 8), np.float32)
    learned(x, x, x)
    with pytest.raises(transformer.InvalidArgumentError, match="additive"):
        learned.backward(np.ones((1, 3, 8), np.float32))
    assert not learned.grad("in_proj_weight").any()   # nothing written
    mha = transformer.MultiheadAttention(8, 2, batch_first=True).train()
    mha(x, x, x)
    with pytest.raises(transformer.NonFiniteError):
        mha.backward(np.full((1, 3, 8), np.inf, np.float32))
    with pytest.raises(transformer.ShapeError):
        mha.backward(np.ones((1, 2, 8), np.float32))
    assert not mha.grad("out_proj.weight").any()
