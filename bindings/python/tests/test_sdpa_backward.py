"""scaled_dot_product_attention_backward against torch.autograd (float32)
through the math definition of F.scaled_dot_product_attention (PyTorch
1.13 has no public sdpa): softmax(q k^T * scale + mask) v, bool True =
may attend, is_causal top-left aligned; a fully masked row's weights are
zero (PyTorch: NaN), so its gradients are zero."""

import math

import numpy as np
import pytest
import torch

import transformer

bwd = transformer.scaled_dot_product_attention_backward


def torch_grads(q, k, v, dout, attn_mask=None, is_causal=False, scale=None):
    t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    L, S = q.shape[-2], k.shape[-2]
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = (t[0] @ t[1].transpose(-2, -1)) * s
    hidden = torch.zeros(logits.shape, dtype=torch.bool)
    if is_causal:
        hidden |= ~torch.ones(L, S, dtype=torch.bool).tril()
    if attn_mask is not None:
        m = torch.from_numpy(np.asarray(attn_mask))
        if m.dtype == torch.bool:
            hidden |= ~m
        else:
            logits = logits + m
            hidden |= m == float("-inf")
    allh = hidden.all(-1, keepdim=True)
    logits = logits.masked_fill(hidden, float("-inf")).masked_fill(allh, 0)
    w = torch.softmax(logits, -1).masked_fill(allh, 0)
    (w @ t[2]).backward(torch.tensor(dout))
    return [x.grad.numpy() for x in t]


def close(got, want):
    scale = max(float(np.abs(want).max()), 1e-3)
    assert np.abs(got - want).max() <= 1e-4 * scale


@pytest.mark.parametrize("shape,causal", [
    ((2, 3, 17, 23, 8, 5), False),
    ((1, 2, 130, 130, 16, 16), True),
    ((1, 1, 200, 70, 64, 32), True),
])
def test_grads_equal_torch(shape, causal):
    B, H, L, S, E, Ev = shape
    rng = np.random.default_rng(1)
    q = rng.standard_normal((B, H, L, E), np.float32)
    k = rng.standard_normal((B, H, S, E), np.float32)
    v = rng.standard_normal((B, H, S, Ev), np.float32)
    dout = rng.standard_normal((B, H, L, Ev), np.float32)
    got = bwd(q, k, v, dout, is_causal=causal)
    for g, w in zip(got, torch_grads(q, k, v, dout, is_causal=causal)):
        assert g.shape == w.shape and g.dtype == np.float32
        close(g, w)


def test_masks_scale_and_3d():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((3, 6, 4), np.float32)     # [N, L, E]
    k = rng.standard_normal((3, 9, 4), np.float32)
    v = rng.standard_normal((3, 9, 2), np.float32)
    dout = rng.standard_normal((3, 6, 2), np.float32)
    allow = rng.random((6, 9)) < 0.6
    allow[2] = False                                   # a fully masked row
    got = bwd(q, k, v, dout, attn_mask=allow, scale=0.4)
    for g, w in zip(got, torch_grads(q, k, v, dout, allow, scale=0.4)):
        close(g, w)
    assert np.all(got[0][:, 2] == 0)
    add = rng.standard_normal((3, 6, 9)).astype(np.float32)
    add[add < -1.0] = -np.inf
    got = bwd(q, k, v, dout, attn_mask=add, is_causal=True)
    for g, w in zip(got, torch_grads(q, k, v, dout, add, True)):
        close(g, w)


def test_torch_tensors_in_and_out():
    q = torch.randn(1, 2, 5, 4)
    dq, dk, dv = bwd(q, q, q, torch.randn(1, 2, 5, 4))
    assert isinstance(dq, torch.Tensor) and dk.shape == (1, 2, 5, 4)


def test_errors():
    q = np.ones((1, 1, 3, 4), np.float32)
    with pytest.raises(transformer.ShapeError):
        bwd(q, q, q, np.ones((1, 1, 3, 5), np.float32))
    bad = np.ones((1, 1, 3, 4), np.float32)
    bad[0, 0, 1, 2] = np.nan
    with pytest.raises(transformer.NonFiniteError):
        bwd(q, q, q, bad)
