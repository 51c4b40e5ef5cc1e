#!/usr/bin/python3
"""Generate reference cases of the attention variants (variants.h) for
tests/test_variants.c.

Each case is one safetensors file (float32, written with numpy only):

    param.<name>      every parameter of the module (variants.h names)
    input.q/k/v       tfm_attention_forward inputs [B, H(_kv), L|S, d]
    input.query/key/value   tfm_mha_forward inputs (key and value absent
                      for self-attention, "self" = 1; value absent when it
                      is the key tensor, "kv_same" = 1)
    input.key_padding_mask  optional, boolean "block" (1.0 = masked out)
    output.out        reference output
    output.weights    reference attention weights (absent: not compared)

"__metadata__" (strings): api (attention | mha), d_k, d_v, n_heads
(attention) or d_model, n_heads, kdim, vdim, bias (mha); causal (none |
top_left | bottom_right); weights (none | per_head | average); and
"cfg.<field>" for every tfm_attention_config field that is not its
default.

The references are computed in float64 from the papers' equations, written
out below independently of the C code:
  - scores: Vaswani et al. eq. (1); Luong et al. 2015 eq. (8) (dot,
    general); Bahdanau et al. 2014 eq. (6) (additive); q . k / tau_h;
  - GQA / MQA: key/value heads repeated per group, then plain attention
    (and, for multi-head attention, PyTorch's nn.MultiheadAttention with the
    repeated projection rows gives the same numbers, checked here);
  - RoPE: RoFormer eq. (34), rotation pairs written for both layouts,
    checked against the rotate_half (GPT-NeoX / HF LLaMA) and
    rotate_every_two (GPT-J) formulations in PyTorch;
  - ALiBi: slopes from the paper's get_slopes;
  - T5: Hugging Face's _relative_position_bucket re-implemented in PyTorch
    (its float32 arithmetic);
  - Shaw et al. 2018 eqs. (3)-(5);
  - sparse patterns: explicit dense boolean masks [L, S] (BigBird's random
    blocks from the splitmix64 formula of variants.h).

Usage: /usr/bin/python3 tools/make_variant_fixtures.py [--out DIR] [--list]
(DIR defaults to tests/fixtures/variants).
"""

import argparse
import math
import os
import sys
import zlib

import numpy as np

try:
    import torch
    import torch.nn as nn
except ImportError:  # pragma: no cover
    sys.stderr.write("make_variant_fixtures.py needs PyTorch "
                     "(use /usr/bin/python3)\n")
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_safetensors import save_safetensors  # noqa: E402

# tfm_attention_config field values (variants.h enums).
SCORE = {"scaled_dot": 0, "dot": 1, "general": 2, "additive": 3,
         "temperature": 4}
ROPE = {"none": 0, "adjacent": 1, "half": 2}
RELATIVE = {"none": 0, "shaw": 1, "t5": 2, "alibi": 3}
SPARSITY = {"none": 0, "sliding": 1, "dilated": 2, "bigbird": 3}
DEFAULTS = {"score": 0, "scale": 0.0, "additive_dim": 0, "n_kv_heads": 0,
            "rope": 0, "rope_base": 0.0, "rope_dims": 0, "relative": 0,
            "max_distance": 0, "relative_values": 0, "num_buckets": 0,
            "bidirectional": 1, "sparsity": 0, "window": 0, "dilation": 1,
            "n_global": 0, "block_size": 0, "n_random_blocks": 0, "seed": 0}
MASK64 = (1 << 64) - 1


