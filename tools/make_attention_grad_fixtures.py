#!/usr/bin/env python3
"""Reference gradients of scaled dot-product attention for
tests/test_attention_backward.c.

Two kinds of case, written to one little-endian binary file:
  * torch.autograd in float32 of PyTorch's math attention (softmax of the
    masked, scaled logits, times v) with every mask kind of attention.h;
  * float64 central finite differences (numpy, eps 1e-6) of the loss
    sum(out * grad_out) on tiny shapes (--fd cases).

The masks follow attention.h: causal top-left (j <= i) and bottom-right
(j <= i + S - L); key padding and attn masks read as BLOCK (nonzero =
hidden), ALLOW (zero = hidden) or ADDITIVE (added; -inf hides).  A query
row whose keys are all hidden gets zero weights (and so zero gradients).

File layout: int32 n_cases, then per case int32 [B, H, L, S, d_k, d_v,
causal, kp_kind, am_kind, am_rank, is_fd], float32 scale, then float32
arrays q, k, v, key_padding [B, S] (kp_kind >= 0), attn_mask (am_kind >=
0; [L, S], [B, L, S] or [B, H, L, S] by am_rank), grad_out, out, lse,
grad_q, grad_k, grad_v.

Usage: make_attention_grad_fixtures.py --out FILE [--small]
(--small: the tiny cases only, as committed in tests/fixtures/).
"""
import argparse
import struct

import numpy as np

BLOCK, ALLOW, ADDITIVE = 0, 1, 2


def hidden_and_bias(B, H, L, S, causal, kp, kp_kind, am, am_kind):
    """hidden [B, H, L, S] (bool) and additive bias [B, H, L, S] (float64)."""
    hidden = np.zeros((B, H, L, S), bool)
    bias = np.zeros((B, H, L, S))
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    if causal == 1:
        hidden |= (j > i)[None, None]
    elif causal == 2:
        hidden |= (j > i + S - L)[None, None]

    def apply(m, kind):
        nonlocal hidden, bias
        if kind == BLOCK:
            hidden |= m != 0
        elif kind == ALLOW:
            hidden |= m == 0
        else:
            hidden |= m == -np.inf
            bias = bias + np.where(m == -np.inf, 0.0, m)

    if kp is not None:
        apply(np.broadcast_to(kp[:, None, None, :], (B, H, L, S)), kp_kind)
    if am is not None:
        m = am
        while m.ndim < 4:
            m = m[None] if m.ndim == 2 else m[:, None]
        apply(np.broadcast_to(m, (B, H, L, S)), am_kind)
    return hidden, bias


def forward64(q, k, v, scale, hidden, bias):
    x = scale * q @ np.swapaxes(k, -1, -2) + bias
    x = np.where(hidden, -np.inf, x)
    allh = hidden.all(-1, keepdims=True)
    xs = np.where(allh, 0.0, x)
    m = xs.max(-1, keepdims=True)
    e = np.exp(xs - m)
    p = e / e.sum(-1, keepdims=True)
    p = np.where(allh, 0.0, p)
    lse = np.where(allh[..., 0], -np.inf,
                   (m + np.log(e.sum(-1, keepdims=True)))[..., 0])
    return p @ v, lse


def torch_case(q, k, v, scale, hidden, bias, dout):
    import torch
    t = [torch.tensor(a, dtype=torch.float32, requires_grad=True)
         for a in (q, k, v)]
    hid = torch.tensor(hidden)
    allh = hid.all(-1, keepdim=True)
    x = scale * t[0] @ t[1].transpose(-1, -2) + torch.tensor(
        bias, dtype=torch.float32)
    x = x.masked_fill(hid, float("-inf")).masked_fill(allh, 0.0)
    p = torch.softmax(x, -1).masked_fill(allh, 0.0)
    out = p @ t[2]
    lse = torch.logsumexp(x, -1).masked_fill(allh[..., 0], float("-inf"))
    out.backward(torch.tensor(dout, dtype=torch.float32))
    return (out.detach().numpy(), lse.detach().numpy(),
            *[a.grad.numpy() for a in t])


def fd_case(q, k, v, scale, hidden, bias, dout, eps=1e-6):
    out, lse = forward64(q, k, v, scale, hidden, bias)
    grads = []
    for idx in range(3):
        ops = [q.copy(), k.copy(), v.copy()]
        g = np.zeros_like(ops[idx])
        it = np.nditer(g, flags=["multi_index"])
        for _ in it:
            mi = it.multi_index
            keep = ops[idx][mi]
            ops[idx][mi] = keep + eps
            lp = (forward64(*ops, scale, hidden, bias)[0] * dout).sum()
            ops[idx][mi] = keep - eps
            lm = (forward64(*ops, scale, hidden, bias)[0] * dout).sum()
            ops[idx][mi] = keep
            g[mi] = (lp - lm) / (2 * eps)
        grads.append(g)
    return (out, lse, *grads)


