"""Layers with torch.nn's names, arguments, defaults and return values.

Shapes: N = batch, L = target (query) length, S = source (key) length,
E = embed_dim / d_model.  With ``batch_first=False`` (PyTorch's default)
activations are ``[L, N, E]`` and are transposed (one copy) on the way in
and out; ``batch_first=True`` (``[N, L, E]``) hands the arrays to the C
library without copying.  Unbatched inputs ``[L, E]`` are accepted as in
PyTorch.  Every result is a float32 numpy array.
"""

import numbers

import numpy as np

from . import _lowlevel as _ll
from ._core import (CAUSAL_NONE, CAUSAL_TOP_LEFT, MASK_ADDITIVE, BatchIO,
                    Module, as_float, as_float32, as_ids, as_int,
                    check_float32_dtype, enum_names, is_batched, mha_masks)
from ._errors import InvalidArgumentError, ShapeError, UnsupportedError
from ._torch import wrong_module
from ._tree import ModuleList, make_view, using, view_without_init
from ._variants import HasAttentionVariant, normalize, to_config, variant_repr
from .functional import _mask_for

__all__ = ["MultiheadAttention", "Attention", "LayerNorm", "RMSNorm",
           "Linear", "PatchEmbedding", "GatedFeedForward",
           "TransformerEncoderLayer", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerDecoder", "Transformer",
           "Embedding"]

_ACTIVATIONS = enum_names(_ll.TFM_ENUM_ACTIVATION)   # names.h
_ACTIVATION_NAMES = {v: k for k, v in _ACTIVATIONS.items()}


def _activation(activation):
    """"relu", "gelu", "gelu_tanh", "silu", or PyTorch's F.relu / F.gelu /
    F.silu / nn.ReLU() / nn.GELU(approximate=...) / nn.SiLU() -> the C
    enum value."""
    if isinstance(activation, str):
        name = activation.lower()
    else:
        cls = type(activation).__name__
        if cls == "GELU":
            name = ("gelu_tanh" if getattr(activation, "approximate", "none")
                    == "tanh" else "gelu")
        elif cls == "ReLU":
            name = "relu"
        elif cls == "SiLU":
            name = "silu"
        else:
            name = getattr(activation, "__name__", cls)
    if name not in _ACTIVATIONS:
        raise UnsupportedError(f"activation should be 'relu', 'gelu', "
                               f"'gelu_tanh' or 'silu', not {activation!r}")
    return _ACTIVATIONS[name]


def _layer_config(d_model, nhead, dim_feedforward, activation,
                  layer_norm_eps, norm_first):
    cfg = _ll.tfm_layer_config_default(as_int(d_model, "d_model", 1),
                                       as_int(nhead, "nhead", 1))
    cfg.d_ff = as_int(dim_feedforward, "dim_feedforward", 1)
    cfg.activation = _activation(activation)
    cfg.layer_norm_eps = as_float(layer_norm_eps, "layer_norm_eps")
    cfg.norm_first = 1 if norm_first else 0
    return cfg


def _layer_options(bias, variant=None, rms_norm=False, gated=False):
    """tfm_layer_options (layers.h) for the _v2 constructors: bias=False
    makes C layers without any bias parameter, as torch 2.x's; variant: the
    encoder's self-attention variant; rms_norm / gated: RMSNorm norms and
    the gated (SwiGLU) feed-forward, Llama's.  Returns the options and the
    variant's config, which must live as long as the options are used."""
    options = _ll.tfm_layer_options()
    options.bias = int(bool(bias))
    options.rms_norm = int(bool(rms_norm))
    options.gated = int(bool(gated))
    config = to_config(variant) if variant else None
    options.attention = config
    return options, config


class _HasLayerConfig:
    """The C layer configuration, rebuilt from the plain attributes (so
    that the module pickles and deep-copies)."""

    @property
    def _config(self):
        return _layer_config(self.d_model, self.nhead, self.dim_feedforward,
                             self.activation, self.layer_norm_eps,
                             self.norm_first)


# ---- MultiheadAttention ------------------------------------------------------

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


# ---- Attention (the functional form of a variant) -------------------------

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


# ---- Linear ------------------------------------------------------------------

class Linear(Module):
    """A linear layer, as ``torch.nn.Linear``: y = x W^T + b (one
    cblas_sgemm; include/transformer/layers.h: tfm_linear_create).

    ``Linear(in_features, out_features, bias=True)``

    Parameters: ``weight [out_features, in_features]``, ``bias
    [out_features]`` (with bias).  The layers' own linear parts
    (``layer.linear1``, ``mha.out_proj``) are Linear views of the layer's
    weights.

    Call: ``linear(input)``: ``[*, in_features]`` -> ``[*, out_features]``.
    """

    def __init__(self, in_features, out_features, bias=True, device=None,
                 dtype=None):
        check_float32_dtype(dtype, device, "Linear")
        self.in_features = as_int(in_features, "in_features", 1)
        self.out_features = as_int(out_features, "out_features", 1)
        self._has_bias = bool(bias)
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        return _ll.tfm_linear_create(self.in_features, self.out_features,
                                     int(self._has_bias))

    def forward(self, input):
        """input ``[*, in_features]`` -> ``[*, out_features]``."""
        x = as_float32(input, "input")
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(f"Linear({self.in_features}, "
                             f"{self.out_features}) expects input of shape "
                             f"[*, {self.in_features}], got {list(x.shape)}")
        flat = x.reshape(-1, self.in_features)
        out = np.empty((flat.shape[0], self.out_features), np.float32)
        with using(self) as ptr:
            if flat.shape[0]:
                _ll.tfm_linear_forward(ptr, flat, out)
        self._keep_for_backward(x)
        return out.reshape(x.shape[:-1] + (self.out_features,))

    def backward(self, grad_output):
        """The gradient with respect to the input of the last training-mode
        call, given ``grad_output`` (the output's shape); accumulates
        ``weight`` and ``bias`` gradients (:meth:`grad`), as
        ``torch.autograd`` does for ``nn.Linear``."""
        (x,) = self._saved_for_backward()
        g = as_float32(grad_output, "grad_output")
        want = x.shape[:-1] + (self.out_features,)
        if g.shape != want:
            raise ShapeError(f"grad_output must have the output's shape "
                             f"{list(want)}, got {list(g.shape)}")
        flat = x.reshape(-1, self.in_features)
        grad_input = np.empty_like(flat)
        if flat.shape[0]:
            with using(self) as ptr:
                _ll.tfm_linear_backward(
                    ptr, flat, np.ascontiguousarray(g).reshape(
                        -1, self.out_features), grad_input)
        return grad_input.reshape(x.shape)

    def _extra_repr(self):
        return (f"in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self._has_bias}")


