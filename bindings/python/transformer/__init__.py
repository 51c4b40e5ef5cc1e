"""libtransformer for Python: Transformer building blocks in C on OpenBLAS,
with PyTorch's vocabulary and numpy arrays.

Where a concept exists in ``torch.nn`` it has the same name, arguments,
defaults, mask conventions and return values::

    import numpy as np, transformer

    mha = transformer.MultiheadAttention(8, 2, batch_first=True)
    mha.load_state_dict(torch_mha.state_dict())     # torch tensors or numpy
    x = np.random.rand(4, 5, 8).astype(np.float32)  # [N, L, E]
    out, weights = mha(x, x, x, is_causal=True)      # [4, 5, 8], [4, 5, 5]

    model = transformer.load_model()                 # the shipped model
    print(model.generate("And God said", max_new_tokens=100))   # greedy
    print(model.generate("And God said", max_new_tokens=100,    # sampled
                         temperature=0.8, top_p=0.9, seed=1))

Generation is greedy unless sampling is asked for (``do_sample=True``, or
temperature / top_k / top_p / seed given), as in transformer-generate;
sampling defaults to temperature 1, all tokens, seed DEFAULT_SEED (42).

Layers: MultiheadAttention, LayerNorm, RMSNorm, Linear, PatchEmbedding,
GatedFeedForward,
TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder, TransformerDecoder,
Transformer, Embedding, and Attention (attention variants on per-head
arrays).  Functions: scaled_dot_product_attention (and its gradients,
scaled_dot_product_attention_backward), attention, cross_entropy (and
cross_entropy_backward: the loss and its gradient),
sinusoidal_positional_encoding.  Models: Model (load_model,
default_model_path), KVCache, Tokenizer, Sampler.  Files:
load_safetensors, save_safetensors, load_safetensors_metadata.

PyTorch models: ``Class.from_torch(torch_module)`` converts any of the
layers above (configuration and weights).  Sub-modules are views with
torch.nn's names (``layer.self_attn``, ``layer.linear1`` -- a Linear --,
``layer.norm1``, ``encoder.layers[0]``, ``transformer.encoder``,
``model.layers[0]``), sharing the parent's parameters: loading into one
changes the parent.  ``named_modules()``, ``named_children()``,
``named_parameters()`` and ``get_submodule()`` work as in torch (without
dropout modules).

Training: ``module.train()``, the forward call, ``module.backward(
grad_output)`` (Linear, LayerNorm, MultiheadAttention, ...), then an
optimizer of ``transformer.optim`` (SGD, Adam, AdamW with torch.optim's
arguments) and a scheduler of ``transformer.optim.lr_scheduler``
(LambdaLR, InverseSqrtWarmup, WarmupCosine); gradient clipping is
``transformer.nn.utils.clip_grad_norm_(module_or_optimizer, max_norm)``.

Arrays: float32 numpy arrays (other real dtypes and torch tensors are
converted; contiguous float32 input is used without a copy).  Results are
float32 numpy arrays, or torch.Tensors sharing their memory when an
argument is a torch.Tensor.  Dropout is not applied, in training mode
either (not yet implemented); gradients are computed only by the explicit
``backward`` calls above, not by autograd (there is no requires_grad).

Masks: ``MultiheadAttention`` and the layers take PyTorch's
``nn.MultiheadAttention`` convention (bool True = masked out, float =
added to the logits); ``scaled_dot_product_attention`` takes
``F.scaled_dot_product_attention``'s (bool True = may attend).

Errors: the library's status codes raise subclasses of TransformerError
that also derive from the matching builtin (ShapeError is a ValueError,
NotFoundError a KeyError, ...), carrying the library's message.
load_state_dict's StateDictError (missing or unexpected keys) and
StateDictShapeError are RuntimeErrors, as PyTorch's.

Attention variants (include/transformer/variants.h): MultiheadAttention,
TransformerEncoderLayer, Attention and attention take keywords such as
``score="general"``, ``n_kv_heads=2``, ``rope="half"``,
``relative="alibi"`` or ``sparsity="sliding_window", window=4`` (see
``help(transformer.Attention)``), Model configs an ``"attention"`` dict of
the same keywords; ``module.attention_config`` reads a variant back.

Initialisation: new modules start with PyTorch's default initialisation
(``reset_parameters``), drawn from the package's generator;
``manual_seed(s)`` makes it reproducible, as ``torch.manual_seed``.

Beyond one process: ``transformer.distributed`` trains data-parallel over
MPI (mpi4py); ``transformer.dask.generate(client, model, prompts, ...)``
generates for a list of prompts on the workers of a Dask cluster
(python3-distributed).  Both are imported on their own.

Threads: ``set_num_threads(n)`` / ``get_num_threads()`` as in torch
(process-wide; 0 restores the default, one per online processor).

Lifetime: every object owning a C handle frees it exactly once, when
garbage-collected or on ``close()`` (also a context manager); a closed
object raises ClosedError (a ValueError).
"""

