"""Functions, as in torch.nn.functional."""

import math

import numpy as np

from . import _lowlevel as _ll
from ._core import (CAUSAL_NONE, CAUSAL_TOP_LEFT, MASK_ADDITIVE, MASK_ALLOW,
                    as_float, as_float32, as_int, as_mask, enum_names)
from ._errors import ShapeError, UnsupportedError
from ._torch import torch_results

__all__ = ["scaled_dot_product_attention",
           "scaled_dot_product_attention_backward", "attention",
           "sinusoidal_positional_encoding"]


def _mask_for(mask, lead, L, S, B, H):
    """Broadcasts an sdpa mask ([..., L, S], numpy rules) onto the query's
    leading axes and returns it as the library takes it: [L, S], [B, L, S]
    (the same for every head) or [B, H, L, S]."""
    m, is_bool = as_mask(mask, "attn_mask")
    full = tuple(lead) + (L, S)
    if m.ndim == 0 or m.ndim > len(full):
        raise ShapeError(f"attn_mask of shape {m.shape} does not broadcast to "
                         f"the attention shape {list(full)}")
    try:
        if np.broadcast_shapes(m.shape, full) != full:
            raise ValueError
    except ValueError:
        raise ShapeError(f"attn_mask of shape {m.shape} does not broadcast to "
                         f"the attention shape {list(full)}") from None
    m = m.reshape((1,) * (len(full) - m.ndim) + m.shape)
    mlead = m.shape[:-2]
    if all(d == 1 for d in mlead):
        out = np.broadcast_to(m.reshape(m.shape[-2:]), (L, S))
    elif len(lead) >= 2 and mlead[-1] == 1:        # same for every head
        out = np.broadcast_to(m, tuple(lead[:-1]) + (1, L, S)).reshape(B, L, S)
    else:
        out = np.broadcast_to(m, full).reshape(B, H, L, S)
    return np.ascontiguousarray(out), (MASK_ALLOW if is_bool else MASK_ADDITIVE)


@torch_results
def scaled_dot_product_attention(query, key, value, attn_mask=None,
                                 dropout_p=0.0, is_causal=False, scale=None,
                                 *, need_weights=False):
    """Scaled dot-product attention, as
    ``torch.nn.functional.scaled_dot_product_attention``:

        weights = softmax(query @ key^T * scale + mask), output = weights @ value

    Args:
        query: ``[..., L, E]`` (e.g. ``[N, L, E]`` or ``[N, H, L, E]``).
        key: ``[..., S, E]``; value: ``[..., S, Ev]``, with the same leading
            axes as query.
        attn_mask: broadcastable to ``[..., L, S]``.  bool: True = MAY attend
            (PyTorch's sdpa convention, the opposite of MultiheadAttention);
            float: added to the scaled logits (-inf blocks).
        dropout_p: must be 0 (inference).
        is_causal: query i attends to keys j <= i (top-left aligned, as
            PyTorch); combines with attn_mask.
        scale: logit scale; None means 1 / sqrt(E).
        need_weights: (keyword, not in PyTorch) also return the weights.

    Returns:
        output ``[..., L, Ev]`` (float32), or ``(output, weights)`` with
        weights ``[..., L, S]`` when need_weights.  A query whose keys are
        all masked gets zero weights and a zero output (PyTorch: NaN).
    """
    if as_float(dropout_p, "dropout_p") != 0.0:
        raise UnsupportedError("dropout_p must be 0: libtransformer runs "
                               "inference only")
    q, k, v, masks, c_scale, lead, (B, H, L, S, Ev) = _sdpa_args(
        query, key, value, attn_mask, is_causal, scale)
    out = np.empty((B, H, L, Ev), np.float32)
    weights = np.empty((B, H, L, S), np.float32) if need_weights else None
    _ll.tfm_sdpa(q, k, v, masks, c_scale, out, weights)
    out = out.reshape(lead + (L, Ev))
    if need_weights:
        return out, weights.reshape(lead + (L, S))
    return out


