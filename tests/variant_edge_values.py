#!/usr/bin/env python3
"""Expected values of tests/test_variants_edge.c, in float64, from the
equations of docs/VARIANTS.md written out independently of the library:
dense boolean masks from the sparse patterns' definitions (Python integers,
so window, dilation, n_global and block_size may be 2^63-1 without
overflow), BigBird's random blocks from SplitMix64 as Vigna defines it,
T5 buckets with Hugging Face's _relative_position_bucket in PyTorch, RoPE as
rotations of pairs, ALiBi slopes from the paper's get_slopes.

    /usr/bin/python3 tests/variant_edge_values.py > values.inc

prints the arrays the test embeds (its CASES table must list the same cases
in the same order)."""
import math

import numpy as np
import torch

BIG = 2**63 - 1
M64 = 2**64 - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def get_slopes(n):  # Press et al., the paper's reference code
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + get_slopes(2 * c)[0::2][:n - c]


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    # transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    relative_position = torch.tensor(rel, dtype=torch.long)
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position,
                                       torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.float() / max_exact)
                         / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, large)
    return int(relative_buckets)


def tensor(shape, a, b, fn):
    n = int(np.prod(shape))
    x = np.array([fn(a + b * i) for i in range(n)])
    return x.astype(np.float32).astype(np.float64).reshape(shape)


def rope(x, pos, kind, dims, base):
    x = x.copy()
    half = dims // 2
    for r, p in enumerate(pos):
        for i in range(half):
            th = p * base ** (-2.0 * i / dims)
            a, b = (2 * i, 2 * i + 1) if kind == "adjacent" else (i, i + half)
            xa, xb = x[r, a], x[r, b]
            x[r, a] = xa * math.cos(th) - xb * math.sin(th)
            x[r, b] = xa * math.sin(th) + xb * math.cos(th)
    return x


