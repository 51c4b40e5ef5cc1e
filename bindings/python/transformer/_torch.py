"""PyTorch interoperability, with torch optional: torch.Tensor results for
torch.Tensor inputs, ``from_torch`` converters for every module class, and
messages that say when a torch.nn module was given where libtransformer's
is needed.

torch is never imported here unless the caller has imported it already
(a torch.Tensor input, a torch.nn module to convert).
"""

import sys

import numpy as np


def _loaded_torch():
    return sys.modules.get("torch")


def is_tensor(x):
    """Whether x is a torch.Tensor (False when torch is not loaded)."""
    torch = _loaded_torch()
    return torch is not None and isinstance(x, torch.Tensor)


def any_tensor(args, kwargs):
    """Whether any positional or keyword argument is a torch.Tensor."""
    torch = _loaded_torch()
    if torch is None:
        return False
    return (any(isinstance(a, torch.Tensor) for a in args) or
            any(isinstance(v, torch.Tensor) for v in kwargs.values()))


def to_torch(out):
    """numpy arrays in a result (an array, or tuples / lists of them, None
    kept) as torch.Tensors sharing their memory (torch.from_numpy)."""
    if isinstance(out, np.ndarray):
        import torch
        return torch.from_numpy(out)
    if isinstance(out, tuple):
        return type(out)(to_torch(o) for o in out) if not hasattr(
            out, "_fields") else type(out)(*(to_torch(o) for o in out))
    if isinstance(out, list):
        return [to_torch(o) for o in out]
    return out


def torch_results(fn):
    """Decorator: fn's arrays become torch.Tensors when an argument is
    one."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return to_torch(out) if any_tensor(args, kwargs) else out
    return wrapper


# ---- Messages ----------------------------------------------------------------

def _is_torch_module(obj):
    torch = _loaded_torch()
    return torch is not None and isinstance(obj, torch.nn.Module)


def _torch_name(obj):
    """torch.nn.X when obj's class is torch.nn's public X, else its full
    dotted name."""
    cls = type(obj)
    torch = _loaded_torch()
    if torch is not None and getattr(torch.nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def wrong_module(who, role, expected, obj, arg="layer"):
    """The TypeError for an argument that must be a libtransformer module
    of class `expected`, saying which library's class was given and, for a
    torch.nn module, how to convert it."""
    msg = (f"{who} needs a transformer.{expected.__name__} as its {role}, "
           f"not ")
    if _is_torch_module(obj):
        msg += (f"{_torch_name(obj)} (PyTorch's class): convert it with "
                f"transformer.{expected.__name__}.from_torch({arg})")
        if type(obj).__name__ != expected.__name__:
            msg += f" after making it a torch.nn.{expected.__name__}"
    else:
        cls = type(obj)
        where = ("transformer" if cls.__module__.startswith("transformer")
                 else cls.__module__)
        msg += f"{where}.{cls.__qualname__}"
    return TypeError(msg)


def state_dict_hint(obj):
    """Extra words for load_state_dict given a module instead of a mapping."""
    if _is_torch_module(obj):
        return (f" ({_torch_name(obj)}): pass its .state_dict(), or convert "
                f"it with transformer.<class>.from_torch(module)")
    return ""


# ---- from_torch --------------------------------------------------------------

def _state(module):
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def _bias_kwargs(has_bias):
    # Only bias=False is passed on, so that classes without the option
    # keep working with PyTorch modules that have biases.
    return {} if has_bias else {"bias": False}


def _mha(T, m):
    kwargs = {}
    if m.bias_k is not None:
        kwargs["add_bias_kv"] = True
    if m.add_zero_attn:
        kwargs["add_zero_attn"] = True
    kwargs.update(_bias_kwargs(m.in_proj_bias is not None))
    return T.MultiheadAttention(m.embed_dim, m.num_heads, dropout=m.dropout,
                                kdim=m.kdim, vdim=m.vdim,
                                batch_first=m.batch_first, **kwargs)


def _layer_norm(T, m):
    kwargs = {}
    if m.elementwise_affine and getattr(m, "bias", 0) is None:
        kwargs["bias"] = False
    return T.LayerNorm(tuple(m.normalized_shape), eps=m.eps,
                       elementwise_affine=m.elementwise_affine, **kwargs)


def _linear(T, m):
    return T.Linear(m.in_features, m.out_features, bias=m.bias is not None)


def _embedding(T, m):
    if m.max_norm is not None:
        from ._errors import UnsupportedError
        raise UnsupportedError("Embedding.from_torch: max_norm is not "
                               "supported")
    return T.Embedding(m.num_embeddings, m.embedding_dim,
                       padding_idx=m.padding_idx)


def _layer_kwargs(layer):
    """The constructor arguments of a torch encoder or decoder layer."""
    kwargs = dict(dim_feedforward=layer.linear1.out_features,
                  dropout=layer.dropout.p, activation=layer.activation,
                  layer_norm_eps=layer.norm1.eps,
                  batch_first=layer.self_attn.batch_first,
                  norm_first=layer.norm_first)
    kwargs.update(_bias_kwargs(layer.linear1.bias is not None))
    return layer.self_attn.embed_dim, layer.self_attn.num_heads, kwargs


def _encoder_layer(T, m):
    d, h, kwargs = _layer_kwargs(m)
    return T.TransformerEncoderLayer(d, h, **kwargs)


def _decoder_layer(T, m):
    d, h, kwargs = _layer_kwargs(m)
    return T.TransformerDecoderLayer(d, h, **kwargs)


def _stack(T, m, layer_cls):
    template = layer_cls.from_torch(m.layers[0])
    norm = None if m.norm is None else T.LayerNorm.from_torch(m.norm)
    stack_cls = (T.TransformerEncoder if layer_cls is T.TransformerEncoderLayer
                 else T.TransformerDecoder)
    out = stack_cls(template, len(m.layers), norm=norm)
    template.close()
    return out


def _encoder(T, m):
    return _stack(T, m, T.TransformerEncoderLayer)


def _decoder(T, m):
    return _stack(T, m, T.TransformerDecoderLayer)


def _transformer(T, m):
    enc = m.encoder.layers[0]
    d, h, kwargs = _layer_kwargs(enc)
    kwargs["batch_first"] = m.batch_first
    return T.Transformer(d, h, num_encoder_layers=len(m.encoder.layers),
                         num_decoder_layers=len(m.decoder.layers), **kwargs)


_CONVERTERS = {
    "MultiheadAttention": _mha,
    "LayerNorm": _layer_norm,
    "Linear": _linear,
    "Embedding": _embedding,
    "TransformerEncoderLayer": _encoder_layer,
    "TransformerDecoderLayer": _decoder_layer,
    "TransformerEncoder": _encoder,
    "TransformerDecoder": _decoder,
    "Transformer": _transformer,
}


def from_torch(cls, module):
    """cls.from_torch(module): see Module.from_torch."""
    import transformer as T
    name = cls.__name__
    convert = _CONVERTERS.get(name)
    if convert is None or getattr(T, name, None) is not cls:
        raise TypeError(f"{name}.from_torch: {name} has no torch.nn "
                        "counterpart to convert from")
    torch = _loaded_torch()
    expected = None if torch is None else getattr(torch.nn, name, None)
    if expected is None or not isinstance(module, expected):
        what = (_torch_name(module) if _is_torch_module(module)
                else type(module).__name__)
        raise TypeError(f"{name}.from_torch needs a torch.nn.{name}, not "
                        f"{what}")
    out = convert(T, module)
    try:
        out.load_state_dict(_state(module))
    except BaseException:
        out.close()
        raise
    return out