def _linear_view(parent, path):
    """A Linear view of the parent's sub-module `path`."""
    with using(parent) as ptr:
        child = _ll.tfm_module_child(ptr, path)
        out_f, in_f = _ll.tfm_module_parameter_shape(child, "weight")
        names = [_ll.tfm_module_parameter_name(child, i) for i in
                 range(_ll.tfm_module_parameter_count(child))]
    return make_view(Linear, parent, path, in_f, out_f, bias="bias" in names)


def _norm_view(parent, path, d_model, eps):
    """A LayerNorm view, or an RMSNorm view when the C norm is one
    (tfm_layer_norm_is_rms; Llama's)."""
    with using(parent) as ptr:
        child = _ll.tfm_module_child(ptr, path)
        rms = _ll.tfm_layer_norm_is_rms(child) == 1
        bias = "bias" in [_ll.tfm_module_parameter_name(child, i) for i in
                          range(_ll.tfm_module_parameter_count(child))]
    if rms:
        return make_view(RMSNorm, parent, path, d_model, eps=eps)
    return make_view(LayerNorm, parent, path, d_model, eps=eps, bias=bias)


def _mha_view(layer, path):
    kwargs = dict(layer.__dict__.get("_variant") or {})
    if not layer.__dict__.get("bias", True):
        kwargs["bias"] = False
    return make_view(MultiheadAttention, layer, path, layer.d_model,
                     layer.nhead, dropout=layer.dropout,
                     batch_first=layer.batch_first, **kwargs)


def _layer_children(layer, attention_names, norms):
    specs = [(name, lambda name=name: _mha_view(layer, name))
             for name in attention_names]
    with using(layer) as ptr:
        linears = [n for n in ("linear1", "linear2", "linear3")
                   if any(_ll.tfm_module_child_name(ptr, i) == n for i in
                          range(_ll.tfm_module_child_count(ptr)))]
    specs += [(name, lambda name=name: _linear_view(layer, name))
              for name in linears]
    specs += [(name, lambda name=name: _norm_view(layer, name, layer.d_model,
                                                  layer.layer_norm_eps))
              for name in norms]
    return specs


# ---- PatchEmbedding ----------------------------------------------------------

