"""The attention modules: MultiheadAttention (torch.nn's, with the
attention variants of include/transformer/variants.h) and Attention (a
variant on per-head arrays, the functional form).  Public through
transformer.modules, transformer.nn and transformer (shape conventions: see
modules.py).
"""

import numpy as np

from . import _lowlevel as _ll
from ._core import (CAUSAL_NONE, CAUSAL_TOP_LEFT, MASK_ADDITIVE, BatchIO,
                    Module, as_float, as_float32, as_int, check_float32_dtype,
                    enum_names, is_batched, mha_masks)
from ._errors import InvalidArgumentError, ShapeError, UnsupportedError
from ._variants import HasAttentionVariant, normalize, to_config, variant_repr
from .functional import _mask_for
from .layers import _linear_view

__all__ = ["MultiheadAttention", "Attention"]


# ---- MultiheadAttention -----------------------------------------------------

class MultiheadAttention(HasAttentionVariant, Module):
    """Multi-head attention, as ``torch.nn.MultiheadAttention``.

    ``MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
    add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None,
    batch_first=False, **variant)``

    MultiHead(Q, K, V) = Concat(head_1..head_h) W_O with
    head_i = softmax(Q W_Qi (K W_Ki)^T / sqrt(E / h)) V W_Vi.

    Args:
        embed_dim: E, width of the query and of the output.
        num_heads: h; must divide embed_dim.
        dropout: the dropout probability in training mode (torch's).
        bias: biases on the input and output projections.
        kdim, vdim: widths of key and value (default embed_dim).
        batch_first: True for ``[N, L, E]`` arrays (no copy), False
            (default) for ``[L, N, E]``.
        add_bias_kv: learned rows ``bias_k``, ``bias_v`` ``[1, 1, E]``
            appended to the keys and values (PyTorch's; drawn with
            xavier_normal_); then one more key for every query.
        add_zero_attn: an all-zero key and value row appended after
            those.  Both extra keys are seen by every query: the masks
            are over the S given keys, as PyTorch pads them with zeros.
            Neither goes with a variant that uses positions (rope,
            relative, sparsity).
        **variant: (keywords, not in PyTorch) an attention variant of
            include/transformer/variants.h: ``score=``, ``scale=``,
            ``additive_dim=``, ``n_kv_heads=``, ``rope=``, ``rope_base=``,
            ``rope_dims=``, ``relative=``, ``max_distance=``,
            ``relative_values=``, ``num_buckets=``, ``bidirectional=``,
            ``sparsity=``, ``window=``, ``dilation=``, ``n_global=``,
            ``block_size=``, ``n_random_blocks=``, ``seed=`` (see
            ``help(transformer.Attention)``).  ``attention_config`` reads
            the variant back as a dict.

    Parameters (state_dict): ``in_proj_weight [3E, E]`` (or
    ``q_proj_weight [E, E]``, ``k_proj_weight [E, kdim]``,
    ``v_proj_weight [E, vdim]`` when kdim or vdim differ from E),
    ``in_proj_bias [3E]``, ``out_proj.weight [E, E]``, ``out_proj.bias [E]``.
    With ``n_kv_heads`` < num_heads the key and value rows shrink to
    ``n_kv_heads * E / num_heads`` each (``in_proj_weight [E + 2 *
    n_kv_heads * head_dim, E]``); a variant's own parameters
    (``score_weight``, ``temperature``, ``relative_key.weight``, ...)
    follow the projections.

    Call: ``mha(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` ->
    ``(attn_output, attn_weights)``

        query: ``[L, N, E]`` (``[N, L, E]`` if batch_first, ``[L, E]``
            unbatched); key ``[S, N, kdim]``; value ``[S, N, vdim]``.
        key_padding_mask: ``[N, S]`` (``[S]``); bool True = ignore that key,
            or float, added to the attention logits.
        attn_mask: ``[L, S]`` or ``[N * num_heads, L, S]``; bool True = may
            NOT attend, or float (additive, -inf blocks).
        is_causal: apply the causal mask (query i sees keys j <= i).  Unlike
            PyTorch's hint it needs no attn_mask; given both, both apply.
        need_weights: also return the attention weights.
        average_attn_weights: weights ``[N, L, S]`` averaged over heads
            (default), else ``[N, num_heads, L, S]``.

        attn_output: like query, ``[L, N, E]`` / ``[N, L, E]`` / ``[L, E]``.
        attn_weights: as above (without N when unbatched), or None when
            need_weights is False.

    A query whose keys are all masked gets zero weights and a zero output
    (PyTorch gives NaN there).
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True,
                 add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None,
                 batch_first=False, device=None, dtype=None, **variant):
        check_float32_dtype(dtype, device, "MultiheadAttention")
        self._variant = normalize(variant, "MultiheadAttention()")
        self.add_zero_attn = bool(add_zero_attn)
        self._add_bias_kv = bool(add_bias_kv)
        if not self._add_bias_kv:
            # torch's attributes without add_bias_kv (with it, bias_k and
            # bias_v are the parameters)
            self.__dict__["bias_k"] = self.__dict__["bias_v"] = None
        self.embed_dim = as_int(embed_dim, "embed_dim", 1)
        self.num_heads = as_int(num_heads, "num_heads", 1)
        self.kdim = self.embed_dim if kdim is None else as_int(kdim, "kdim", 1)
        self.vdim = self.embed_dim if vdim is None else as_int(vdim, "vdim", 1)
        self._qkv_same_embed_dim = self.kdim == self.vdim == self.embed_dim
        self.dropout = as_float(dropout, "dropout")
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.head_dim = self.embed_dim // self.num_heads
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        if self.__dict__.get("_add_bias_kv") or self.__dict__.get(
                "add_zero_attn"):
            o = _ll.tfm_mha_options()
            o.kdim, o.vdim, o.bias = self.kdim, self.vdim, int(self.bias)
            o.add_bias_kv = int(self._add_bias_kv)
            o.add_zero_attn = int(self.add_zero_attn)
            config = to_config(self._variant) if self._variant else None
            o.attention = config
            return _ll.tfm_mha_create_v2(self.embed_dim, self.num_heads, o)
        if self._variant:
            return _ll.tfm_mha_create_ex(self.embed_dim, self.num_heads,
                                         self.kdim, self.vdim, int(self.bias),
                                         to_config(self._variant))
        return _ll.tfm_mha_create(self.embed_dim, self.num_heads, self.kdim,
                                  self.vdim, int(self.bias))

    def forward(self, query, key, value, key_padding_mask=None,
                need_weights=True, attn_mask=None, average_attn_weights=True,
                is_causal=False, static_k=None, static_v=None):
        """Runs the layer; see the class docstring for shapes and masks.
        static_k / static_v (not in nn.MultiheadAttention.forward; those of
        F.multi_head_attention_forward): None, or precomputed keys / values
        ``[N * num_heads, S, head_dim]`` (or ``[N, num_heads, S,
        head_dim]``) used instead of projecting key / value; the masks are
        then over their S keys.  With add_bias_kv / add_zero_attn the
        weights have one more column for each.
        Returns ``(attn_output, attn_weights or None)``."""
        with self._use() as ptr:
            batched = is_batched(query, "query")
            io = BatchIO(self.batch_first, batched)
            q = io.take(query, "query")
            k = io.take(key, "key")
            v = io.take(value, "value")
            n, tgt_len, src_len = q.shape[0], q.shape[1], k.shape[1]
            statics = [self._static(x, n, name) for x, name in
                       ((static_k, "static_k"), (static_v, "static_v"))]
            for s in statics:
                if s is not None:
                    src_len = s.shape[2]
            masks = mha_masks(n, self.num_heads, batched, key_padding_mask,
                              attn_mask, is_causal)
            out = np.empty((n, tgt_len, self.embed_dim), np.float32)
            weights = None
            if need_weights:
                cols = (src_len + int(self.__dict__.get("_add_bias_kv", 0))
                        + int(self.__dict__.get("add_zero_attn", 0)))
                shape = ((n, tgt_len, cols) if average_attn_weights
                         else (n, self.num_heads, tgt_len, cols))
                weights = np.empty(shape, np.float32)
            if statics[0] is None and statics[1] is None:
                _ll.tfm_mha_forward(ptr, q, k, v, masks, out, weights)
            else:
                _ll.tfm_mha_forward_v2(ptr, q, k, v, statics[0], statics[1],
                                       masks, out, weights)
            if weights is not None and not batched:
                weights = weights[0]
        if self.training:
            self._keep_for_backward(q, k, v)
            self.__dict__["_saved_call"] = (
                masks, batched, any(s is not None for s in statics))
        return io.give(out), weights

    def backward(self, grad_output):
        """The gradients of the last training-mode call with respect to
        query, key and value, given ``grad_output`` (attn_output's shape
        and layout), as a tuple ``(grad_query, grad_key, grad_value)`` in
        the inputs' layouts; accumulates every projection parameter's
        gradient (:meth:`grad`), as ``torch.autograd`` does.  For
        self-attention the input's gradient is their sum.  The attention
        weights output has no gradient here (it is not differentiated)."""
        q, k, v = self._saved_for_backward()
        masks, batched, static = self.__dict__["_saved_call"]
        if static:
            raise UnsupportedError("MultiheadAttention.backward: static_k / "
                                   "static_v have no backward yet")
        io = BatchIO(self.batch_first, batched)
        g = np.ascontiguousarray(io.take(grad_output, "grad_output"))
        if g.shape != q.shape:
            raise ShapeError(f"grad_output must have attn_output's shape, "
                             f"got {list(np.shape(grad_output))}")
        gq, gk, gv = (np.empty(x.shape, np.float32) for x in (q, k, v))
        self._call(_ll.tfm_mha_backward, q, k, v, masks, g, gq, gk, gv)
        return io.give(gq), io.give(gk), io.give(gv)

    def _static(self, x, n, name):
        """static_k / static_v as a float32 [N, H_kv, S, head_dim] array."""
        if x is None:
            return None
        a = np.ascontiguousarray(as_float32(x, name))
        if a.ndim == 3:
            if a.shape[0] % n:
                raise ShapeError(f"{name} has {a.shape[0]} rows, expected a "
                                 f"multiple of the batch {n}")
            a = a.reshape(n, a.shape[0] // n, a.shape[1], a.shape[2])
        if a.ndim != 4:
            raise ShapeError(f"{name} must be [N * num_heads, S, head_dim] "
                             f"or [N, num_heads, S, head_dim], not "
                             f"{list(a.shape)}")
        return a

    def _child_specs(self):
        return [("out_proj", lambda: _linear_view(self, "out_proj"))]

    def _extra_repr(self):
        text = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if not self.bias:
            text += ", bias=False"
        if not self._qkv_same_embed_dim:
            text += f", kdim={self.kdim}, vdim={self.vdim}"
        return (text + f", batch_first={self.batch_first}"
                + variant_repr(self._variant))


# ---- Attention (the functional form of a variant) ---------------------------

_CAUSALS = {False: CAUSAL_NONE, True: CAUSAL_TOP_LEFT,
            **enum_names(_ll.TFM_ENUM_CAUSAL)}


def _causal(is_causal):
    key = is_causal.lower() if isinstance(is_causal, str) else is_causal
    try:
        return _CAUSALS[key]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            "is_causal must be False, True, 'none', 'top_left' or "
            f"'bottom_right'; got {is_causal!r}") from None


class Attention(HasAttentionVariant, Module):
    """Attention with a variant, on per-head arrays: the functional form
    of include/transformer/variants.h (tfm_attention_create/forward).  Not
    in PyTorch; with no variant it equals
    ``F.scaled_dot_product_attention``.

    ``Attention(head_dim, num_heads, value_dim=None, **variant)``

    Args:
        head_dim: d_k, width of each query/key head.
        num_heads: H, query heads.
        value_dim: d_v, width of each value head (default head_dim).
        **variant: keywords choosing the variant, each independent of the
            others (defaults: plain scaled dot product):

            score: "scaled_dot" (Vaswani et al. 2017, eq. 1), "dot"
                (Luong et al. 2015), "general" (Luong: q^T W_h k, learned
                ``score_weight [H, d_k, d_k]``), "additive" (Bahdanau et
                al. 2014: v^T tanh(W_q q + W_k k), ``additive_query``,
                ``additive_key [H, d_a, d_k]``, ``additive_v [H, d_a]``),
                "learned_temperature" (q.k / tau_h, ``temperature [H]``
                starting at sqrt(d_k)).
            scale: logit scale; None or 0 = the score's own.
            additive_dim: d_a (default d_k).
            n_kv_heads: key/value heads, dividing num_heads: 1 is
                multi-query (Shazeer 2019), between is grouped-query
                (Ainslie et al. 2023).
            rope: "adjacent" (pairs 2i, 2i+1: RoFormer, GPT-J, LLaMA) or
                "half" (pairs i, i + rope_dims/2: GPT-NeoX); rope_base
                (10000), rope_dims (even, default head_dim).
            relative: "shaw" (Shaw et al. 2018; ``relative_key.weight``,
                with relative_values also ``relative_value.weight``,
                ``[2 * max_distance + 1, d_k]``; max_distance required),
                "t5" (Raffel et al. 2020: bucketed bias
                ``relative_attention_bias.weight [num_buckets, H]``;
                num_buckets 32, max_distance 128, bidirectional True),
                "alibi" (Press et al. 2022: -m_h |j - i|).
            sparsity: "sliding_window" (|i - j| <= window), "dilated"
                (also (i - j) divisible by dilation), "bigbird" (blocks of
                block_size: window blocks each side, n_global global
                blocks, n_random_blocks random blocks from seed); n_global
                also adds global tokens to the windows.

    Call: ``attn(query, key, value, attn_mask=None, is_causal=False,
    need_weights=False)``

        query ``[N, H, L, head_dim]``, key ``[N, H_kv, S, head_dim]``,
        value ``[N, H_kv, S, value_dim]`` (H_kv = n_kv_heads, default H);
        3-D ``[H, ., .]`` unbatched.
        attn_mask: broadcastable to ``[N, H, L, S]``; bool True = MAY
            attend (F.scaled_dot_product_attention's convention), float =
            added to the logits.
        is_causal: True or "top_left" (query i sees keys j <= i, as
            PyTorch), "bottom_right" (the L queries are the last L of the S
            positions, as in KV-cache decoding; relative positions then
            count from there too).
        need_weights: also return the weights ``[N, H, L, S]``.

        Returns the output ``[N, H, L, value_dim]`` (or ``(output,
        weights)``).  A query whose keys are all masked gets zeros.

    ``attention_config`` reads the variant back (a dict).
    """

    def __init__(self, head_dim, num_heads, value_dim=None, **variant):
        self.head_dim = as_int(head_dim, "head_dim", 1)
        self.num_heads = as_int(num_heads, "num_heads", 1)
        self.value_dim = (self.head_dim if value_dim is None
                          else as_int(value_dim, "value_dim", 1))
        self._variant = normalize(variant, "Attention()")
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        return _ll.tfm_attention_create(self.head_dim, self.value_dim,
                                        self.num_heads,
                                        to_config(self._variant))

    def forward(self, query, key, value, attn_mask=None, is_causal=False,
                need_weights=False):
        """Runs the attention; see the class docstring for shapes."""
        with self._use() as ptr:
            q = as_float32(query, "query")
            k = as_float32(key, "key")
            v = as_float32(value, "value")
            if q.ndim not in (3, 4):
                raise ShapeError(f"query must be [N, H, L, head_dim] (or "
                                 f"unbatched [H, L, head_dim]), got shape "
                                 f"{q.shape}")
            if k.ndim != q.ndim or v.ndim != q.ndim:
                raise ShapeError(f"query, key and value must have the same "
                                 f"number of dimensions, got {q.shape}, "
                                 f"{k.shape}, {v.shape}")
            single = q.ndim == 3
            if single:
                q, k, v = q[None], k[None], v[None]
            B, H, L = q.shape[:3]
            S = k.shape[2]
            causal = _causal(is_causal)
            masks = None
            if attn_mask is not None:
                lead = (H,) if single else (B, H)
                m, kind = _mask_for(attn_mask, lead, L, S, B, H)
                masks = (causal, None, MASK_ADDITIVE, m, kind)
            elif causal != CAUSAL_NONE:
                masks = (causal, None, MASK_ADDITIVE, None, MASK_ADDITIVE)
            out = np.empty((B, H, L, v.shape[3]), np.float32)
            weights = np.empty((B, H, L, S), np.float32) if need_weights else None
            _ll.tfm_attention_forward(ptr, q, k, v, masks, out, weights)
            if single:
                out = out[0]
                weights = None if weights is None else weights[0]
            return (out, weights) if need_weights else out

    def _extra_repr(self):
        text = f"head_dim={self.head_dim}, num_heads={self.num_heads}"
        if self.value_dim != self.head_dim:
            text += f", value_dim={self.value_dim}"
        return text + variant_repr(self._variant)
