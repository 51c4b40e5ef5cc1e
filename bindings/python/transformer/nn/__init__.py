"""torch.nn's place for the layers and nn.utils: ``transformer.nn.Linear``
is ``transformer.Linear``; ``transformer.nn.utils.clip_grad_norm_`` clips
gradients."""

from ..modules import (Attention, Embedding, GatedFeedForward, LayerNorm,
                       RMSNorm, Linear,
                       MultiheadAttention, Transformer, TransformerDecoder,
                       TransformerDecoderLayer, TransformerEncoder,
                       TransformerEncoderLayer)
from .._core import Module
from .._tree import ModuleList
from . import utils

__all__ = ["Attention", "Embedding", "GatedFeedForward", "LayerNorm",
           "RMSNorm", "Linear", "Module",
           "ModuleList", "MultiheadAttention", "Transformer",
           "TransformerDecoder", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerEncoderLayer", "utils"]