class PatchEmbedding(Module):
    """ViT's patch embedding (Dosovitskiy et al. 2021, eq. 1), as
    ``torch.nn.Conv2d(in_channels, d_model, kernel_size=patch_size,
    stride=patch_size)`` followed by ``flatten(2).transpose(1, 2)``: one
    cblas_sgemm over the unfolded patches (include/transformer/layers.h:
    tfm_patch_embedding_create).

    ``PatchEmbedding(d_model, in_channels, patch_size, image_size=0,
    bias=True)``; image_size 0 takes any height and width that are
    multiples of patch_size.

    Parameters, named as Conv2d's: ``weight [d_model, in_channels, P, P]``,
    ``bias [d_model]`` (with bias).

    Call: ``pe(pixels)``: ``[B, C, H, W]`` -> ``[B, (H/P)(W/P), d_model]``.
    """

    def __init__(self, d_model, in_channels, patch_size, image_size=0,
                 bias=True, device=None, dtype=None):
        check_float32_dtype(dtype, device, "PatchEmbedding")
        self.d_model = as_int(d_model, "d_model", 1)
        self.in_channels = as_int(in_channels, "in_channels", 1)
        self.patch_size = as_int(patch_size, "patch_size", 1)
        self.image_size = as_int(image_size, "image_size", 0)
        self._has_bias = bool(bias)
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        return _ll.tfm_patch_embedding_create(
            self.d_model, self.in_channels, self.patch_size, self.image_size,
            int(self._has_bias))

    def _out_shape(self, x):
        p = self.patch_size
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ShapeError(f"PatchEmbedding expects pixels of shape [B, "
                             f"{self.in_channels}, H, W], got "
                             f"{list(x.shape)}")
        if x.shape[2] % p or x.shape[3] % p:
            raise ShapeError(f"image height and width must be multiples of "
                             f"the patch size {p}, got {list(x.shape)}")
        return (x.shape[0], (x.shape[2] // p) * (x.shape[3] // p),
                self.d_model)

    def forward(self, input):
        """pixels ``[B, C, H, W]`` -> ``[B, N, d_model]``."""
        x = np.ascontiguousarray(as_float32(input, "input"))
        out = np.empty(self._out_shape(x), np.float32)
        with using(self) as ptr:
            _ll.tfm_patch_embedding_forward(ptr, x, out)
        self._keep_for_backward(x)
        return out

    def backward(self, grad_output):
        """The gradient with respect to the pixels of the last
        training-mode call, given ``grad_output`` ``[B, N, d_model]``;
        accumulates ``weight`` and ``bias`` gradients (:meth:`grad`), as
        ``torch.autograd`` does for ``nn.Conv2d``."""
        (x,) = self._saved_for_backward()
        g = np.ascontiguousarray(as_float32(grad_output, "grad_output"))
        if g.shape != self._out_shape(x):
            raise ShapeError(f"grad_output must have the output's shape "
                             f"{list(self._out_shape(x))}, got "
                             f"{list(g.shape)}")
        grad_input = np.empty_like(x)
        with using(self) as ptr:
            _ll.tfm_patch_embedding_backward(ptr, x, g, grad_input)
        return grad_input


# ---- LayerNorm ---------------------------------------------------------------

class LayerNorm(Module):
    """Layer normalization, as ``torch.nn.LayerNorm``.

    ``LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True,
    bias=True)``

    y = (x - mean) / sqrt(var + eps) * weight + bias, with the mean and the
    biased variance taken over the last ``len(normalized_shape)`` axes.

    Args:
        normalized_shape: int or tuple, the trailing shape D normalized over.
        eps: added to the variance.
        elementwise_affine: learnable weight (ones) and bias (zeros); without
            it the layer has no parameters.
        bias: with elementwise_affine, whether there is a bias.

    Parameters: ``weight [*D]``, ``bias [*D]``.

    Call: ``norm(input)``: input ``[*, *D]`` -> output of the same shape.
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True,
                 bias=True, device=None, dtype=None):
        check_float32_dtype(dtype, device, "LayerNorm")
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        try:
            shape = tuple(as_int(d, "normalized_shape", 1)
                          for d in normalized_shape)
        except TypeError:
            raise TypeError("normalized_shape must be an int or a sequence "
                            "of ints") from None
        if not shape:
            raise InvalidArgumentError("normalized_shape must not be empty")
        self.normalized_shape = shape
        self.eps = as_float(eps, "eps")
        self.elementwise_affine = bool(elementwise_affine)
        self.bias = bool(bias)
        size = 1
        for d in shape:
            size *= d
        self._size = as_int(size, "the normalized size")
        self._adopt(self._create())

    def _create(self):
        # without elementwise_affine the C weight (ones) stays hidden; with
        # bias=False the C LayerNorm has no bias (tfm_layer_norm_create_v2)
        if self.bias and self.elementwise_affine:
            return _ll.tfm_layer_norm_create(self._size, self.eps)
        return _ll.tfm_layer_norm_create_v2(self._size, self.eps, 0)

    def _exposed(self, c_name, c_shape):
        if not self.elementwise_affine:
            return None
        return c_name, self.normalized_shape

    def forward(self, input):
        """input ``[*, *normalized_shape]`` -> normalized, same shape."""
        with self._use() as ptr:
            x = as_float32(input, "input")
            k = len(self.normalized_shape)
            if x.ndim < k or x.shape[x.ndim - k:] != self.normalized_shape:
                raise ShapeError(
                    f"LayerNorm over {list(self.normalized_shape)} expects input "
                    f"of shape [*, {', '.join(map(str, self.normalized_shape))}]"
                    f", got {list(x.shape)}")
            flat = x.reshape(-1, self._size)
            out = np.empty_like(flat)
            _ll.tfm_layer_norm_forward(ptr, flat, out)
        self._keep_for_backward(x)
        return out.reshape(x.shape)

    def backward(self, grad_output):
        """The gradient with respect to the input of the last training-mode
        call, given ``grad_output`` (the input's shape); accumulates the
        ``weight`` and ``bias`` gradients, as ``torch.autograd`` does for
        ``nn.LayerNorm``."""
        (x,) = self._saved_for_backward()
        g = as_float32(grad_output, "grad_output")
        if g.shape != x.shape:
            raise ShapeError(f"grad_output must have the input's shape "
                             f"{list(x.shape)}, got {list(g.shape)}")
        flat = x.reshape(-1, self._size)
        grad_input = np.empty_like(flat)
        self._call(_ll.tfm_layer_norm_backward, flat,
                   np.ascontiguousarray(g).reshape(-1, self._size),
                   grad_input)
        return grad_input.reshape(x.shape)

    def _normalize_in_place(self, x):
        """x [..., E] float32 contiguous, normalized in place."""
        if self.normalized_shape != (x.shape[-1],):
            raise ShapeError(f"norm normalizes over "
                             f"{list(self.normalized_shape)}, the layers' "
                             f"output has width {x.shape[-1]}")
        self._call(_ll.tfm_layer_norm_forward, x, x)
        return x

    def _extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class RMSNorm(LayerNorm):
    """Root-mean-square layer normalization, as ``torch.nn.RMSNorm``
    (Zhang & Sennrich 2019; Hugging Face's LlamaRMSNorm).

    ``RMSNorm(normalized_shape, eps=None, elementwise_affine=True)``

    y = x / sqrt(mean(x^2) + eps) * weight, the mean over the last
    ``len(normalized_shape)`` axes, nothing subtracted, no bias.  eps None
    is torch's: the float32 machine epsilon (1.1920929e-07).

    Parameters: ``weight [*D]`` (ones).  Call: ``norm(input)``: ``[*, *D]``
    -> the same shape; ``backward(grad_output)`` after a training-mode
    call, as LayerNorm's.
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True,
                 device=None, dtype=None):
        if eps is None:
            eps = float(np.finfo(np.float32).eps)
        super().__init__(normalized_shape, eps, elementwise_affine,
                         bias=False, device=device, dtype=dtype)

    def _create(self):
        return _ll.tfm_rms_norm_create(self._size, self.eps)


class GatedFeedForward(Module):
    """The gated feed-forward network of Llama, Mistral and T5 v1.1
    (Shazeer 2020, "GLU Variants Improve Transformer"; Hugging Face's
    LlamaMLP, torchtune's FeedForward; include/transformer/layers.h:
    tfm_gated_feed_forward_create).

    ``GatedFeedForward(d_model, dim_feedforward, activation="silu",
    bias=False)``

    out = linear2(activation(linear1(x)) * linear3(x)): SwiGLU with SiLU,
    GEGLU with "gelu".  linear1 is Llama's gate_proj, linear3 its up_proj,
    linear2 its down_proj.

    Parameters, in this order: ``linear1.weight [F, E]``, ``linear3.weight
    [F, E]``, (with bias ``linear1.bias [F]``, ``linear3.bias [F]``),
    ``linear2.weight [E, F]`` (``linear2.bias [E]``); sub-modules
    ``linear1``, ``linear2``, ``linear3`` (Linear views).

    Call: ``ff(input)``: ``[*, d_model]`` -> the same shape;
    ``backward(grad_output)`` after a training-mode call accumulates the
    parameter gradients and returns the input's.
    """

    def __init__(self, d_model, dim_feedforward, activation="silu",
                 bias=False, device=None, dtype=None):
        check_float32_dtype(dtype, device, "GatedFeedForward")
        self.d_model = as_int(d_model, "d_model", 1)
        self.dim_feedforward = as_int(dim_feedforward, "dim_feedforward", 1)
        self._activation = _activation(activation)
        self.activation = _ACTIVATION_NAMES[self._activation]
        self.bias = bool(bias)
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        return _ll.tfm_gated_feed_forward_create(
            self.d_model, self.dim_feedforward, self._activation,
            int(self.bias))

    def _child_specs(self):
        return [(n, lambda n=n: _linear_view(self, n))
                for n in ("linear1", "linear2", "linear3")]

    def _rows(self, x, what):
        if x.ndim == 0 or x.shape[-1] != self.d_model:
            raise ShapeError(f"GatedFeedForward({self.d_model}, "
                             f"{self.dim_feedforward}) expects {what} of "
                             f"shape [*, {self.d_model}], got "
                             f"{list(x.shape)}")
        return np.ascontiguousarray(x).reshape(1, -1, self.d_model)

    def forward(self, input):
        """input ``[*, d_model]`` -> ``[*, d_model]``."""
        x = as_float32(input, "input")
        flat = self._rows(x, "input")
        out = np.empty_like(flat)
        if flat.shape[1]:
            self._call(_ll.tfm_feed_forward_forward, flat, out)
        self._keep_for_backward(x)
        return out.reshape(x.shape)

    def backward(self, grad_output):
        """The gradient with respect to the input of the last training-mode
        call, given ``grad_output`` (the output's shape); accumulates the
        parameter gradients (:meth:`grad`), as ``torch.autograd`` does."""
        (x,) = self._saved_for_backward()
        g = as_float32(grad_output, "grad_output")
        if g.shape != x.shape:
            raise ShapeError(f"grad_output must have the input's shape "
                             f"{list(x.shape)}, got {list(g.shape)}")
        flat = self._rows(x, "input")
        grad_input = np.empty_like(flat)
        if flat.shape[1]:
            self._call(_ll.tfm_feed_forward_backward, flat,
                       self._rows(g, "grad_output"), grad_input)
        return grad_input.reshape(x.shape)

    def _extra_repr(self):
        return (f"d_model={self.d_model}, dim_feedforward="
                f"{self.dim_feedforward}, activation={self.activation!r}, "
                f"bias={self.bias}")


# ---- Encoder and decoder layers ------------------------------------------

class _LayerBase(_HasLayerConfig, Module):
    def _init_layer(self, who, d_model, nhead, dim_feedforward, dropout,
                    activation, layer_norm_eps, batch_first, norm_first, bias,
                    device, dtype, rms_norm=False, gated=False):
        check_float32_dtype(dtype, device, who)
        config = _layer_config(d_model, nhead, dim_feedforward, activation,
                               layer_norm_eps, norm_first)
        self.d_model = config.d_model
        self.nhead = config.n_heads
        self.dim_feedforward = config.d_ff
        self.dropout = as_float(dropout, "dropout")
        self.activation = _ACTIVATION_NAMES[config.activation]
        self.layer_norm_eps = as_float(layer_norm_eps, "layer_norm_eps")
        self.batch_first = bool(batch_first)
        self.norm_first = bool(norm_first)
        self.bias = bool(bias)
        # beyond PyTorch: Llama's RMSNorm and gated feed-forward
        self.rms_norm = bool(rms_norm)
        self.gated = bool(gated)

    def _layer_options(self, variant=None):
        """(options, variant config) when the layer needs the _v2
        constructor (no bias, RMSNorm, gated FF), else None."""
        d = self.__dict__
        if (d.get("bias", True) and not d.get("rms_norm")
                and not d.get("gated")):
            return None
        return _layer_options(d.get("bias", True), variant,
                              d.get("rms_norm", False), d.get("gated", False))

    def _extra_repr(self):
        text = (f"d_model={self.d_model}, nhead={self.nhead}, "
                f"dim_feedforward={self.dim_feedforward}, "
                f"activation={self.activation!r}, "
                f"layer_norm_eps={self.layer_norm_eps}, "
                f"batch_first={self.batch_first}, "
                f"norm_first={self.norm_first}")
        for name in ("rms_norm", "gated"):
            if self.__dict__.get(name):
                text += f", {name}=True"
        return text


class TransformerEncoderLayer(HasAttentionVariant, _LayerBase):
    """Self-attention and feed-forward block, as
    ``torch.nn.TransformerEncoderLayer``.

    ``TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048,
    dropout=0.1, activation="relu", layer_norm_eps=1e-05, batch_first=False,
    norm_first=False, bias=True, rms_norm=False, gated=False, **variant)``

        post-norm (default): x = norm1(x + SA(x)); x = norm2(x + FF(x))
        pre-norm (norm_first=True): x = x + SA(norm1(x)); x = x + FF(norm2(x))
        FF(x) = linear2(activation(linear1(x)))

    Args:
        d_model: E.  nhead: heads, dividing d_model.
        dim_feedforward: hidden width of FF.
        dropout: the dropout probability in training mode (torch's).
        activation: "relu", "gelu" (exact), "gelu_tanh", "silu", or F.relu /
            F.gelu / F.silu / nn.ReLU() / nn.GELU() / nn.SiLU().
        layer_norm_eps: eps of both LayerNorms.
        batch_first: ``[N, L, E]`` (no copy) instead of ``[L, N, E]``.
        norm_first: pre-norm instead of post-norm.
        bias: False: no biases (attention, feed-forward, LayerNorm), as
            torch 2.x's bias=False: the C layer has no bias parameter
            (tfm_encoder_layer_create_v2) and the state dict no "*.bias"
            key.
        rms_norm, gated: (not in PyTorch) RMSNorm norms
            (``torch.nn.RMSNorm``, no bias) and the gated SwiGLU
            feed-forward ``linear2(activation(linear1(x)) * linear3(x))``
            with ``linear3 [F, E]`` (Llama's; tfm_layer_options).
        **variant: (keywords, not in PyTorch) the self-attention's variant,
            as for MultiheadAttention and Attention (``score=``,
            ``n_kv_heads=``, ``rope=``, ``relative=``, ``sparsity=``, ...);
            its parameters are ``self_attn.*``.  ``attention_config`` reads
            it back.  Such a layer cannot be the template of a
            TransformerEncoder (use Model with an "attention" config).

    Parameters: ``self_attn.in_proj_weight [3E, E]``,
    ``self_attn.in_proj_bias [3E]``, ``self_attn.out_proj.weight [E, E]``,
    ``self_attn.out_proj.bias [E]``, ``linear1.weight [F, E]``,
    ``linear1.bias [F]``, ``linear2.weight [E, F]``, ``linear2.bias [E]``,
    ``norm1.weight``, ``norm1.bias``, ``norm2.weight``, ``norm2.bias [E]``.

    Call: ``layer(src, src_mask=None, src_key_padding_mask=None,
    is_causal=False)``: src ``[L, N, E]`` (``[N, L, E]``, ``[L, E]``) ->
    output of the same shape.  src_mask ``[L, L]`` or ``[N * nhead, L, L]``
    and src_key_padding_mask ``[N, L]``: bool True = masked out, or float
    (additive), as in MultiheadAttention; is_causal applies the causal mask.
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation="relu", layer_norm_eps=1e-5, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None,
                 rms_norm=False, gated=False, **variant):
        self._variant = normalize(variant, "TransformerEncoderLayer()")
        self._init_layer("TransformerEncoderLayer", d_model, nhead,
                         dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias, device, dtype,
                         rms_norm, gated)
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        v2 = self._layer_options(self._variant)
        if v2:
            options, _config = v2
            return _ll.tfm_encoder_layer_create_v2(self._config, options)
        if self._variant:
            return _ll.tfm_encoder_layer_create_ex(self._config,
                                                   to_config(self._variant))
        return _ll.tfm_encoder_layer_create(self._config)

    def _extra_repr(self):
        return super()._extra_repr() + variant_repr(self._variant)

    def _child_specs(self):
        return _layer_children(self, ("self_attn",), ("norm1", "norm2"))

    def forward(self, src, src_mask=None, src_key_padding_mask=None,
                is_causal=False):
        """src ``[L, N, E]`` (``[N, L, E]`` if batch_first, ``[L, E]``) ->
        same shape.  See the class docstring for the masks."""
        return _encode(self, _ll.tfm_encoder_layer_forward, src, src_mask,
                       src_key_padding_mask, is_causal, keep=True)

    def backward(self, grad_output):
        """The gradient with respect to src of the last training-mode
        call, given ``grad_output`` (the output's shape and layout), in
        src's layout; accumulates every parameter's gradient
        (:meth:`grad`), as ``torch.autograd`` does for
        ``nn.TransformerEncoderLayer`` with dropout 0."""
        (x,) = self._saved_for_backward()
        masks, batched = self.__dict__["_saved_call"]
        io = BatchIO(self.batch_first, batched)
        g = np.ascontiguousarray(io.take(grad_output, "grad_output"))
        if g.shape != x.shape:
            raise ShapeError(f"grad_output must have the output's shape, "
                             f"got {list(np.shape(grad_output))}")
        grad_src = np.empty(x.shape, np.float32)
        self._call(_ll.tfm_encoder_layer_backward, x, masks, g, grad_src)
        return io.give(grad_src)


class TransformerDecoderLayer(_LayerBase):
    """Self-attention, cross-attention and feed-forward block, as
    ``torch.nn.TransformerDecoderLayer``.

    ``TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048,
    dropout=0.1, activation="relu", layer_norm_eps=1e-05, batch_first=False,
    norm_first=False, bias=True, rms_norm=False, gated=False)``

        post-norm: x = norm1(x + SA(x)); x = norm2(x + CA(x, memory));
                   x = norm3(x + FF(x))
        pre-norm:  x = x + SA(norm1(x)); x = x + CA(norm2(x), memory);
                   x = x + FF(norm3(x))

    Arguments as TransformerEncoderLayer.  Parameters: ``self_attn.*`` and
    ``multihead_attn.*`` (MultiheadAttention names), ``linear1.*``,
    ``linear2.*``, ``norm1.*``, ``norm2.*``, ``norm3.*``.

    Call: ``layer(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False, memory_is_causal=False)``:
        tgt ``[L, N, E]`` (``[N, L, E]`` if batch_first, ``[L, E]``),
        memory ``[S, N, E]`` -> output like tgt.
        tgt_mask ``[L, L]`` / ``[N * nhead, L, L]``, tgt_key_padding_mask
        ``[N, L]``: self-attention masks; memory_mask ``[L, S]`` /
        ``[N * nhead, L, S]``, memory_key_padding_mask ``[N, S]``:
        cross-attention masks.  bool True = masked out, float = additive.
        tgt_is_causal / memory_is_causal apply a causal mask.
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation="relu", layer_norm_eps=1e-5, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None,
                 rms_norm=False, gated=False):
        self._init_layer("TransformerDecoderLayer", d_model, nhead,
                         dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias, device, dtype,
                         rms_norm, gated)
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        v2 = self._layer_options()
        if v2:
            options, _ = v2
            return _ll.tfm_decoder_layer_create_v2(self._config, options)
        return _ll.tfm_decoder_layer_create(self._config)

    def _child_specs(self):
        return _layer_children(self, ("self_attn", "multihead_attn"),
                               ("norm1", "norm2", "norm3"))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=False, memory_is_causal=False):
        """tgt ``[L, N, E]``, memory ``[S, N, E]`` -> like tgt.  See the
        class docstring for the masks."""
        return _decode(self, _ll.tfm_decoder_layer_forward, tgt, memory,
                       tgt_mask, memory_mask, tgt_key_padding_mask,
                       memory_key_padding_mask, tgt_is_causal,
                       memory_is_causal, keep=True)

    def backward(self, grad_output):
        """The gradients of the last training-mode call with respect to
        tgt and memory, given ``grad_output`` (the output's shape and
        layout), as a tuple ``(grad_tgt, grad_memory)`` in the inputs'
        layouts; accumulates every parameter's gradient (:meth:`grad`), as
        ``torch.autograd`` does for ``nn.TransformerDecoderLayer`` with
        dropout 0."""
        x, mem = self._saved_for_backward()
        tgt_masks, memory_masks, batched = self.__dict__["_saved_call"]
        io = BatchIO(self.batch_first, batched)
        g = np.ascontiguousarray(io.take(grad_output, "grad_output"))
        if g.shape != x.shape:
            raise ShapeError(f"grad_output must have the output's shape, "
                             f"got {list(np.shape(grad_output))}")
        grad_tgt = np.empty(x.shape, np.float32)
        grad_memory = np.empty(mem.shape, np.float32)
        self._call(_ll.tfm_decoder_layer_backward, x, mem, tgt_masks,
                   memory_masks, g, grad_tgt, grad_memory)
        return io.give(grad_tgt), io.give(grad_memory)