def make_case(rng, B, H, L, S, dk, dv, causal=0, kp_kind=-1, am_kind=-1,
              am_rank=2, scale=0.0, fd=False, kp_all_b=None,
              am_hide_row=None):
    q = rng.standard_normal((B, H, L, dk))
    k = rng.standard_normal((B, H, S, dk))
    v = rng.standard_normal((B, H, S, dv))
    dout = rng.standard_normal((B, H, L, dv))
    kp = am = None
    if kp_kind >= 0:
        if kp_kind == ADDITIVE:
            kp = rng.standard_normal((B, S))
            kp[rng.random((B, S)) < 0.2] = -np.inf
        else:
            hide = rng.random((B, S)) < 0.3
            if kp_all_b is not None:
                hide[kp_all_b] = True
            kp = np.where(hide, 1.0, 0.0) if kp_kind == BLOCK else \
                np.where(hide, 0.0, 1.0)
    if am_kind >= 0:
        shape = {2: (L, S), 3: (B, L, S), 4: (B, H, L, S)}[am_rank]
        if am_kind == ADDITIVE:
            am = rng.standard_normal(shape)
            am[rng.random(shape) < 0.2] = -np.inf
            if am_hide_row is not None:
                am[..., am_hide_row, :] = -np.inf
        else:
            hide = rng.random(shape) < 0.3
            if am_hide_row is not None:
                hide[..., am_hide_row, :] = True
            am = np.where(hide, 1.0, 0.0) if am_kind == BLOCK else \
                np.where(hide, 0.0, 1.0)
    if fd:
        q, k, v, dout = (np.float32(a).astype(np.float64)
                         for a in (q, k, v, dout))
    s = scale if scale != 0.0 else 1.0 / np.sqrt(dk)
    hidden, bias = hidden_and_bias(B, H, L, S, causal, kp, kp_kind, am,
                                   am_kind)
    if fd:
        bias = np.float32(bias).astype(np.float64)
        res = fd_case(q, k, v, np.float32(s).astype(np.float64), hidden,
                      bias, dout)
    else:
        res = torch_case(q, k, v, np.float32(s), hidden, bias, dout)
    head = struct.pack("<11if", B, H, L, S, dk, dv, causal, kp_kind, am_kind,
                       am_rank, int(fd), scale)
    arrays = [q, k, v] + ([kp] if kp is not None else []) + \
        ([am] if am is not None else []) + [dout] + list(res)
    return head + b"".join(np.ascontiguousarray(a, "<f4").tobytes()
                           for a in arrays)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(20261202)
    cases = [
        # float64 finite differences, tiny shapes
        dict(B=1, H=2, L=3, S=4, dk=3, dv=2, fd=True),
        dict(B=1, H=2, L=3, S=5, dk=3, dv=2, causal=2, am_kind=ADDITIVE,
             am_rank=2, fd=True),
        dict(B=2, H=1, L=4, S=3, dk=2, dv=3, causal=1, kp_kind=BLOCK,
             fd=True, scale=0.7),
        dict(B=2, H=2, L=3, S=4, dk=2, dv=2, am_kind=ALLOW, am_rank=4,
             am_hide_row=1, fd=True),
        # torch.autograd, float32
        dict(B=2, H=3, L=17, S=23, dk=8, dv=5),
        dict(B=1, H=2, L=5, S=7, dk=4, dv=4, scale=0.3),
        dict(B=2, H=1, L=6, S=9, dk=4, dv=3, kp_kind=BLOCK, kp_all_b=1),
        dict(B=2, H=2, L=5, S=8, dk=4, dv=4, kp_kind=ALLOW),
        dict(B=2, H=2, L=5, S=8, dk=4, dv=4, kp_kind=ADDITIVE),
        dict(B=1, H=2, L=6, S=6, dk=4, dv=4, am_kind=BLOCK, am_rank=2,
             am_hide_row=2),
        dict(B=2, H=2, L=5, S=7, dk=4, dv=4, am_kind=ALLOW, am_rank=3),
        dict(B=2, H=2, L=6, S=6, dk=4, dv=4, causal=1, am_kind=ADDITIVE,
             am_rank=4, am_hide_row=3),
        dict(B=1, H=2, L=9, S=4, dk=4, dv=4, causal=2),
    ]
    if not args.small:
        cases += [
            dict(B=1, H=2, L=130, S=130, dk=16, dv=16, causal=1),
            dict(B=1, H=2, L=37, S=300, dk=32, dv=8, causal=2),
            dict(B=1, H=1, L=140, S=20, dk=8, dv=8, causal=1),
            dict(B=1, H=1, L=150, S=20, dk=8, dv=8, causal=2),
            dict(B=2, H=2, L=9, S=140, dk=8, dv=8, kp_kind=BLOCK, kp_all_b=1),
            dict(B=2, H=2, L=129, S=200, dk=8, dv=8, kp_kind=ADDITIVE,
                 am_kind=BLOCK, am_rank=3, causal=2),
            dict(B=1, H=1, L=300, S=600, dk=64, dv=64, causal=1),
            dict(B=1, H=3, L=257, S=383, dk=64, dv=32, am_kind=ADDITIVE,
                 am_rank=4),
        ]
    blobs = [make_case(rng, **c) for c in cases]
    with open(args.out, "wb") as f:
        f.write(struct.pack("<i", len(blobs)))
        for b in blobs:
            f.write(b)


if __name__ == "__main__":
    main()