def cfg(**kw):
    """A config dict with the defaults, enum names mapped to values."""
    c = dict(DEFAULTS)
    for k, v in kw.items():
        if k not in c:
            raise KeyError(k)
        table = {"score": SCORE, "rope": ROPE, "relative": RELATIVE,
                 "sparsity": SPARSITY}.get(k)
        c[k] = table[v] if table and isinstance(v, str) else v
    return c


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def uniform(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# ---- positional pieces ------------------------------------------------------

def rope_np(x, pos, layout, dims, base):
    """RoFormer eq. (34) on the last axis of x [..., n, d_k] (float64),
    positions pos [n]: pair i = (2i, 2i+1) (adjacent) or (i, i + dims/2)
    (half) turns by theta = p * base^(-2i/dims); dims .. d_k-1 unchanged."""
    x = np.array(x, dtype=np.float64)
    half = dims // 2
    i = np.arange(half, dtype=np.float64)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * base ** (-2.0 * i / dims)
    c, s = np.cos(theta), np.sin(theta)
    if layout == ROPE["adjacent"]:
        ia, ib = 2 * np.arange(half), 2 * np.arange(half) + 1
    else:
        ia, ib = np.arange(half), np.arange(half) + half
    a, b = x[..., ia].copy(), x[..., ib].copy()
    x[..., ia] = a * c - b * s
    x[..., ib] = a * s + b * c
    return x


def rope_torch_check(x, pos, layout, dims, base):
    """The same rotation as the checkpoints' code writes it: HF's
    rotate_half (x * cos + rotate_half(x) * sin on cat(freqs, freqs)) and
    GPT-J's rotate_every_two (on repeat_interleave(freqs, 2))."""
    t = torch.from_numpy(np.array(x, dtype=np.float64))
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.float64)
                               / dims))
    freqs = torch.outer(torch.as_tensor(pos, dtype=torch.float64), inv_freq)
    rot, rest = t[..., :dims], t[..., dims:]
    if layout == ROPE["half"]:
        emb = torch.cat((freqs, freqs), dim=-1)
        x1, x2 = rot[..., :dims // 2], rot[..., dims // 2:]
        rotated = torch.cat((-x2, x1), dim=-1)
    else:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
        x1, x2 = rot[..., ::2], rot[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    out = rot * emb.cos() + rotated * emb.sin()
    return torch.cat((out, rest), dim=-1).numpy()


def get_slopes(n):
    """ALiBi slopes, the paper's reference code (Press et al. 2022)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + get_slopes(2 * closest)[0::2][:n - closest]


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """Hugging Face's T5Attention._relative_position_bucket, in PyTorch."""
    rp = torch.as_tensor(relative_position, dtype=torch.long)
    buckets = torch.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        buckets += (rp > 0).to(torch.long) * num_buckets
        rp = torch.abs(rp)
    else:
        rp = -torch.min(rp, torch.zeros_like(rp))
    max_exact = num_buckets // 2
    is_small = rp < max_exact
    large = max_exact + (
        torch.log(rp.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    buckets += torch.where(is_small, rp, large)
    return buckets.numpy()


def splitmix64(state):
    """One output of Vigna's splitmix64 next() from `state`."""
    z = (state + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def sparse_visible(c, p, S, causal):
    """bool [L, S]: the sparse pattern of config c for query positions p."""
    j = np.arange(S)[None, :]
    P = np.asarray(p)[:, None]
    kind = c["sparsity"]
    if kind == SPARSITY["none"]:
        return np.ones((len(p), S), dtype=bool)
    g = c["n_global"]
    if kind in (SPARSITY["sliding"], SPARSITY["dilated"]):
        dil = c["dilation"] if kind == SPARSITY["dilated"] else 1
        dist = np.abs(P - j)
        vis = (dist <= c["window"] * dil) & (dist % dil == 0)
        return vis | (P < g) | (j < g)
    bs = c["block_size"]
    n_key_blocks = (S + bs - 1) // bs
    vis = np.zeros((len(p), S), dtype=bool)
    for i, pi in enumerate(p):
        a = int(pi) // bs
        blocks = set()
        n = a + 1 if causal != "none" else n_key_blocks
        for r in range(c["n_random_blocks"]):
            state = ((c["seed"] ^ ((a * 0x9E3779B97F4A7C15) & MASK64)) + r) \
                & MASK64
            blocks.add(splitmix64(state) % n)
        for jj in range(S):
            b = jj // bs
            vis[i, jj] = (a < g or b < g or abs(a - b) <= c["window"]
                          or b in blocks)
    return vis


# ---- the attention reference ------------------------------------------------

def attend(q, k, v, c, P, causal, kpm=None):
    """Attention of variant c in float64.  q [B, H, L, d_k], k [B, H_kv, S,
    d_k], v [B, H_kv, S, d_v]; P: parameters {name: array}; kpm: bool
    [B, S], True = masked out.  Returns out [B, H, L, d_v], w [B, H, L, S]."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    B, H, L, dk = q.shape
    Hkv, S, dv = k.shape[1], k.shape[2], v.shape[3]
    P = {n: np.asarray(t, dtype=np.float64) for n, t in P.items()}
    q0 = S - L if causal == "bottom_right" else 0
    pos_q, pos_k = q0 + np.arange(L), np.arange(S)
    if c["rope"]:
        dims = c["rope_dims"] or dk
        base = c["rope_base"] or 10000.0
        q2 = rope_np(q, pos_q, c["rope"], dims, base)
        k2 = rope_np(k, pos_k, c["rope"], dims, base)
        assert np.allclose(q2, rope_torch_check(q, pos_q, c["rope"], dims,
                                                base), rtol=0, atol=1e-12)
        assert np.allclose(k2, rope_torch_check(k, pos_k, c["rope"], dims,
                                                base), rtol=0, atol=1e-12)
        q, k = q2, k2
    g = H // Hkv
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)

    score = c["score"]
    if score == SCORE["scaled_dot"]:
        scale = np.full(H, c["scale"] or 1.0 / math.sqrt(dk))
    elif score == SCORE["temperature"]:
        scale = 1.0 / P["temperature"]
    else:
        scale = np.full(H, c["scale"] or 1.0)
    sc = scale[None, :, None, None]
    if score == SCORE["general"]:
        # q^T W_h k (Luong "general")
        logits = np.einsum("bhid,hde,bhje->bhij", q, P["score_weight"], k)
    elif score == SCORE["additive"]:
        # v_h^T tanh(W_q,h q + W_k,h k) (Bahdanau eq. 6)
        qa = np.einsum("bhid,had->bhia", q, P["additive_query"])
        ka = np.einsum("bhjd,had->bhja", k, P["additive_key"])
        t = np.tanh(qa[:, :, :, None, :] + ka[:, :, None, :, :])
        logits = np.einsum("bhija,ha->bhij", t, P["additive_v"])
    else:
        logits = np.einsum("bhid,bhjd->bhij", q, k)
    logits = logits * sc

    dist = pos_k[None, :] - pos_q[:, None]                      # [L, S]
    rel = c["relative"]
    if rel == RELATIVE["shaw"]:
        kmax = c["max_distance"]
        idx = np.clip(dist, -kmax, kmax) + kmax
        rk = P["relative_key.weight"][idx]                      # [L, S, dk]
        logits = logits + sc * np.einsum("bhid,ijd->bhij", q, rk)
    elif rel == RELATIVE["t5"]:
        bucket = t5_bucket(dist, bool(c["bidirectional"]),
                           c["num_buckets"] or 32, c["max_distance"] or 128)
        bias = P["relative_attention_bias.weight"][bucket]       # [L, S, H]
        logits = logits + np.transpose(bias, (2, 0, 1))[None]
    elif rel == RELATIVE["alibi"]:
        m = np.array(get_slopes(H))
        logits = logits - m[None, :, None, None] * np.abs(dist)[None, None]

    vis = np.ones((B, H, L, S), dtype=bool)
    if causal != "none":
        vis &= (pos_k[None, :] <= (np.arange(L) + (S - L if causal ==
                                                   "bottom_right" else 0))
                [:, None])[None, None]
    vis &= sparse_visible(c, pos_q, S, causal)[None, None]
    if kpm is not None:
        vis &= ~kpm[:, None, None, :]
    logits = np.where(vis, logits, -np.inf)
    mx = logits.max(axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.where(vis, np.exp(logits - mx), 0.0)
    tot = e.sum(axis=-1, keepdims=True)
    w = np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 0.0)
    out = np.einsum("bhij,bhjd->bhid", w, v)
    if rel == RELATIVE["shaw"] and c["relative_values"]:
        kmax = c["max_distance"]
        idx = np.clip(dist, -kmax, kmax) + kmax
        out = out + np.einsum("bhij,ijd->bhid", w,
                              P["relative_value.weight"][idx])
    return out, w


def variant_params(rng, c, H, dk, dv):
    """Random parameters of the variant (names and shapes of variants.h)."""
    P = {}
    if c["score"] == SCORE["general"]:
        P["score_weight"] = uniform(rng, (H, dk, dk), -0.6, 0.6)
    elif c["score"] == SCORE["additive"]:
        da = c["additive_dim"] or dk
        P["additive_query"] = uniform(rng, (H, da, dk))
        P["additive_key"] = uniform(rng, (H, da, dk))
        P["additive_v"] = uniform(rng, (H, da), -2.0, 2.0)
    elif c["score"] == SCORE["temperature"]:
        P["temperature"] = uniform(rng, (H,), 0.4, 3.0)
    if c["relative"] == RELATIVE["shaw"]:
        n = 2 * c["max_distance"] + 1
        P["relative_key.weight"] = uniform(rng, (n, dk))
        if c["relative_values"]:
            P["relative_value.weight"] = uniform(rng, (n, dv))
    elif c["relative"] == RELATIVE["t5"]:
        P["relative_attention_bias.weight"] = uniform(
            rng, (c["num_buckets"] or 32, H), -2.0, 2.0)
    return P


def cfg_metadata(c):
    return {"cfg." + k: repr(v) if isinstance(v, float) else str(v)
            for k, v in c.items() if v != DEFAULTS[k]}


# ---- cases ------------------------------------------------------------------

def attention_case(name, c, B, H, L, S, dk, dv=None, causal="none",
                   weights=True, kpm=False):
    """tfm_attention_forward on q [B, H, L, d_k], k/v [B, H_kv, S, d]."""
    dv = dv or dk
    rng = rng_for(name)
    Hkv = c["n_kv_heads"] or H
    q = uniform(rng, (B, H, L, dk), -1.5, 1.5)
    k = uniform(rng, (B, Hkv, S, dk), -1.5, 1.5)
    v = uniform(rng, (B, Hkv, S, dv))
    P = variant_params(rng, c, H, dk, dv)
    mask = None
    if kpm:
        mask = rng.uniform(size=(B, S)) < 0.2
        mask[:, 0] = False
    out, w = attend(q, k, v, c, P, causal, mask)
    tensors = {"param." + n: t for n, t in P.items()}
    tensors.update({"input.q": q, "input.k": k, "input.v": v,
                    "output.out": out.astype(np.float32)})
    if mask is not None:
        tensors["input.key_padding_mask"] = mask.astype(np.float32)
    if weights:
        tensors["output.weights"] = w.astype(np.float32)
    meta = {"api": "attention", "d_k": str(dk), "d_v": str(dv),
            "n_heads": str(H), "causal": causal,
            "weights": "per_head" if weights else "none"}
    meta.update(cfg_metadata(c))
    return tensors, meta


def torch_mha_check(P, x_q, x_k, x_v, d, H, Hkv, kdim, vdim, bias, causal,
                    out, wavg):
    """GQA as PyTorch's nn.MultiheadAttention with the key/value projection
    rows of each key/value head repeated for its group of query heads."""
    dk = d // H
    g = H // Hkv
    kv = Hkv * dk
    if "param.in_proj_weight" in P:
        W = P["param.in_proj_weight"].astype(np.float64)
        wq, wk, wv = W[:d], W[d:d + kv], W[d + kv:]
    else:
        wq = P["param.q_proj_weight"].astype(np.float64)
        wk = P["param.k_proj_weight"].astype(np.float64)
        wv = P["param.v_proj_weight"].astype(np.float64)

    def rep(m):   # [Hkv*dk, ...] -> [H*dk, ...], heads repeated g times
        return np.repeat(m.reshape(Hkv, dk, *m.shape[1:]), g, axis=0) \
            .reshape(H * dk, *m.shape[1:])
    mha = nn.MultiheadAttention(d, H, bias=bias, batch_first=True,
                                kdim=kdim, vdim=vdim).double()
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(torch.from_numpy(
                np.concatenate([wq, rep(wk), rep(wv)])))
        else:
            mha.q_proj_weight.copy_(torch.from_numpy(wq))
            mha.k_proj_weight.copy_(torch.from_numpy(rep(wk)))
            mha.v_proj_weight.copy_(torch.from_numpy(rep(wv)))
        if bias:
            b = P["param.in_proj_bias"].astype(np.float64)
            mha.in_proj_bias.copy_(torch.from_numpy(np.concatenate(
                [b[:d], rep(b[d:d + kv]), rep(b[d + kv:])])))
            mha.out_proj.bias.copy_(torch.from_numpy(
                P["param.out_proj.bias"].astype(np.float64)))
        mha.out_proj.weight.copy_(torch.from_numpy(
            P["param.out_proj.weight"].astype(np.float64)))
    L, S = x_q.shape[1], x_k.shape[1]
    mask = None
    if causal != "none":
        off = S - L if causal == "bottom_right" else 0
        mask = torch.from_numpy(np.arange(S)[None, :] >
                                np.arange(L)[:, None] + off)
    mha.train()
    o, w = mha(torch.from_numpy(x_q.astype(np.float64)),
               torch.from_numpy(x_k.astype(np.float64)),
               torch.from_numpy(x_v.astype(np.float64)), attn_mask=mask,
               need_weights=True, average_attn_weights=True)
    assert np.allclose(o.detach().numpy(), out, rtol=1e-10, atol=1e-12)
    assert np.allclose(w.detach().numpy(), wavg, rtol=1e-10, atol=1e-12)


def mha_case(name, c, B, d, H, L, S, causal="none", weights="per_head",
             kind="self", kdim=None, vdim=None, bias=True, torch_check=False):
    """tfm_mha_forward.  kind: self (query = key = value), kv_same (key =
    value, a separate tensor) or cross (three tensors; kdim/vdim)."""
    rng = rng_for(name)
    dk = d // H
    Hkv = c["n_kv_heads"] or H
    kv = Hkv * dk
    kdim, vdim = kdim or d, vdim or d
    if kind == "self":
        assert L == S
    x_q = uniform(rng, (B, L, d))
    x_k = x_q if kind == "self" else uniform(rng, (B, S, kdim))
    x_v = x_k if kind != "cross" else uniform(rng, (B, S, vdim))
    P = {}
    if kdim == d and vdim == d:
        P["param.in_proj_weight"] = uniform(rng, (d + 2 * kv, d), -0.5, 0.5)
    else:
        P["param.q_proj_weight"] = uniform(rng, (d, d), -0.5, 0.5)
        P["param.k_proj_weight"] = uniform(rng, (kv, kdim), -0.5, 0.5)
        P["param.v_proj_weight"] = uniform(rng, (kv, vdim), -0.5, 0.5)
    if bias:
        P["param.in_proj_bias"] = uniform(rng, (d + 2 * kv,), -0.3, 0.3)
    P["param.out_proj.weight"] = uniform(rng, (d, d), -0.5, 0.5)
    if bias:
        P["param.out_proj.bias"] = uniform(rng, (d,), -0.3, 0.3)
    VP = variant_params(rng, c, H, dk, dk)
    for n, t in VP.items():
        P["param." + n] = t

    f = lambda a: a.astype(np.float64)  # noqa: E731
    if "param.in_proj_weight" in P:
        W = f(P["param.in_proj_weight"])
        wq, wk, wv = W[:d], W[d:d + kv], W[d + kv:]
    else:
        wq, wk, wv = (f(P["param.%s_proj_weight" % n]) for n in "qkv")
    b = f(P["param.in_proj_bias"]) if bias else np.zeros(d + 2 * kv)
    qp = f(x_q) @ wq.T + b[:d]
    kp = f(x_k) @ wk.T + b[d:d + kv]
    vp = f(x_v) @ wv.T + b[d + kv:]
    heads = lambda x, n: x.reshape(B, -1, n, dk).transpose(0, 2, 1, 3)  # noqa
    o, w = attend(heads(qp, H), heads(kp, Hkv), heads(vp, Hkv), c, VP,
                  causal)
    ctx = o.transpose(0, 2, 1, 3).reshape(B, L, d)
    out = ctx @ f(P["param.out_proj.weight"]).T
    if bias:
        out = out + f(P["param.out_proj.bias"])
    if torch_check:
        torch_mha_check(P, x_q, x_k, x_v, d, H, Hkv, kdim, vdim, bias,
                        causal, out, w.mean(axis=1))

    tensors = dict(P)
    tensors["input.query"] = x_q
    if kind != "self":
        tensors["input.key"] = x_k
    if kind == "cross":
        tensors["input.value"] = x_v
    tensors["output.out"] = out.astype(np.float32)
    if weights == "per_head":
        tensors["output.weights"] = w.astype(np.float32)
    elif weights == "average":
        tensors["output.weights"] = w.mean(axis=1).astype(np.float32)
    meta = {"api": "mha", "d_model": str(d), "n_heads": str(H),
            "kdim": str(kdim), "vdim": str(vdim), "bias": str(int(bias)),
            "causal": causal, "weights": weights,
            "self": str(int(kind == "self")),
            "kv_same": str(int(kind == "kv_same"))}
    meta.update(cfg_metadata(c))
    return tensors, meta


def cases():
    A, M = attention_case, mha_case
    bb = dict(sparsity="bigbird", block_size=4, window=1, n_global=1,
              n_random_blocks=2, seed=1234)
    yield "att_scaled_dot", lambda n: A(n, cfg(), 2, 2, 5, 7, 4)
    yield "att_dot", lambda n: A(n, cfg(score="dot"), 1, 2, 4, 6, 4)
    yield "att_dot_scale", lambda n: A(n, cfg(score="dot", scale=0.3),
                                       1, 2, 4, 6, 4)
    yield "att_general", lambda n: A(n, cfg(score="general"), 2, 2, 5, 6, 4)
    yield "att_additive", lambda n: A(n, cfg(score="additive",
                                             additive_dim=6),
                                      2, 2, 5, 6, 4, dv=3)
    yield "att_additive_gqa_causal", lambda n: A(
        n, cfg(score="additive", n_kv_heads=2), 1, 4, 6, 6, 4,
        causal="top_left")
    yield "att_temperature", lambda n: A(n, cfg(score="temperature"),
                                         2, 3, 4, 5, 4)
    yield "att_gqa", lambda n: A(n, cfg(n_kv_heads=2), 2, 4, 5, 7, 4, dv=3)
    yield "att_mqa_causal", lambda n: A(n, cfg(n_kv_heads=1), 1, 4, 6, 6, 4,
                                        causal="top_left")
    yield "att_rope_adjacent", lambda n: A(n, cfg(rope="adjacent"),
                                           1, 2, 6, 6, 8)
    yield "att_rope_half", lambda n: A(n, cfg(rope="half"), 1, 2, 6, 6, 8)
    yield "att_rope_partial_half_base", lambda n: A(
        n, cfg(rope="half", rope_dims=4, rope_base=500.0), 2, 2, 5, 5, 8)
    yield "att_rope_partial_adjacent_br", lambda n: A(
        n, cfg(rope="adjacent", rope_dims=6, rope_base=100.0), 1, 2, 4, 9, 8,
        causal="bottom_right")
    yield "att_shaw_keys", lambda n: A(
        n, cfg(relative="shaw", max_distance=3), 1, 2, 10, 10, 4)
    yield "att_shaw_keys_values", lambda n: A(
        n, cfg(relative="shaw", max_distance=2, relative_values=1),
        2, 2, 7, 9, 4, dv=6, causal="bottom_right")
    yield "att_shaw_temperature", lambda n: A(
        n, cfg(score="temperature", relative="shaw", max_distance=2,
               relative_values=1), 1, 2, 6, 6, 4)
    yield "att_t5_bidirectional", lambda n: A(
        n, cfg(relative="t5", num_buckets=8, max_distance=12), 1, 2, 40, 40,
        4)
    yield "att_t5_unidirectional", lambda n: A(
        n, cfg(relative="t5", num_buckets=8, max_distance=16,
               bidirectional=0), 1, 2, 40, 40, 4, causal="top_left")
    yield "att_t5_cross", lambda n: A(
        n, cfg(relative="t5", num_buckets=6, max_distance=5), 1, 3, 5, 9, 4)
    yield "att_alibi_4", lambda n: A(n, cfg(relative="alibi"), 1, 4, 8, 8, 4)
    yield "att_alibi_6_causal", lambda n: A(n, cfg(relative="alibi"),
                                            2, 6, 8, 8, 4, causal="top_left")
    yield "att_sliding", lambda n: A(n, cfg(sparsity="sliding", window=3),
                                     1, 2, 16, 16, 4)
    yield "att_sliding_causal", lambda n: A(
        n, cfg(sparsity="sliding", window=3), 1, 2, 16, 16, 4,
        causal="top_left")
    yield "att_sliding_kpm", lambda n: A(
        n, cfg(sparsity="sliding", window=4), 2, 2, 12, 12, 4, kpm=True)
    yield "att_dilated", lambda n: A(
        n, cfg(sparsity="dilated", window=2, dilation=3), 1, 2, 20, 20, 4)
    yield "att_global", lambda n: A(
        n, cfg(sparsity="sliding", window=2, n_global=2), 1, 2, 16, 16, 4)
    yield "att_dilated_global_causal", lambda n: A(
        n, cfg(sparsity="dilated", window=2, dilation=2, n_global=1),
        1, 2, 16, 16, 4, causal="top_left")
    yield "att_bigbird", lambda n: A(n, cfg(**bb), 1, 2, 40, 40, 4)
    yield "att_bigbird_causal", lambda n: A(n, cfg(**bb), 1, 2, 40, 40, 4,
                                            causal="top_left")
    yield "att_gqa_rope_window_causal", lambda n: A(
        n, cfg(n_kv_heads=2, rope="half", sparsity="sliding", window=3),
        2, 4, 12, 12, 8, causal="top_left")
    yield "att_mqa_alibi_bigbird_br", lambda n: A(
        n, cfg(n_kv_heads=1, relative="alibi", **bb), 1, 4, 10, 24, 4,
        causal="bottom_right")
    # Longer than one key tile (512): several tiles of the kernel run.
    yield "att_long_sliding_global_causal", lambda n: A(
        n, cfg(sparsity="sliding", window=40, n_global=3), 1, 2, 600, 600,
        8, causal="top_left", weights=False)
    yield "att_long_t5", lambda n: A(
        n, cfg(relative="t5", num_buckets=16, max_distance=64), 1, 2, 600,
        600, 8, weights=False)
    yield "att_long_bigbird", lambda n: A(
        n, cfg(sparsity="bigbird", block_size=16, window=1, n_global=1,
               n_random_blocks=3, seed=7), 1, 2, 560, 560, 8, weights=False)
    yield "att_long_shaw_values", lambda n: A(
        n, cfg(relative="shaw", max_distance=4, relative_values=1), 1, 1,
        530, 530, 4, weights=False)

    # Multi-head attention (projections, then the variant).
    yield "mha_gqa", lambda n: M(n, cfg(n_kv_heads=2), 2, 16, 4, 5, 5,
                                 torch_check=True)
    yield "mha_mqa_cross_unpacked", lambda n: M(
        n, cfg(n_kv_heads=1), 2, 16, 4, 4, 6, kind="cross", kdim=12,
        vdim=10, weights="average", torch_check=True)
    yield "mha_gqa_causal_kv_same", lambda n: M(
        n, cfg(n_kv_heads=2), 1, 16, 4, 4, 7, kind="kv_same",
        causal="bottom_right", torch_check=True)
    yield "mha_gqa_rope_window_br", lambda n: M(
        n, cfg(n_kv_heads=2, rope="adjacent", sparsity="sliding", window=2),
        2, 16, 4, 4, 9, kind="kv_same", causal="bottom_right")
    yield "mha_rope_half_partial_self_causal", lambda n: M(
        n, cfg(rope="half", rope_dims=2, rope_base=1000.0), 1, 16, 2, 6, 6,
        causal="top_left", weights="average")
    yield "mha_alibi_6_causal", lambda n: M(
        n, cfg(relative="alibi"), 1, 12, 6, 7, 7, causal="top_left",
        weights="average")
    yield "mha_t5", lambda n: M(
        n, cfg(relative="t5", num_buckets=8, max_distance=10), 1, 8, 2, 24,
        24)
    yield "mha_shaw_kv_nobias", lambda n: M(
        n, cfg(relative="shaw", max_distance=2, relative_values=1), 1, 8, 2,
        6, 6, bias=False)
    yield "mha_general", lambda n: M(n, cfg(score="general"), 2, 8, 2, 5, 5)
    yield "mha_additive_cross", lambda n: M(
        n, cfg(score="additive", additive_dim=5), 1, 8, 2, 4, 6, kind="cross",
        kdim=6, vdim=5)
    yield "mha_temperature_mqa", lambda n: M(
        n, cfg(score="temperature", n_kv_heads=1), 1, 12, 3, 5, 5,
        weights="average")
    yield "mha_bigbird_gqa_causal", lambda n: M(
        n, cfg(n_kv_heads=2, sparsity="bigbird", block_size=3, window=1,
               n_global=1, n_random_blocks=1, seed=99),
        1, 16, 4, 20, 20, causal="top_left", weights="average")
    yield "mha_long_dilated_causal", lambda n: M(
        n, cfg(sparsity="dilated", window=10, dilation=2, rope="half",
               n_kv_heads=1), 1, 8, 2, 520, 520, causal="top_left",
        weights="none")
    yield "mha_long_alibi_br", lambda n: M(
        n, cfg(relative="alibi"), 1, 8, 2, 16, 530, kind="kv_same",
        causal="bottom_right", weights="none")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, os.pardir, "tests",
                                                  "fixtures", "variants"))
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    all_cases = list(cases())
    if args.list:
        for name, _ in all_cases:
            print(name)
        return 0
    # The ALiBi slopes of the paper, as variants.h states them.
    assert get_slopes(6) == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1,
                             2 ** -3]
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    wanted = set()
    for name, make in all_cases:
        tensors, meta = make(name)
        path = os.path.join(args.out, name + ".safetensors")
        save_safetensors({k: np.ascontiguousarray(v, dtype=np.float32)
                          for k, v in tensors.items()}, path, meta)
        wanted.add(name + ".safetensors")
    for f in os.listdir(args.out):
        if f.endswith(".safetensors") and f not in wanted:
            os.remove(os.path.join(args.out, f))
    print("wrote %d cases to %s" % (len(all_cases), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
