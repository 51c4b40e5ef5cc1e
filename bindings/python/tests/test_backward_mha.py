"""MultiheadAttention.backward against torch.autograd (torch 1.13): the
same weights, inputs and grad_output; our (grad_query, grad_key,
grad_value) and every parameter gradient must equal torch's .grad
(float32; 2e-5 relative to the largest magnitude).

Variants torch's nn.MultiheadAttention lacks (grouped-query heads, ALiBi,
a sliding window) are compared with the same attention written in torch
ops from the definitions in variants.h (ALiBi: logits - m_h |j - i|, the
slopes of Press et al. 2022; GQA: query head h reads key/value head
h // (H / H_kv); sliding window w: key j visible from query i when
|j - i| <= w... restricted here to the causal case, j in [i - w, i]; the
learned variants: Luong's general score, the learned temperature,
Bahdanau's additive score, Shaw's relative keys and values, T5's bucketed
bias) and differentiated by autograd, the learned variants' parameters
included, also as cross-attention (L != S) under key padding and causal
masks, across the backward's tiles and key chunks."""

import math

import numpy as np
import pytest
import torch

import transformer
from grad_check import close, load
from variant_reference import alibi_slopes, t5_bucket


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


def torch_variant_mha(xq, sd, E, H, n_kv, cfg, xk=None, xv=None,
                      causal=True, kpm=None):
    """Multi-head attention with packed [W_q; W_k; W_v] of n_kv key/value
    heads and the variant cfg, in torch ops (autograd differentiates it):
    query rows xq [B, L, E] at positions i, key rows xk [B, S, E] (xq when
    None) at positions j, distance j - i; causal: j <= i; kpm [B, S]
    (True = masked).  The scores times the scale (the config's; else
    1 / sqrt(d_k) for scaled_dot, 1 otherwise): q.k, q^T W_h k (general),
    Bahdanau's v_h . tanh(W_q,h q + W_k,h k) (additive), or q.k / tau_h
    (learned temperature); then Shaw's scale q . r^K(c(j -
    i)) (and r^V on the values), T5's bias b_h(bucket(j - i)) (Hugging
    Face's buckets, variant_reference.t5_bucket) or ALiBi's -m_h |j - i|;
    a sliding window |i - j| <= w."""
    xk = xq if xk is None else xk
    xv = xk if xv is None else xv
    B, L, _ = xq.shape
    S = xk.shape[1]
    dk = E // H
    kv = n_kv * dk
    w, b = sd["in_proj_weight"], sd["in_proj_bias"]
    q = (xq @ w[:E].T + b[:E]).view(B, L, H, dk).transpose(1, 2)
    k = (xk @ w[E:E + kv].T + b[E:E + kv]).view(B, S, n_kv, dk) \
        .transpose(1, 2)
    v = (xv @ w[E + kv:].T + b[E + kv:]).view(B, S, n_kv, dk).transpose(1, 2)
    if cfg.get("rope"):
        rope, dims = cfg["rope"], cfg.get("rope_dims")
        q, k = torch_rope(q, rope, dims=dims), torch_rope(k, rope, dims=dims)
    k = k.repeat_interleave(H // n_kv, dim=1)
    v = v.repeat_interleave(H // n_kv, dim=1)
    score = cfg.get("score", "scaled_dot")
    scale = torch.full((H,), cfg.get("scale") or (
        1.0 / math.sqrt(dk) if score == "scaled_dot" else 1.0))
    if score == "learned_temperature":     # q . k / tau_h
        scale = 1.0 / sd["temperature"]
    if score == "additive":
        wq = torch.einsum("had,bhid->bhia", sd["additive_query"], q)
        wk = torch.einsum("had,bhjd->bhja", sd["additive_key"], k)
        s = torch.einsum("ha,bhija->bhij", sd["additive_v"],
                         torch.tanh(wq[:, :, :, None] + wk[:, :, None]))
    elif score == "general":               # Luong's general score
        s = torch.einsum("bhid,hde->bhie", q, sd["score_weight"]) \
            @ k.transpose(-1, -2)
    else:
        s = q @ k.transpose(-1, -2)
    logits = scale[None, :, None, None] * s
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    rel = cfg.get("relative")
    if rel == "alibi":
        m = torch.tensor(alibi_slopes(H))[:, None, None]
        logits = logits - m * (j - i).abs()
    elif rel == "shaw":
        kmax = cfg["max_distance"]
        idx = (j - i).clamp(-kmax, kmax) + kmax                  # [L, S]
        rk = sd["relative_key.weight"][idx]                      # [L, S, dk]
        logits = logits + scale[None, :, None, None] * torch.einsum(
            "bhid,ijd->bhij", q, rk)
    elif rel == "t5":
        bk = torch.tensor([[t5_bucket(int(jj - ii), cfg.get("num_buckets", 32),
                                      cfg.get("max_distance", 128),
                                      cfg.get("bidirectional", True))
                            for jj in range(S)] for ii in range(L)])
        logits = logits + sd["relative_attention_bias.weight"][bk] \
            .permute(2, 0, 1)
    visible = torch.ones(L, S, dtype=torch.bool)
    if causal:
        visible = visible & (j <= i)
    if cfg.get("window") is not None:
        visible = visible & ((i - j).abs() <= cfg["window"])
    logits = logits.masked_fill(~visible, float("-inf"))
    if kpm is not None:
        logits = logits.masked_fill(kpm[:, None, None, :], float("-inf"))
    p = torch.softmax(logits, -1)
    o = p @ v
    if rel == "shaw" and cfg.get("relative_values"):
        o = o + torch.einsum("bhij,ijd->bhid", p,
                             sd["relative_value.weight"][idx])
    o = o.transpose(1, 2).reshape(B, L, E)
    return o @ sd["out_proj.weight"].T + sd["out_proj.bias"]


def variant_module(E, H, cfg, seed):
    """Our MultiheadAttention with variant cfg, in training mode, and its
    state dict as torch tensors (N(0, 0.25) entries, temperatures in
    [1, 3]) that require grad."""
    torch.manual_seed(seed)
    ours = transformer.MultiheadAttention(E, H, batch_first=True, **cfg)
    sd = {n: torch.randn(*a.shape) * 0.5 for n, a in ours.state_dict().items()}
    if "temperature" in sd:        # positive, around sqrt(d_k) = 2
        sd["temperature"] = torch.rand(H) * 2 + 1
    ours.load_state_dict({n: t.numpy() for n, t in sd.items()})
    for t in sd.values():
        t.requires_grad_()
    return ours.train(), sd


def check_named_grads(ours, sd, factor=1):
    """Every parameter's gradient equals factor times torch's.  The
    temperatures' within 1e-4: -(1/tau_h) sum q . dq over a head's rows
    cancels (each row's dS sums to 0), and at L x S = 150 x 300 the
    float32 dq leaves 1-3e-5 of it (measured against torch in float64;
    torch's float32 is within 3e-6 there, its sum order differing)."""
    grads = ours.named_grads()
    assert set(grads) == set(sd)
    for n, t in sd.items():
        close(grads[n], factor * t.grad,
              1e-4 if n == "temperature" else 2e-5)


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
                                      n_kv_heads=2),
                                 dict(score="additive"),
                                 dict(score="additive", additive_dim=3,
                                      n_kv_heads=2),
                                 dict(score="additive", additive_dim=6,
                                      scale=0.5, rope="half"),
                                 dict(relative="shaw", max_distance=2),
                                 dict(relative="shaw", max_distance=3,
                                      relative_values=True, n_kv_heads=2),
                                 dict(relative="shaw", max_distance=2,
                                      relative_values=True,
                                      score="learned_temperature",
                                      rope="adjacent"),
                                 dict(relative="shaw", max_distance=9,
                                      relative_values=True,
                                      sparsity="sliding_window", window=2),
                                 dict(relative="t5", num_buckets=8,
                                      max_distance=20),
                                 dict(relative="t5", num_buckets=6,
                                      max_distance=5, bidirectional=False,
                                      n_kv_heads=1),
                                 dict(relative="t5", num_buckets=8,
                                      max_distance=20, score="additive",
                                      n_kv_heads=2),
                                 dict(relative="t5", num_buckets=8,
                                      max_distance=20, score="general",
                                      rope="half")],
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in
                                                c.items()))