def visible(c, p, j, S, causal_on):
    sp = c.get("sparsity")
    g = c.get("n_global", 0)
    if sp in ("sliding", "dilated"):
        if p < g or j < g:
            return True
        dil = c.get("dilation", 1) if sp == "dilated" else 1
        d = abs(p - j)
        return d <= c.get("window", 0) * dil and d % dil == 0
    if sp == "bigbird":
        bs = c["block_size"]
        a, b = p // bs, j // bs
        if a < g or b < g or abs(a - b) <= c.get("window", 0):
            return True
        n = a + 1 if causal_on else -(-S // bs)
        for r in range(c.get("n_random_blocks", 0)):
            x = splitmix64(((c.get("seed", 0) ^ ((a * 0x9E3779B97F4A7C15) & M64))
                            + r) & M64)
            if x % n == b:
                return True
        return False
    return True


def attend(case):
    H, Hkv, L, S, dk = case["H"], case["Hkv"], case["L"], case["S"], case["dk"]
    c = case["cfg"]
    causal = case.get("causal", "none")
    q = tensor((H, L, dk), 1.0, 0.7, math.sin)
    k = tensor((Hkv, S, dk), 0.3, 0.45, math.cos)
    v = tensor((Hkv, S, dk), 0.2, 1.3, math.sin)
    q0 = S - L if causal == "bottom_right" else 0
    qpos = [q0 + i for i in range(L)]
    if c.get("rope"):
        dims = c.get("rope_dims") or dk
        base = c.get("rope_base") or 10000.0
        q = np.stack([rope(q[h], qpos, c["rope"], dims, base) for h in range(H)])
        k = np.stack([rope(k[h], range(S), c["rope"], dims, base)
                      for h in range(Hkv)])
    pad = case.get("pad", [])
    slopes = get_slopes(H)
    out = np.zeros((H, L, dk))
    w = np.zeros((H, L, S))
    for h in range(H):
        kh = h // (H // Hkv)
        for i in range(L):
            p = qpos[i]
            logit = np.full(S, -np.inf)
            for j in range(S):
                if causal != "none" and j > p:
                    continue
                if j in pad or not visible(c, p, j, S, causal != "none"):
                    continue
                s = q[h, i] @ k[kh, j] / math.sqrt(dk)
                if c.get("relative") == "alibi":
                    s -= slopes[h] * abs(j - p)
                elif c.get("relative") == "t5":
                    nb = c["num_buckets"]
                    bk = t5_bucket(j - p, c.get("bidirectional", 1), nb,
                                   c["max_distance"])
                    s += np.float32(0.1 * (bk * H + h) - 0.3)
                logit[j] = s
            if np.all(logit == -np.inf):
                continue
            e = np.exp(logit - logit.max())
            w[h, i] = e / e.sum()
            out[h, i] = w[h, i] @ v[kh]
    return out, w


CASES = [
    dict(name="sliding_window_2^63-1", H=2, Hkv=2, L=3, S=5, dk=4,
         cfg=dict(sparsity="sliding", window=BIG)),
    dict(name="sliding_huge_global_rope_bottom_right", H=2, Hkv=2, L=3, S=5,
         dk=4, causal="bottom_right",
         cfg=dict(sparsity="sliding", window=BIG, n_global=BIG, rope="half")),
    dict(name="dilation_2^63-1_alibi", H=2, Hkv=1, L=4, S=4, dk=2,
         cfg=dict(sparsity="dilated", window=1, dilation=BIG,
                  relative="alibi")),
    dict(name="dilated_window_2^62", H=1, Hkv=1, L=5, S=5, dk=2,
         cfg=dict(sparsity="dilated", window=BIG // 2, dilation=2)),
    dict(name="bigbird_huge_t5_huge", H=2, Hkv=2, L=4, S=6, dk=2,
         cfg=dict(sparsity="bigbird", block_size=BIG, window=BIG,
                  n_global=BIG, n_random_blocks=4096, relative="t5",
                  num_buckets=8, max_distance=BIG, bidirectional=1)),
    dict(name="bigbird_many_draws", H=1, Hkv=1, L=7, S=7, dk=2,
         cfg=dict(sparsity="bigbird", block_size=1, window=0,
                  n_random_blocks=2, seed=12345)),
    dict(name="bigbird_many_draws_causal", H=1, Hkv=1, L=7, S=7, dk=2,
         causal="top_left",
         cfg=dict(sparsity="bigbird", block_size=1, window=0,
                  n_random_blocks=2, seed=12345)),
    dict(name="bigbird_huge_window_causal", H=1, Hkv=1, L=5, S=5, dk=2,
         causal="top_left",
         cfg=dict(sparsity="bigbird", block_size=2, window=BIG)),
    dict(name="window0_padding_all_masked", H=1, Hkv=1, L=4, S=4, dk=2,
         pad=[1, 3], cfg=dict(sparsity="sliding", window=0)),
    dict(name="L1_S1_rope_alibi_window0", H=1, Hkv=1, L=1, S=1, dk=2,
         causal="bottom_right",
         cfg=dict(sparsity="sliding", window=0, rope="adjacent",
                  relative="alibi")),
    dict(name="L_gt_S_bottom_right_mqa_rope_alibi_window", H=2, Hkv=1, L=5,
         S=3, dk=4, causal="bottom_right",
         cfg=dict(sparsity="sliding", window=1, rope="half",
                  relative="alibi")),
    dict(name="L_lt_S_bottom_right_bigbird_block_gt_S", H=3, Hkv=1, L=2,
         S=6, dk=2, causal="bottom_right",
         cfg=dict(sparsity="bigbird", block_size=10, n_random_blocks=1,
                  rope="adjacent", relative="alibi")),
]


def c_array(x):
    return ", ".join("%.9g" % v for v in x.ravel())


if __name__ == "__main__":
    for case in CASES:
        out, w = attend(case)
        print("/* %s */" % case["name"])
        print("static const double ref_out_%d[] = { %s };" %
              (CASES.index(case), c_array(out)))
        print("static const double ref_w_%d[] = { %s };" %
              (CASES.index(case), c_array(w)))