def _encode(module, forward, src, mask, key_padding_mask, is_causal,
            names=("src_key_padding_mask", "src_mask"), keep=False):
    with module._use() as ptr:
        batched = is_batched(src, "src")
        io = BatchIO(module.batch_first, batched)
        x = io.take(src, "src")
        masks = mha_masks(x.shape[0], module.nhead, batched, key_padding_mask,
                          mask, bool(is_causal), names)
        out = np.empty((x.shape[0], x.shape[1], module.d_model), np.float32)
        forward(ptr, x, masks, out)
        norm = getattr(module, "norm", None)
        if norm is not None and not getattr(module, "_c_norm", False):
            norm._normalize_in_place(out)
    if keep and module.training:
        module._keep_for_backward(x)
        module.__dict__["_saved_call"] = (masks, batched)
    return io.give(out)


def _decode(module, forward, tgt, memory, tgt_mask, memory_mask,
            tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
            memory_is_causal, keep=False):
    with module._use() as ptr:
        batched = is_batched(tgt, "tgt")
        io = BatchIO(module.batch_first, batched)
        x = io.take(tgt, "tgt")
        mem = io.take(memory, "memory")
        n = x.shape[0]
        tgt_masks = mha_masks(n, module.nhead, batched, tgt_key_padding_mask,
                              tgt_mask, bool(tgt_is_causal),
                              ("tgt_key_padding_mask", "tgt_mask"))
        memory_masks = mha_masks(n, module.nhead, batched,
                                 memory_key_padding_mask, memory_mask,
                                 bool(memory_is_causal),
                                 ("memory_key_padding_mask", "memory_mask"))
        out = np.empty((n, x.shape[1], module.d_model), np.float32)
        forward(ptr, x, mem, tgt_masks, memory_masks, out)
        norm = getattr(module, "norm", None)
        if norm is not None and not getattr(module, "_c_norm", False):
            norm._normalize_in_place(out)
    if keep and module.training:
        module._keep_for_backward(x, mem)
        module.__dict__["_saved_call"] = (tgt_masks, memory_masks, batched)
    return io.give(out)


