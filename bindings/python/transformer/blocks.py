"""The Transformer blocks and the containers built of them, as torch.nn's:
TransformerEncoderLayer and TransformerDecoderLayer (attention, feed-forward
and norms), TransformerEncoder and TransformerDecoder (stacks of layers)
and Transformer (encoder and decoder); the layer configuration they share
and their sub-module views (``layer.self_attn``, ``encoder.layers[0]``).
Public through transformer.modules, transformer.nn and transformer (shape
conventions: see modules.py).
"""

import numpy as np

from . import _lowlevel as _ll
from ._core import (BatchIO, Module, as_float, as_int, check_float32_dtype,
                    is_batched, mha_masks)
from ._errors import ShapeError, UnsupportedError
from ._torch import wrong_module
from ._tree import ModuleList, make_view, using, view_without_init
from ._variants import HasAttentionVariant, normalize, to_config, variant_repr
from .attention_layers import MultiheadAttention
from .layers import (_ACTIVATION_NAMES, LayerNorm, _activation, _linear_view,
                     _norm_view)

__all__ = ["TransformerEncoderLayer", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerDecoder", "Transformer"]


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


# ---- Sub-module views -------------------------------------------------------

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



# ---- Encoder and decoder layers ---------------------------------------------

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
        io, g = _grad_output(self.batch_first, batched, grad_output, x.shape)
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
        io, g = _grad_output(self.batch_first, batched, grad_output, x.shape)
        grad_tgt = np.empty(x.shape, np.float32)
        grad_memory = np.empty(mem.shape, np.float32)
        self._call(_ll.tfm_decoder_layer_backward, x, mem, tgt_masks,
                   memory_masks, g, grad_tgt, grad_memory)
        return io.give(grad_tgt), io.give(grad_memory)


def _grad_output(batch_first, batched, grad_output, shape):
    """(io, g): the BatchIO of a call's layout (batch_first, batched) and
    grad_output taken through it as a contiguous float32 array, which must
    have the output's shape `shape` (the saved input's), else ShapeError."""
    io = BatchIO(batch_first, batched)
    g = np.ascontiguousarray(io.take(grad_output, "grad_output"))
    if g.shape != shape:
        raise ShapeError(f"grad_output must have the output's shape, got "
                         f"{list(np.shape(grad_output))}")
    return io, g


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


def _decoder_masks(n, nhead, batched, tgt_mask, memory_mask,
                   tgt_key_padding_mask, memory_key_padding_mask,
                   tgt_is_causal, memory_is_causal):
    """A decoder's (target, memory) masks for the C library, from
    nn.TransformerDecoder's mask arguments."""
    tgt_masks = mha_masks(n, nhead, batched, tgt_key_padding_mask, tgt_mask,
                          bool(tgt_is_causal),
                          ("tgt_key_padding_mask", "tgt_mask"))
    memory_masks = mha_masks(n, nhead, batched, memory_key_padding_mask,
                             memory_mask, bool(memory_is_causal),
                             ("memory_key_padding_mask", "memory_mask"))
    return tgt_masks, memory_masks


def _decode(module, forward, tgt, memory, tgt_mask, memory_mask,
            tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
            memory_is_causal, keep=False):
    with module._use() as ptr:
        batched = is_batched(tgt, "tgt")
        io = BatchIO(module.batch_first, batched)
        x = io.take(tgt, "tgt")
        mem = io.take(memory, "memory")
        n = x.shape[0]
        tgt_masks, memory_masks = _decoder_masks(
            n, module.nhead, batched, tgt_mask, memory_mask,
            tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
            memory_is_causal)
        out = np.empty((n, x.shape[1], module.d_model), np.float32)
        forward(ptr, x, mem, tgt_masks, memory_masks, out)
        norm = getattr(module, "norm", None)
        if norm is not None and not getattr(module, "_c_norm", False):
            norm._normalize_in_place(out)
    if keep and module.training:
        module._keep_for_backward(x, mem)
        module.__dict__["_saved_call"] = (tgt_masks, memory_masks, batched)
    return io.give(out)


# ---- Stacks -----------------------------------------------------------------

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
    _, g = _grad_output(stack.batch_first, batched, grad_output, x.shape)
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


# ---- Transformer ------------------------------------------------------------

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
            tgt_masks, memory_masks = _decoder_masks(
                n, self.nhead, batched, tgt_mask, memory_mask,
                tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                memory_is_causal)
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
        io, g = _grad_output(self.batch_first, batched, grad_output, t.shape)
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