def test_variants_against_torch_ops(cfg):
    E, H, B, L = 16, 4, 2, 7
    ours, sd = variant_module(E, H, cfg, 2)
    x = torch.randn(B, L, E, requires_grad=True)
    g = torch.randn(B, L, E)
    ref = torch_variant_mha(x, sd, E, H, cfg.get("n_kv_heads", H), cfg)
    ref.backward(g)
    xn = x.detach().numpy()
    out, _ = ours(xn, xn, xn, is_causal=True, need_weights=False)
    close(out, ref)
    gq, gk, gv = ours.backward(g.numpy())
    close(gq + gk + gv, x.grad)
    check_named_grads(ours, sd)


LEARNED_VARIANTS = [
    dict(score="additive", additive_dim=5),
    dict(score="additive", n_kv_heads=1),
    dict(relative="shaw", max_distance=3, relative_values=True),
    dict(relative="shaw", max_distance=2, relative_values=True,
         score="learned_temperature", n_kv_heads=2),
    dict(relative="t5", num_buckets=8, max_distance=16),
    dict(relative="t5", num_buckets=6, max_distance=9, bidirectional=False,
         score="additive", n_kv_heads=2),
]


def variant_id(c):
    return "-".join(f"{k}={v}" for k, v in c.items())


@pytest.mark.parametrize("cfg", LEARNED_VARIANTS, ids=variant_id)
@pytest.mark.parametrize("shape", [(2, 5, 9, False), (2, 9, 4, True),
                                   (1, 6, 6, True), (1, 150, 300, False),
                                   (1, 140, 140, True)],
                         ids=lambda s: "B%d-L%d-S%d-%s" % (
                             s[0], s[1], s[2], "causal" if s[3] else "full"))