from . import _lowlevel
from ._errors import (CapacityError, ClosedError, FormatError,
                      InvalidArgumentError, NonFiniteError, BusyError,
                      NotFoundError,
                      NullArgumentError, OutOfMemoryError, ShapeError,
                      StateDictError, StateDictShapeError,
                      TransformerError, TransformerIOError,
                      TransformerOverflowError, UnsupportedError,
                      WrongKindError)
from . import _core
from ._core import Module, live_handles
from ._tree import ModuleList
from ._init import manual_seed
from .modules import (Attention, Embedding, GatedFeedForward, LayerNorm,
                      Linear, MultiheadAttention, PatchEmbedding, RMSNorm,
                      Transformer, TransformerDecoder,
                      TransformerDecoderLayer, TransformerEncoder,
                      TransformerEncoderLayer)
from .images import ViTImageProcessor
from .functional import (attention, cross_entropy, cross_entropy_backward,
                         scaled_dot_product_attention,
                         scaled_dot_product_attention_backward,
                         sinusoidal_positional_encoding)
from .models import (DEFAULT_SEED, AutoModelForCausalLM,
                     AutoModelForImageClassification,
                     AutoModelForMaskedLM, KVCache, Model,
                     Sampler, Tokenizer, default_model_path, from_pretrained,
                     load_model)
from .safetensors import (load_safetensors, load_safetensors_metadata,
                          save_safetensors)
from .tokenizers import load_tokenizer
from . import nn, optim

__version__ = _lowlevel.tfm_version_string()
version_info = tuple(int(p) for p in __version__.split("."))


def set_num_threads(n):
    """Sets how many threads forward passes use, like
    ``torch.set_num_threads``: n >= 1 threads (the library uses at most
    64), or 0 for the default, one per online processor.  Process-wide
    (tfm_set_num_threads); OpenBLAS itself runs single-threaded inside
    the library's threads.  Results do not depend on it beyond rounding.
    Raises TypeError for a non-int (bool included) and
    InvalidArgumentError (a ValueError) for n < 0."""
    if isinstance(n, bool):
        raise TypeError("n must be an int, not bool")
    n = _core.as_int(n, "n", minimum=0)
    _lowlevel.tfm_set_num_threads(min(n, 2**31 - 1))


def get_num_threads():
    """The number of threads forward passes use (at least 1), like
    ``torch.get_num_threads``."""
    return _lowlevel.tfm_get_num_threads()


def release_workspace():
    """Frees the calling thread's scratch memory (it is reused by later
    forward passes, and freed when the thread exits)."""
    _lowlevel.tfm_workspace_release()


__all__ = [
    # layers and functions
    "Module", "ModuleList", "MultiheadAttention", "LayerNorm", "RMSNorm",
    "GatedFeedForward",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
    "Transformer", "Embedding", "Attention", "Linear", "PatchEmbedding",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "attention", "sinusoidal_positional_encoding",
    "cross_entropy", "cross_entropy_backward",
    # models
    "Model", "KVCache", "Tokenizer", "Sampler", "load_model",
    "from_pretrained", "AutoModelForCausalLM", "AutoModelForMaskedLM",
    "ViTImageProcessor", "AutoModelForImageClassification",
    "default_model_path",
    "DEFAULT_SEED", "load_tokenizer",
    # files
    "load_safetensors", "load_safetensors_metadata", "save_safetensors",
    # errors
    "TransformerError", "NullArgumentError", "InvalidArgumentError",
    "ShapeError", "TransformerOverflowError", "OutOfMemoryError",
    "NotFoundError", "WrongKindError", "TransformerIOError", "FormatError",
    "UnsupportedError", "CapacityError", "NonFiniteError", "BusyError",
    "ClosedError",
    "StateDictError", "StateDictShapeError",
    # misc
    "manual_seed", "set_num_threads", "get_num_threads",
    "release_workspace", "nn", "optim",
    "live_handles", "__version__", "version_info",
]