# ---- Stacks ------------------------------------------------------------------

class _StackBase(_HasLayerConfig, Module):
    _layer_class = None
    _create_stack = None

    def _init_stack(self, layer, num_layers, norm):
        who = type(self).__name__
        if not isinstance(layer, self._layer_class):
            raise wrong_module(who, "template layer", self._layer_class, layer)
        if getattr(layer, "_variant", None):
            raise UnsupportedError(f"{who}: the template layer has an "
                                   "attention variant, which the stacks do "
                                   "not take; use Model with an "
                                   "\"attention\" config")
        if norm is not None and not isinstance(norm, LayerNorm):
            raise wrong_module(who, "norm (or None)", LayerNorm, norm, "norm")
        self.num_layers = as_int(num_layers, "num_layers", 1)
        for name in ("d_model", "nhead", "dim_feedforward", "activation",
                     "layer_norm_eps", "norm_first", "batch_first", "bias",
                     "dropout"):
            setattr(self, name, getattr(layer, name))
        self._layer_repr = layer._extra_repr()
        self.norm = norm
        self._layer_type = type(layer).__name__
        self._adopt(self._create())
        # PyTorch deep-copies the template: every layer starts with its
        # weights.
        template = layer.state_dict()
        for i in range(self.num_layers):
            self.load_state_dict({f"layers.{i}.{k}": v
                                  for k, v in template.items()}, strict=False)

    def _create(self):
        # the C final norm (a Transformer's encoder / decoder view) has no
        # bias either with bias=False
        options, _ = _layer_options(self.__dict__.get("bias", True))
        return self._create_stack(self._config, self.num_layers,
                                  int(self._c_norm), options)

    # _c_norm: the final norm is the C stack's own (a Transformer's
    # encoder / decoder view), its parameters in the C table.
    _c_norm = False

    def _components(self):
        parts = [("", self)]
        if not self._c_norm and self.norm is not None:
            parts.append(("norm.", self.norm))
        return parts

    def _layer_view(self, i):
        kwargs = {}
        if not self.__dict__.get("bias", True):
            kwargs["bias"] = False
        return make_view(self._layer_class, self, f"layers.{i}",
                         self.d_model, self.nhead, self.dim_feedforward,
                         activation=self.activation,
                         layer_norm_eps=self.layer_norm_eps,
                         batch_first=self.batch_first,
                         norm_first=self.norm_first, **kwargs)

    def _child_specs(self):
        specs = [("layers", lambda: ModuleList(
            self._layer_view(i) for i in range(self.num_layers)))]
        if self._c_norm:
            specs.append(("norm", lambda: _norm_view(
                self, "norm", self.d_model, self.layer_norm_eps)))
        elif self.__dict__.get("norm") is not None:
            specs.append(("norm", lambda: self.norm))
        return specs

    def __repr__(self):
        text = (f"{type(self).__name__}(\n  (layers): {self.num_layers} x "
                f"{self._layer_type}({self._layer_repr})\n")
        if self.norm is not None:
            text += f"  (norm): {self.norm!r}\n"
        text += ")"
        if self.closed:
            text += " <closed>"
        return text