@torch_results
def scaled_dot_product_attention_backward(query, key, value, grad_output,
                                          attn_mask=None, is_causal=False,
                                          scale=None):
    """The gradients of :func:`scaled_dot_product_attention` (what
    ``torch.autograd`` gives for ``F.scaled_dot_product_attention``), by
    FlashAttention-2's tiled backward (no ``[L, S]`` matrix is built):

        grad_query, grad_key, grad_value = \
            scaled_dot_product_attention_backward(query, key, value,
                                                  grad_output, ...)

    query, key, value, attn_mask, is_causal, scale: those of the forward;
    grad_output ``[..., L, Ev]``: the loss's gradient with respect to its
    output.  Returns three float32 arrays shaped as query, key and value.
    Masked keys get no gradient; a query whose keys are all masked gets
    zeros.  Raises NonFiniteError when grad_output holds NaN or infinity.
    """
    q, k, v, masks, c_scale, lead, (B, H, L, S, Ev) = _sdpa_args(
        query, key, value, attn_mask, is_causal, scale)
    dout = as_float32(grad_output, "grad_output")
    if dout.shape != lead + (L, Ev):
        raise ShapeError(f"grad_output must have the output's shape "
                         f"{list(lead + (L, Ev))}, got {list(dout.shape)}")
    dq, dk, dv = (np.empty(x.shape, np.float32) for x in (q, k, v))
    _ll.tfm_sdpa_backward(q, k, v, masks, c_scale, None, None,
                          np.ascontiguousarray(dout).reshape(B, H, L, Ev),
                          dq, dk, dv)
    if scale is not None and c_scale == 1.0 and as_float(scale, "scale") == 0:
        dq[...] = 0.0                       # logits do not depend on q, k
        dk[...] = 0.0
    return (dq.reshape(np.shape(query)), dk.reshape(np.shape(key)),
            dv.reshape(np.shape(value)))


def _sdpa_args(query, key, value, attn_mask, is_causal, scale):
    """The C arguments of one sdpa call: q, k, v as [B, H, L|S, E]
    float32, the masks tuple, the C scale, the leading axes and the sizes
    (B, H, L, S, Ev)."""
    q = as_float32(query, "query")
    k = as_float32(key, "key")
    v = as_float32(value, "value")
    if q.ndim < 2:
        raise ShapeError(f"query must be [..., L, E], got shape {q.shape}")
    if k.ndim != q.ndim or v.ndim != q.ndim:
        raise ShapeError(f"query, key and value must have the same number of "
                         f"dimensions, got {q.shape}, {k.shape}, {v.shape}")
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape[:-2] != lead:
        raise ShapeError(f"query, key and value must share their leading "
                         f"axes, got {q.shape}, {k.shape}, {v.shape}")
    L, S, Ev = q.shape[-2], k.shape[-2], v.shape[-1]
    if q.ndim == 2:
        B, H = 1, 1
    elif q.ndim == 3:
        B, H = lead[0], 1
    else:
        B, H = int(np.prod(lead[:-1], dtype=np.int64)), lead[-1]
    causal = CAUSAL_TOP_LEFT if is_causal else CAUSAL_NONE
    masks = None
    if attn_mask is not None:
        m, kind = _mask_for(attn_mask, lead, L, S, B, H)
        masks = (causal, None, MASK_ADDITIVE, m, kind)
    elif is_causal:
        masks = (causal, None, MASK_ADDITIVE, None, MASK_ADDITIVE)
    if scale is None:
        c_scale = 0.0                       # the library's 1/sqrt(E)
    else:
        c_scale = as_float(scale, "scale")
        if c_scale == 0.0:                  # 0 means "default" in C:
            q = np.zeros_like(q)            # zero logits instead
            c_scale = 1.0
    return (np.ascontiguousarray(q).reshape(B, H, L, q.shape[-1]),
            np.ascontiguousarray(k).reshape(B, H, S, k.shape[-1]),
            np.ascontiguousarray(v).reshape(B, H, S, Ev), masks, c_scale,
            lead, (B, H, L, S, Ev))


