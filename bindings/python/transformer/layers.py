"""The per-position layers, each one C module: Linear, LayerNorm,
RMSNorm, GatedFeedForward, PatchEmbedding and Embedding, with torch.nn's
names, arguments and defaults; the Linear and norm views that the bigger
modules give their parts as (``mha.out_proj``, ``layer.norm1``); and the
activation names.  Public through transformer.modules, transformer.nn and
transformer (shape conventions: see modules.py).
"""

import numbers

import numpy as np

from . import _lowlevel as _ll
from ._core import (Module, as_float, as_float32, as_ids, as_int,
                    check_float32_dtype, enum_names)
from ._errors import InvalidArgumentError, ShapeError, UnsupportedError
from ._tree import make_view, using

__all__ = ["Linear", "LayerNorm", "RMSNorm", "GatedFeedForward",
           "PatchEmbedding", "Embedding"]


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


# ---- Linear -----------------------------------------------------------------

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



# ---- PatchEmbedding ---------------------------------------------------------

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


# ---- LayerNorm --------------------------------------------------------------

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


# ---- Embedding --------------------------------------------------------------

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