class TransformerEncoder(_StackBase):
    """A stack of encoder layers, as ``torch.nn.TransformerEncoder``.

    ``TransformerEncoder(encoder_layer, num_layers, norm=None)``

    Args:
        encoder_layer: a TransformerEncoderLayer used as the template: every
            layer gets its configuration and (as PyTorch's deep copy) its
            current weights.
        num_layers: number of layers.
        norm: optional final LayerNorm (``normalized_shape == (d_model,)``);
            the object itself is kept and used, as in PyTorch.

    Parameters: ``layers.<i>.<encoder layer names>``, and ``norm.weight``,
    ``norm.bias`` with a norm.

    Call: ``encoder(src, mask=None, src_key_padding_mask=None,
    is_causal=None)``: src ``[S, N, E]`` (``[N, S, E]`` if the layer is
    batch_first, ``[S, E]``) -> same shape; masks as in
    TransformerEncoderLayer, given to every layer.
    """

    _layer_class = TransformerEncoderLayer
    _create_stack = staticmethod(_ll.tfm_encoder_create_v2)

    def __init__(self, encoder_layer, num_layers, norm=None,
                 enable_nested_tensor=True, mask_check=True):
        self._init_stack(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None,
                is_causal=None):
        """src ``[S, N, E]`` -> same shape; see the class docstring."""
        return _encode(self, _ll.tfm_encoder_forward, src, mask,
                       src_key_padding_mask, is_causal,
                       ("src_key_padding_mask", "mask"), keep=True)

    def backward(self, grad_output):
        """The gradient with respect to src of the last training-mode
        call, given ``grad_output`` (the output's shape and layout), in
        src's layout; accumulates every parameter's gradient, the final
        norm's included, as ``torch.autograd`` does for
        ``nn.TransformerEncoder`` with dropout 0."""
        (x,) = self._saved_for_backward()
        masks, batched = self.__dict__["_saved_call"]
        g = _stack_grad_output(self, grad_output, x, batched,
                               lambda h: self._call(_ll.tfm_encoder_forward,
                                                    x, masks, h))
        grad_src = np.empty(x.shape, np.float32)
        self._call(_ll.tfm_encoder_backward, x, masks, g, grad_src)
        return BatchIO(self.batch_first, batched).give(grad_src)


