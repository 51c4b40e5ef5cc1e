"""Float64 numpy references for the attention variants of
include/transformer/variants.h, written from the papers' equations (each
function names its source).  Pure numpy: used by test_variants.py and by
bindings/lua/tests/make_variants_reference.py, never by the library.
"""

import math

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- float64 reference -----------------------------------------------------

def rope_ref(x, pos, layout, base=10000.0, dims=None):
    """RoFormer (Su et al. 2021) eq. (34) on the first `dims` columns of
    x [..., n, d]: pair i turns by pos * base^(-2i/dims); pairs are columns
    (2i, 2i+1) ("adjacent") or (i, i + dims/2) ("half")."""
    dims = x.shape[-1] if not dims else dims
    half = dims // 2
    theta = pos[:, None] * base ** (-2.0 * np.arange(half) / dims)
    cos, sin = np.cos(theta), np.sin(theta)
    y = x.copy()
    if layout == "adjacent":
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = a * cos - b * sin
        y[..., 1:dims:2] = a * sin + b * cos
    else:
        a, b = x[..., :half], x[..., half:dims]
        y[..., :half] = a * cos - b * sin
        y[..., half:dims] = a * sin + b * cos
    return y


def alibi_slopes(n):
    """get_slopes() of the ALiBi paper's reference code (Press et al. 2022,
    github.com/ofirpress/attention_with_linear_biases)."""
    def power_of_2(k):
        start = 2 ** (-2 ** -(math.log2(k) - 3))
        return [start * start ** i for i in range(k)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_2(p) + alibi_slopes(2 * p)[0::2][:n - p]


def t5_bucket(rel, num_buckets, max_distance, bidirectional):
    """Hugging Face's T5Attention._relative_position_bucket for one
    distance rel = key - query."""
    ret = 0
    n = num_buckets
    if bidirectional:
        n //= 2
        ret += n if rel > 0 else 0
        rel = abs(rel)
    else:
        rel = -min(rel, 0)
    max_exact = n // 2
    if rel < max_exact:
        return ret + rel
    large = max_exact + int(math.log(rel / max_exact)
                            / math.log(max_distance / max_exact)
                            * (n - max_exact))
    return ret + min(large, n - 1)


def splitmix64(x):
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def visible(cfg, p, j, n_key_blocks, causal):
    """Whether query position p sees key j under the sparse pattern."""
    if causal and j > p:
        return False
    kind = cfg.get("sparsity", "none")
    g = cfg.get("n_global", 0)
    if kind == "none":
        return True
    if kind in ("sliding_window", "dilated"):
        if j < g or p < g:
            return True
        w, dil = cfg["window"], cfg.get("dilation", 1)
        if kind == "sliding_window":
            return abs(p - j) <= w
        return abs(p - j) <= w * dil and (p - j) % dil == 0
    bs = cfg["block_size"]
    a, b = p // bs, j // bs
    if abs(a - b) <= cfg["window"] or a < g or b < g:
        return True
    n = a + 1 if causal else n_key_blocks
    seed = cfg.get("seed", 0)
    return any(splitmix64(((seed ^ (a * GOLDEN)) + r) & MASK64) % n == b
               for r in range(cfg.get("n_random_blocks", 0)))


def attention_ref(q, k, v, params=None, causal=None, mask=None, **cfg):
    """Attention of a variant in float64 (variants.h's logits):
      a_ij = scale_h s(q_i, k_j) + scale_h q_i.r^K(j - p_i) + b_h(j - p_i),
      o_i = sum_j softmax(a)_ij (v_j + r^V(j - p_i)).
    q [B, H, L, dk], k [B, Hkv, S, dk], v [B, Hkv, S, dv]; causal None,
    "top_left" or "bottom_right"; mask: additive float [.., L, S].
    Returns (out [B, H, L, dv], weights [B, H, L, S])."""
    p = {name: np.asarray(a, np.float64) for name, a in (params or {}).items()}
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, H, L, dk = q.shape
    S = k.shape[2]
    offset = S - L if causal == "bottom_right" else 0
    pq = np.arange(L) + offset
    pk = np.arange(S)
    if cfg.get("rope", "none") != "none":
        base = cfg.get("rope_base", 10000.0)
        dims = cfg.get("rope_dims")
        q = rope_ref(q, pq.astype(float), cfg["rope"], base, dims)
        k = rope_ref(k, pk.astype(float), cfg["rope"], base, dims)
    group = H // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)

    score = cfg.get("score", "scaled_dot")
    scale = np.full(H, cfg.get("scale") or
                    (1 / math.sqrt(dk) if score == "scaled_dot" else 1.0))
    if score == "general":
        s = np.einsum("bhid,hde,bhje->bhij", q, p["score_weight"], k)
    elif score == "additive":
        wq = np.einsum("had,bhid->bhia", p["additive_query"], q)
        wk = np.einsum("had,bhjd->bhja", p["additive_key"], k)
        s = np.einsum("ha,bhija->bhij", p["additive_v"],
                      np.tanh(wq[:, :, :, None, :] + wk[:, :, None, :, :]))
    else:
        s = q @ k.swapaxes(-1, -2)
        if score == "learned_temperature":
            scale = 1.0 / p["temperature"]
    logits = scale[:, None, None] * s
    dist = pk[None, :] - pq[:, None]                     # [L, S], j - p_i
    rel = cfg.get("relative", "none")
    if rel == "shaw":
        kmax = cfg["max_distance"]
        idx = np.clip(dist, -kmax, kmax) + kmax
        rk = p["relative_key.weight"][idx]                   # [L, S, dk]
        logits = logits + scale[:, None, None] * np.einsum("bhid,ijd->bhij",
                                                           q, rk)
    elif rel == "t5":
        buckets = np.vectorize(lambda d: t5_bucket(
            d, cfg.get("num_buckets", 32), cfg.get("max_distance", 128),
            cfg.get("bidirectional", True)))(dist)
        logits = logits + p["relative_attention_bias.weight"][buckets] \
            .transpose(2, 0, 1)
    elif rel == "alibi":
        m = np.array(alibi_slopes(H))
        logits = logits - m[:, None, None] * np.abs(dist)
    n_blocks = -(-S // cfg["block_size"]) if "block_size" in cfg else 0
    seen = np.array([[visible(cfg, int(pq[i]), j, n_blocks, causal is not None)
                      for j in range(S)] for i in range(L)])
    logits = np.where(seen, logits, -np.inf)
    if mask is not None:
        logits = logits + mask
    top = logits.max(-1, keepdims=True)
    e = np.where(np.isfinite(logits), np.exp(logits - np.where(
        np.isfinite(top), top, 0)), 0.0)
    total = e.sum(-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    out = w @ v
    if rel == "shaw" and cfg.get("relative_values"):
        out = out + np.einsum("bhij,ijd->bhid", w,
                              p["relative_value.weight"][idx])
    return out, w


def mha_ref(x, params, E, H, n_kv=None, causal=False, **cfg):
    """Self-attention of MultiheadAttention with a variant, float64:
    packed projections [W_q; W_k; W_v] with n_kv_heads * d_k key and value
    rows, the variant's attention per head, then out_proj."""
    p = {n: np.asarray(a, np.float64) for n, a in params.items()}
    x = np.asarray(x, np.float64)
    B, L, _ = x.shape
    dk = E // H
    n_kv = n_kv or H
    w, b = p["in_proj_weight"], p["in_proj_bias"]
    kv = n_kv * dk
    q = (x @ w[:E].T + b[:E]).reshape(B, L, H, dk).transpose(0, 2, 1, 3)
    k = (x @ w[E:E + kv].T + b[E:E + kv]).reshape(B, L, n_kv, dk) \
        .transpose(0, 2, 1, 3)
    v = (x @ w[E + kv:].T + b[E + kv:]).reshape(B, L, n_kv, dk) \
        .transpose(0, 2, 1, 3)
    own = {n: a for n, a in p.items() if "proj" not in n}
    o, _ = attention_ref(q, k, v, own, causal="top_left" if causal else None,
                         **cfg)
    o = o.transpose(0, 2, 1, 3).reshape(B, L, E)
    return o @ p["out_proj.weight"].T + p["out_proj.bias"]


def concat_ref(L, d, offset=0, base=10000.0):
    """tensor2tensor's get_timing_signal_1d (fairseq's layout): h = d // 2
    timescales base^(i/(h-1)); sin in the first h columns, cos in the
    next h, an odd d padded with a zero column."""
    h = d // 2
    pos = np.arange(offset, offset + L, dtype=np.float64)[:, None]
    inv = np.exp(np.arange(h) * -(math.log(base) / (h - 1)))
    pe = np.zeros((L, d))
    pe[:, :h] = np.sin(pos * inv)
    pe[:, h:2 * h] = np.cos(pos * inv)
    return pe
