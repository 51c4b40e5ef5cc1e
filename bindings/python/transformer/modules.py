"""Layers with torch.nn's names, arguments, defaults and return values.

Shapes: N = batch, L = target (query) length, S = source (key) length,
E = embed_dim / d_model.  With ``batch_first=False`` (PyTorch's default)
activations are ``[L, N, E]`` and are transposed (one copy) on the way in
and out; ``batch_first=True`` (``[N, L, E]``) hands the arrays to the C
library without copying.  Unbatched inputs ``[L, E]`` are accepted as in
PyTorch.  Every result is a float32 numpy array.

The modules live in three files, by kind:

    layers.py             Linear, LayerNorm, RMSNorm, GatedFeedForward,
                          PatchEmbedding, Embedding
    attention_layers.py   MultiheadAttention, Attention
    blocks.py             TransformerEncoderLayer, TransformerDecoderLayer,
                          TransformerEncoder, TransformerDecoder, Transformer

This module gathers them under their public names (transformer.modules.X;
transformer.nn and transformer re-export them too).
"""

# Module, ModuleList and these errors were importable from here before the
# split too.
from ._core import Module
from ._errors import InvalidArgumentError, ShapeError, UnsupportedError
from ._tree import ModuleList
from .attention_layers import Attention, MultiheadAttention
from .blocks import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                     TransformerEncoder, TransformerEncoderLayer)
from .layers import (Embedding, GatedFeedForward, LayerNorm, Linear,
                     PatchEmbedding, RMSNorm)

__all__ = ["MultiheadAttention", "Attention", "LayerNorm", "RMSNorm",
           "Linear", "PatchEmbedding", "GatedFeedForward",
           "TransformerEncoderLayer", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerDecoder", "Transformer",
           "Embedding"]