class TransformerDecoder(_StackBase):
    """A stack of decoder layers, as ``torch.nn.TransformerDecoder``.

    ``TransformerDecoder(decoder_layer, num_layers, norm=None)``; arguments
    as TransformerEncoder (the template is a TransformerDecoderLayer).

    Parameters: ``layers.<i>.<decoder layer names>``, ``norm.*``.

    Call: ``decoder(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False)``: tgt ``[L, N, E]``,
    memory ``[S, N, E]`` (``[N, L, E]``, ``[N, S, E]`` if the layer is
    batch_first; 2-D unbatched) -> like tgt; masks as in
    TransformerDecoderLayer, given to every layer.
    """

    _layer_class = TransformerDecoderLayer
    _create_stack = staticmethod(_ll.tfm_decoder_create_v2)

    def __init__(self, decoder_layer, num_layers, norm=None):
        self._init_stack(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=None, memory_is_causal=False):
        """tgt ``[L, N, E]``, memory ``[S, N, E]`` -> like tgt."""
        return _decode(self, _ll.tfm_decoder_forward, tgt, memory, tgt_mask,
                       memory_mask, tgt_key_padding_mask,
                       memory_key_padding_mask, tgt_is_causal,
                       memory_is_causal, keep=True)

    def backward(self, grad_output):
        """The gradients of the last training-mode call with respect to
        tgt and memory, given ``grad_output`` (the output's shape and
        layout), as ``(grad_tgt, grad_memory)`` in the inputs' layouts
        (memory's summed over the layers); accumulates every parameter's
        gradient, the final norm's included, as ``torch.autograd`` does for
        ``nn.TransformerDecoder`` with dropout 0."""
        x, mem = self._saved_for_backward()
        tgt_masks, memory_masks, batched = self.__dict__["_saved_call"]
        g = _stack_grad_output(
            self, grad_output, x, batched,
            lambda h: self._call(_ll.tfm_decoder_forward, x, mem, tgt_masks,
                                 memory_masks, h))
        grad_tgt = np.empty(x.shape, np.float32)
        grad_memory = np.empty(mem.shape, np.float32)
        self._call(_ll.tfm_decoder_backward, x, mem, tgt_masks, memory_masks,
                   g, grad_tgt, grad_memory)
        io = BatchIO(self.batch_first, batched)
        return io.give(grad_tgt), io.give(grad_memory)