def test_learned_variants_cross_attention_masks(cfg, shape):
    """The additive score, Shaw and T5 with separate query and key/value
    inputs (L != S: cross-attention), a key padding mask and, in some
    shapes, the (top-left) causal mask; shapes past the backward's 128-row
    and 128-key tiles and its chunks of keys (B * H_kv < 8).  Inputs'
    and every parameter's gradients against torch.autograd."""
    B, L, S, causal = shape
    E, H = 16, 4 if B > 1 else 2
    ours, sd = variant_module(E, H, cfg, 3)
    xq = torch.randn(B, L, E, requires_grad=True)
    xk = torch.randn(B, S, E, requires_grad=True)
    xv = torch.randn(B, S, E, requires_grad=True)
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, S - 2:] = True                  # key 0 stays: no empty row
    kpm[B - 1, 1] = True
    g = torch.randn(B, L, E)
    ref = torch_variant_mha(xq, sd, E, H, cfg.get("n_kv_heads", H), cfg,
                            xk, xv, causal=causal, kpm=kpm)
    ref.backward(g)
    out, _ = ours(xq.detach().numpy(), xk.detach().numpy(),
                  xv.detach().numpy(), key_padding_mask=kpm.numpy(),
                  is_causal=causal, need_weights=False)
    close(out, ref)
    gq, gk, gv = ours.backward(g.numpy())
    close(gq, xq.grad)
    close(gk, xk.grad)
    close(gv, xv.grad)
    check_named_grads(ours, sd)
    # a second backward accumulates
    ours.backward(g.numpy())
    check_named_grads(ours, sd, 2)


@pytest.mark.parametrize("cfg", LEARNED_VARIANTS, ids=variant_id)
def test_learned_variants_threads_and_empty_rows(cfg):
    """The same bits at 1 and 2 threads (inputs' and parameters'
    gradients); a query whose keys are all masked gets a zero gradient,
    never NaN, and adds nothing to the parameters' gradients."""
    E, H, B, L, S = 16, 2, 1, 130, 260
    ours, sd = variant_module(E, H, cfg, 4)
    rng = np.random.default_rng(4)
    xq = rng.standard_normal((B, L, E)).astype(np.float32)
    xk = rng.standard_normal((B, S, E)).astype(np.float32)
    g = rng.standard_normal((B, L, E)).astype(np.float32)
    am = np.zeros((L, S), bool)
    am[3, :] = True                        # row 3 sees no key
    runs = []
    try:
        for n in (1, 2):
            transformer.set_num_threads(n)
            ours.zero_grad()
            ours(xq, xk, xk, attn_mask=am, need_weights=False)
            grads = ours.backward(g)
            runs.append((grads, {k: v.copy() for k, v in
                                 ours.named_grads().items()}))
    finally:
        transformer.set_num_threads(0)
    (a, pa), (b, pb) = runs
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    for n in pa:
        np.testing.assert_array_equal(pa[n], pb[n])
    gq = a[0]
    assert all(np.isfinite(x).all() for x in a)
    assert all(np.isfinite(v).all() for v in pa.values())
    np.testing.assert_array_equal(gq[0, 3], 0.0)
    assert np.abs(gq[0, 2]).max() > 0
    # the empty row adds nothing: its grad_output alone gives zeros
    g0 = np.zeros_like(g)
    g0[0, 3] = g[0, 3]
    ours.zero_grad()
    ours(xq, xk, xk, attn_mask=am, need_weights=False)
    ours.backward(g0)
    for n, v in ours.named_grads().items():
        if "proj" not in n:
            np.testing.assert_array_equal(v, 0.0)


def test_unsupported_variant_and_errors():
    extra = transformer.MultiheadAttention(8, 2, batch_first=True,
                                           add_bias_kv=True).train()
    x = np.ones((1, 3, 8), np.float32)
    extra(x, x, x)
    with pytest.raises(transformer.InvalidArgumentError, match="add_bias_kv"):
        extra.backward(np.ones((1, 3, 8), np.float32))
    assert not extra.grad("in_proj_weight").any()   # nothing written
    mha = transformer.MultiheadAttention(8, 2, batch_first=True).train()
    mha(x, x, x)
    with pytest.raises(transformer.NonFiniteError):
        mha.backward(np.full((1, 3, 8), np.inf, np.float32))
    with pytest.raises(transformer.ShapeError):
        mha.backward(np.ones((1, 2, 8), np.float32))
    assert not mha.grad("out_proj.weight").any()