@torch_results
def attention(query, key, value, attn_mask=None, is_causal=False,
              need_weights=False, **variant):
    """One call of attention with a variant (transformer.Attention made for
    the arrays' sizes, run once and freed):

        attention(query [N, H, L, d_k], key [N, H_kv, S, d_k],
                  value [N, H_kv, S, d_v], attn_mask=None, is_causal=False,
                  need_weights=False, rope="half", relative="alibi", ...)

    The head counts and widths come from the shapes (n_kv_heads from key's
    H_kv unless given); masks, is_causal and the variant keywords are
    Attention's.  Variants with learned parameters (general, additive,
    Shaw, T5) would run with their initial values: use Attention and load
    them instead.  Returns the output, or (output, weights)."""
    from .attention_layers import Attention
    q = as_float32(query, "query")
    k = as_float32(key, "key")
    v = as_float32(value, "value")
    if q.ndim not in (3, 4) or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ShapeError(f"query, key and value must be [N, H, L, d] (or "
                         f"3-D unbatched), got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    if variant.get("n_kv_heads") is None and k.shape[-3] != q.shape[-3]:
        variant["n_kv_heads"] = k.shape[-3]
    with Attention(q.shape[-1], q.shape[-3], v.shape[-1], **variant) as a:
        return a(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                 need_weights=need_weights)


def sinusoidal_positional_encoding(length, d_model, offset=0, base=10000.0,
                                   layout="interleaved"):
    """The sinusoidal positional encoding of "Attention Is All You Need",
    section 3.5, for positions offset .. offset+length-1: a float32
    ``[length, d_model]`` array.  Add it to ``[N, L, d_model]`` embeddings
    (broadcasting over N).

    layout "interleaved" (the paper's): PE[pos, 2i] = sin(pos / base^(2i/d))
    and PE[pos, 2i+1] = cos(pos / base^(2i/d)).
    layout "concat" (fairseq, tensor2tensor; needs d_model >= 4): with
    h = d_model // 2, PE[pos, i] = sin(pos * base^(-i/(h-1))) and
    PE[pos, h+i] = cos(same) for i < h (an odd d_model's last column is 0).
    """
    from ._variants import SINUSOIDAL_LAYOUTS, option
    length = as_int(length, "length", 1)
    d_model = as_int(d_model, "d_model", 1)
    offset = as_int(offset, "offset", 0)
    base = as_float(base, "base")
    code = option(SINUSOIDAL_LAYOUTS, layout, "layout")
    if not math.isfinite(base) or base <= 1.0:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(f"base must be finite and > 1, got {base}")
    pe = np.empty((length, d_model), np.float32)
    if code == _ll.TFM_SINUSOIDAL_INTERLEAVED:
        _ll.tfm_sinusoidal_encoding(pe, offset, base)
    else:
        _ll.tfm_sinusoidal_encoding_ex(pe, offset, base, code)
    return pe


_REDUCTIONS = enum_names(_ll.TFM_ENUM_REDUCTION)   # {"mean": 0, "sum": 1}


def _cross_entropy(input, target, weight, ignore_index, reduction,
                   label_smoothing, want_grad):
    """(loss, d loss / d input or None) of cross_entropy's arguments."""
    if weight is not None:
        raise UnsupportedError("cross_entropy: class weights are not "
                               "supported")
    if reduction not in _REDUCTIONS:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(
            f"cross_entropy: reduction must be 'mean' or 'sum', got "
            f"{reduction!r}")
    x = as_float32(input, "input")
    t = np.asarray(target)
    if x.ndim == 1:                         # [C] with a scalar target
        x2 = x.reshape(1, -1)
        moved = False
    elif x.ndim == 2:
        x2 = x
        moved = False
    else:                                   # torch's [N, C, d1, ...]
        x2 = np.ascontiguousarray(np.moveaxis(x, 1, -1)).reshape(
            -1, x.shape[1])
        moved = True
    rows = x2.shape[0]
    if t.size != rows or (x.ndim > 2 and
                          t.shape != (x.shape[0],) + x.shape[2:]) or \
            (x.ndim == 2 and t.shape != (rows,)):
        raise ShapeError(f"cross_entropy: target of shape {list(t.shape)} "
                         f"does not fit input of shape {list(x.shape)}")
    t32 = np.ascontiguousarray(t.reshape(-1), np.int32)
    loss = np.zeros(1, np.float32)
    grad = np.empty(x2.shape, np.float32) if want_grad else None
    _ll.tfmpy_cross_entropy(np.ascontiguousarray(x2), t32, int(ignore_index),
                            as_float(label_smoothing, "label_smoothing"),
                            _REDUCTIONS[reduction], 0, loss, grad)
    if grad is not None:
        if moved:
            grad = np.ascontiguousarray(np.moveaxis(
                grad.reshape((x.shape[0],) + x.shape[2:] + (x.shape[1],)),
                -1, 1))
        else:
            grad = grad.reshape(x.shape)
    return float(loss[0]), grad


def cross_entropy(input, target, weight=None, ignore_index=-100,
                  reduction="mean", label_smoothing=0.0):
    """``torch.nn.functional.cross_entropy`` for class-index targets
    (PyTorch 1.13 semantics, computed by the library's tfm_cross_entropy):
    input ``[C]``, ``[N, C]`` or torch's ``[N, C, d1, ...]``; target the
    class indices (``[]``, ``[N]``, ``[N, d1, ...]``); targets equal to
    ignore_index contribute nothing, label smoothing included, and the
    mean is over the targets kept (0.0 when every target is ignored, where
    torch gives nan).  reduction: "mean" or "sum" ("none" and class
    weights are not supported).  Returns a float."""
    return _cross_entropy(input, target, weight, ignore_index, reduction,
                          label_smoothing, False)[0]


def cross_entropy_backward(input, target, weight=None, ignore_index=-100,
                           reduction="mean", label_smoothing=0.0):
    """``(loss, grad_input)``: :func:`cross_entropy` and its gradient with
    respect to input (what ``torch.autograd`` gives), a float32 array of
    input's shape."""
    return _cross_entropy(input, target, weight, ignore_index, reduction,
                          label_smoothing, True)