def _stack_grad_output(stack, grad_output, x, batched, run_stack):
    """grad_output (the stack's output layout) as the C stack's [N, L, E]
    output gradient: when the final norm is a Python LayerNorm of the
    caller's (not the C stack's own), back through it first, at the C
    stack's output recomputed by run_stack(h)."""
    io = BatchIO(stack.batch_first, batched)
    g = np.ascontiguousarray(io.take(grad_output, "grad_output"))
    if g.shape != x.shape:
        raise ShapeError(f"grad_output must have the output's shape, got "
                         f"{list(np.shape(grad_output))}")
    norm = stack.__dict__.get("norm")
    if norm is None or stack._c_norm:
        return g
    h = np.empty(x.shape, np.float32)
    run_stack(h)
    width = x.shape[-1]
    grad_h = np.empty((h.size // width, width), np.float32)
    norm._call(_ll.tfm_layer_norm_backward, h.reshape(-1, width),
               g.reshape(-1, width), grad_h)
    return grad_h.reshape(x.shape)


# ---- Transformer ---------------------------------------------------------------

class Transformer(_LayerBase):
    """The encoder-decoder Transformer, as ``torch.nn.Transformer``.

    ``Transformer(d_model=512, nhead=8, num_encoder_layers=6,
    num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
    activation="relu", custom_encoder=None, custom_decoder=None,
    layer_norm_eps=1e-05, batch_first=False, norm_first=False, bias=True)``

        memory = encoder(src); output = decoder(tgt, memory); both stacks
        end with a LayerNorm.

    Arguments as TransformerEncoderLayer; custom_encoder / custom_decoder
    must be None.  Parameters: ``encoder.layers.<i>.*``, ``encoder.norm.*``,
    ``decoder.layers.<i>.*``, ``decoder.norm.*`` (PyTorch's names).

    Call: ``model(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
    memory_is_causal=False)``:
        src ``[S, N, E]``, tgt ``[L, N, E]`` (``[N, S, E]``, ``[N, L, E]`` if
        batch_first; 2-D unbatched) -> output ``[L, N, E]`` (like tgt).
        src_mask ``[S, S]``, tgt_mask ``[L, L]``, memory_mask ``[L, S]`` (or
        ``[N * nhead, ., .]``); key padding masks ``[N, S]``, ``[N, L]``,
        ``[N, S]``.  bool True = masked out, float = additive.  Use
        ``Transformer.generate_square_subsequent_mask(L)`` (or
        tgt_is_causal=True) for a causal decoder.
    """

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6,
                 num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
                 activation="relu", custom_encoder=None, custom_decoder=None,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None):
        if custom_encoder is not None or custom_decoder is not None:
            raise UnsupportedError("Transformer: custom_encoder and "
                                   "custom_decoder are not supported")
        self._init_layer("Transformer", d_model, nhead, dim_feedforward,
                         dropout, activation, layer_norm_eps, batch_first,
                         norm_first, bias, device, dtype)
        self.num_encoder_layers = as_int(num_encoder_layers,
                                         "num_encoder_layers", 1)
        self.num_decoder_layers = as_int(num_decoder_layers,
                                         "num_decoder_layers", 1)
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        if not self.bias:
            options, _ = _layer_options(False)
            return _ll.tfm_transformer_create_v2(
                self._config, self.num_encoder_layers,
                self.num_decoder_layers, options)
        return _ll.tfm_transformer_create(self._config,
                                          self.num_encoder_layers,
                                          self.num_decoder_layers)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None,
                memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        """src ``[S, N, E]``, tgt ``[L, N, E]`` -> ``[L, N, E]``; see the
        class docstring."""
        with self._use() as ptr:
            batched = is_batched(src, "src")
            io = BatchIO(self.batch_first, batched)
            s = io.take(src, "src")
            t = io.take(tgt, "tgt")
            n = s.shape[0]
            src_masks = mha_masks(n, self.nhead, batched, src_key_padding_mask,
                                  src_mask, bool(src_is_causal),
                                  ("src_key_padding_mask", "src_mask"))
            tgt_masks = mha_masks(n, self.nhead, batched, tgt_key_padding_mask,
                                  tgt_mask, bool(tgt_is_causal),
                                  ("tgt_key_padding_mask", "tgt_mask"))
            memory_masks = mha_masks(n, self.nhead, batched,
                                     memory_key_padding_mask, memory_mask,
                                     bool(memory_is_causal),
                                     ("memory_key_padding_mask", "memory_mask"))
            out = np.empty((t.shape[0], t.shape[1], self.d_model), np.float32)
            _ll.tfm_transformer_forward(ptr, s, t, src_masks, tgt_masks,
                                        memory_masks, out)
        if self.training:
            self._keep_for_backward(s, t)
            self.__dict__["_saved_call"] = (src_masks, tgt_masks,
                                            memory_masks, batched)
        return io.give(out)

    def backward(self, grad_output):
        """The gradients of the last training-mode call with respect to
        src and tgt, given ``grad_output`` (the output's shape and layout),
        as ``(grad_src, grad_tgt)`` in the inputs' layouts; accumulates
        every parameter's gradient (both stacks and their final norms), as
        ``torch.autograd`` does for ``nn.Transformer`` with dropout 0."""
        s, t = self._saved_for_backward()
        src_masks, tgt_masks, memory_masks, batched = \
            self.__dict__["_saved_call"]
        io = BatchIO(self.batch_first, batched)
        g = np.ascontiguousarray(io.take(grad_output, "grad_output"))
        if g.shape != t.shape:
            raise ShapeError(f"grad_output must have the output's shape, "
                             f"got {list(np.shape(grad_output))}")
        grad_src = np.empty(s.shape, np.float32)
        grad_tgt = np.empty(t.shape, np.float32)
        self._call(_ll.tfm_transformer_backward, s, t, src_masks, tgt_masks,
                   memory_masks, g, grad_src, grad_tgt)
        return io.give(grad_src), io.give(grad_tgt)

    def _stack_view(self, name, cls, layer_cls, num_layers):
        attrs = {k: v for k, v in self.__dict__.items()
                 if not k.startswith("_") and not k.startswith("num_")}
        attrs.update(num_layers=num_layers, _layer_type=layer_cls.__name__,
                     _layer_repr=_LayerBase._extra_repr(self), _c_norm=True)
        return view_without_init(cls, self, name, attrs)

    def _child_specs(self):
        return [("encoder", lambda: self._stack_view(
                    "encoder", TransformerEncoder, TransformerEncoderLayer,
                    self.num_encoder_layers)),
                ("decoder", lambda: self._stack_view(
                    "decoder", TransformerDecoder, TransformerDecoderLayer,
                    self.num_decoder_layers))]

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The causal mask for a sequence of length sz: a float32 ``[sz,
        sz]`` array with -inf above the diagonal and 0 elsewhere."""
        sz = as_int(sz, "sz", 0)
        mask = np.triu(np.full((sz, sz), -np.inf, np.float32), 1)
        return mask if dtype is None else mask.astype(dtype)

    def _extra_repr(self):
        return (f"d_model={self.d_model}, nhead={self.nhead}, "
                f"num_encoder_layers={self.num_encoder_layers}, "
                f"num_decoder_layers={self.num_decoder_layers}, "
                f"dim_feedforward={self.dim_feedforward}, "
                f"activation={self.activation!r}, "
                f"layer_norm_eps={self.layer_norm_eps}, "
                f"batch_first={self.batch_first}, "
                f"norm_first={self.norm_first}")


# ---- Embedding -------------------------------------------------------------------

class Embedding(Module):
    """A lookup table, as ``torch.nn.Embedding``.

    ``Embedding(num_embeddings, embedding_dim, padding_idx=None, ...,
    scale=False)``

    Args:
        num_embeddings: rows (vocabulary size).
        embedding_dim: D, width of each row.
        padding_idx: that row starts at zero, as in PyTorch (otherwise it
            only matters for training); negative counts from the end.
        max_norm: must be None.
        _weight: optional initial table ``[num_embeddings, D]``.
        scale: (keyword, not in PyTorch) multiply looked-up rows by sqrt(D),
            as section 3.4 of "Attention Is All You Need".

    Parameter: ``weight [num_embeddings, D]``.

    Call: ``emb(input)``: integer ids of any shape ``[*]`` -> ``[*, D]``.
    Ids outside 0 .. num_embeddings-1 raise InvalidArgumentError.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None,
                 max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 sparse=False, _weight=None, _freeze=False, device=None,
                 dtype=None, *, scale=False):
        check_float32_dtype(dtype, device, "Embedding")
        if max_norm is not None:
            raise UnsupportedError("Embedding: max_norm is not supported")
        self.num_embeddings = as_int(num_embeddings, "num_embeddings", 1)
        self.embedding_dim = as_int(embedding_dim, "embedding_dim", 1)
        if padding_idx is not None:
            padding_idx = as_int(padding_idx, "padding_idx")
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise InvalidArgumentError(
                    f"padding_idx = {padding_idx} is outside "
                    f"[-{self.num_embeddings}, {self.num_embeddings})")
            if padding_idx < 0:
                padding_idx += self.num_embeddings
        self.padding_idx = padding_idx
        self.scale = bool(scale)
        self._adopt(self._create())
        if _weight is not None:
            self.load_state_dict({"weight": _weight})
        else:
            self._reset_new()

    def _create(self):
        return _ll.tfm_embedding_create(self.num_embeddings,
                                        self.embedding_dim, int(self.scale))

    def _after_reset(self):
        # nn.Embedding: N(0, 1), then the padding row zero
        if self.padding_idx is not None:
            w = self.state_dict()["weight"]
            w[self.padding_idx] = 0
            self.load_state_dict({"weight": w})

    def forward(self, input):
        """ids ``[*]`` -> embeddings ``[*, embedding_dim]``."""
        with self._use() as ptr:
            ids = as_ids(input, "input")
            out = np.empty(ids.shape + (self.embedding_dim,), np.float32)
            if ids.size == 0:
                return out
            _ll.tfm_embedding_forward(ptr, ids.reshape(1, -1),
                                      out.reshape(1, ids.size,
                                                  self.embedding_dim))
            if self.training:
                self.__dict__["_saved_ids"] = np.array(ids, np.int32)
            return out

    def backward(self, grad_output):
        """Accumulates the gradient of the weight from grad_output
        ``[*, embedding_dim]`` (the shape of the last training-mode call's
        output): row ``ids[i]`` gets ``grad_output[i]`` added, once per
        occurrence, except the padding_idx row (no gradient, as
        nn.Embedding).  Returns None: ids have no gradient
        (tfm_embedding_backward)."""
        ids = self.__dict__.get("_saved_ids")
        if ids is None:
            raise InvalidArgumentError(
                "Embedding.backward: no training-mode call to differentiate "
                "(call train(), then the module, then backward)")
        g = as_float32(grad_output, "grad_output")
        if g.shape != ids.shape + (self.embedding_dim,):
            raise ShapeError(f"grad_output has shape {g.shape}; the output "
                             f"had {ids.shape + (self.embedding_dim,)}")
        if ids.size == 0:
            return None
        pad = -1 if self.padding_idx is None else self.padding_idx
        with self._use() as ptr:
            _ll.tfm_embedding_backward(
                ptr, ids.reshape(1, -1), pad,
                np.ascontiguousarray(g).reshape(1, ids.size,
                                                self.embedding_dim))
        return None

    def _extra_repr(self):
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.scale:
            text += ", scale=True"
        return text
