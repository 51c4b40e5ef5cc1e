"""scaled_dot_product_attention against a float64 reference written from
torch.nn.functional.scaled_dot_product_attention's definition (PyTorch 1.13
has no public sdpa): softmax(q k^T * scale + mask) v, bool True = may
attend, is_causal top-left aligned."""

import math

import numpy as np
import pytest
import torch

import transformer
from conftest import assert_close, rand

sdpa = transformer.scaled_dot_product_attention


def reference(q, k, v, attn_mask=None, is_causal=False, scale=None):
    q, k, v = (torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v))
    L, S = q.shape[-2], k.shape[-2]
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = (q @ k.transpose(-2, -1)) * s
    if is_causal:
        allowed = torch.ones(L, S, dtype=torch.bool).tril()
        logits = logits.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        m = torch.from_numpy(np.asarray(attn_mask))
        if m.dtype == torch.bool:
            logits = logits.masked_fill(~m, float("-inf"))
        else:
            logits = logits + m.double()
    w = torch.softmax(logits, dim=-1)
    return w @ v, w


def allowed(rng, *shape):
    """bool 'may attend' pattern; key 0 always allowed."""
    m = rng.random(shape) < 0.65
    m[..., 0] = True
    return m


SHAPES = {2: (), 3: (3,), 4: (2, 3), 5: (2, 2, 3)}


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
@pytest.mark.parametrize("is_causal", [False, True])
def test_no_mask(rank, is_causal, rng):
    lead = SHAPES[rank]
    q, k, v = rand(rng, *lead, 5, 8), rand(rng, *lead, 7, 8), rand(rng, *lead, 7, 6)
    out, w = sdpa(q, k, v, is_causal=is_causal, need_weights=True)
    ref_out, ref_w = reference(q, k, v, is_causal=is_causal)
    assert out.shape == lead + (5, 6) and w.shape == lead + (5, 7)
    assert_close(out, ref_out)
    assert_close(w, ref_w)
    assert_close(sdpa(q, k, v, is_causal=is_causal), ref_out)


MASK_SHAPES = [
    (4, (5, 7)),            # [L, S]
    (4, (7,)),              # [S], broadcast over queries
    (4, (5, 1)),            # [L, 1]
    (4, (2, 1, 5, 7)),      # per batch, same for every head
    (4, (3, 5, 7)),         # per head (numpy broadcasting: H aligns)
    (4, (2, 3, 5, 7)),      # full
    (4, (1, 3, 1, 7)),
    (3, (3, 5, 7)),
    (3, (1, 5, 7)),
    (5, (2, 1, 3, 5, 7)),
    (2, (5, 7)),
]


@pytest.mark.parametrize("rank,mshape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast(rank, mshape, kind, rng):
    lead = SHAPES[rank]
    q, k, v = rand(rng, *lead, 5, 8), rand(rng, *lead, 7, 8), rand(rng, *lead, 7, 6)
    m = allowed(rng, *mshape)
    if kind == "float":
        f = (0.5 * rng.standard_normal(mshape)).astype(np.float32)
        f[~m] = -np.inf
        m = f
    out, w = sdpa(q, k, v, attn_mask=m, need_weights=True)
    ref_out, ref_w = reference(q, k, v, attn_mask=m)
    assert_close(out, ref_out)
    assert_close(w, ref_w)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mask_and_causal_combine(kind, rng):
    q, k, v = rand(rng, 2, 3, 6, 8), rand(rng, 2, 3, 6, 8), rand(rng, 2, 3, 6, 8)
    m = allowed(rng, 6, 6)
    if kind == "float":
        f = rng.standard_normal((6, 6)).astype(np.float32)
        f[~m] = -np.inf
        m = f
    out = sdpa(q, k, v, attn_mask=m, is_causal=True)
    assert_close(out, reference(q, k, v, attn_mask=m, is_causal=True)[0])


@pytest.mark.parametrize("scale", [0.05, 1.0, -0.3, 0.0])
def test_scale(scale, rng):
    q, k, v = rand(rng, 2, 4, 8), rand(rng, 2, 6, 8), rand(rng, 2, 6, 3)
    out = sdpa(q, k, v, scale=scale)
    assert_close(out, reference(q, k, v, scale=scale)[0])


def test_causal_with_more_queries_than_keys(rng):
    q, k, v = rand(rng, 1, 7, 4), rand(rng, 1, 3, 4), rand(rng, 1, 3, 4)
    out = sdpa(q, k, v, is_causal=True)
    assert_close(out, reference(q, k, v, is_causal=True)[0])


def test_fully_masked_row_is_zero(rng):
    """PyTorch gives NaN; the library gives zero weights and output."""
    q, k, v = rand(rng, 4, 8), rand(rng, 6, 8), rand(rng, 6, 5)
    m = np.ones((4, 6), bool)
    m[1] = False
    out, w = sdpa(q, k, v, attn_mask=m, need_weights=True)
    assert (out[1] == 0).all() and (w[1] == 0).all()
    ref_out, _ = reference(q[[0, 2, 3]], k, v)
    assert_close(out[[0, 2, 3]], ref_out)


def test_rows_sum_to_one(rng):
    q, k, v = rand(rng, 2, 5, 8), rand(rng, 2, 9, 8), rand(rng, 2, 9, 8)
    _, w = sdpa(q, k, v, need_weights=True)
    np.testing.assert_allclose(w.sum(-1), 1, atol=1e-6)


def test_errors(rng):
    q = rand(rng, 2, 5, 8)
    with pytest.raises(transformer.UnsupportedError):
        sdpa(q, q, q, dropout_p=0.1)
    with pytest.raises(NotImplementedError):
        sdpa(q, q, q, dropout_p=0.1)
    with pytest.raises(transformer.ShapeError):
        sdpa(q, rand(rng, 3, 5, 8), q)
    with pytest.raises(ValueError):
        sdpa(q, q[..., :4], q)
    with pytest.raises(transformer.ShapeError):
        sdpa(q, q, q, attn_mask=np.ones((4, 5), bool))
    with pytest.raises(TypeError):
        sdpa(q, q, q, attn_mask=np.ones((5, 5), np.int32))
    with pytest.raises(TypeError):
        sdpa(None, q, q)
    with pytest.raises(transformer.ShapeError):
        sdpa(q[0, 0], q[0, 0], q[0, 0])
