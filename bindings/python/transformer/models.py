"""Whole models: creation from a config, loading (model files and Hugging
Face checkpoint directories), saving, the forward pass (logits, loss) and
its backward, and the sub-module views.

    model = transformer.load_model()          # the shipped model
    print(model.generate("And God said", max_new_tokens=200))  # greedy
    print(model.generate("And God said", max_new_tokens=200,
                         temperature=0.8, top_p=0.9, seed=1))  # sampled

Text generation (generate, the beam search, stream, kv_cache), Sampler and
KVCache live in generation.py; Model inherits its generation methods from
generation.GenerationMixin, and this module re-exports Sampler, KVCache and
DEFAULT_SEED.
"""

import json
import os
import weakref

import numpy as np

from . import _lowlevel as _ll
from . import _paths
from ._core import (Module, _to_numpy, as_float, as_float32, as_ids, as_int,
                    enum_values, fspath)
# BusyError: importable from here before the split too
from ._errors import (BusyError, InvalidArgumentError, ShapeError,
                      UnsupportedError)
from ._files import is_gguf, present, read_json
from ._torch import torch_results
from ._variants import default_dict, normalize, to_config, to_dict
from ._weights import dtype_value
# DEFAULT_SEED, KVCache and Sampler: re-exported (transformer.models.X)
from .generation import (DEFAULT_SEED, GenerationMixin, KVCache, Sampler,
                         _generation_config)
from .tokenizers import Tokenizer

__all__ = ["Model", "KVCache", "Tokenizer", "Sampler", "load_model",
           "from_pretrained", "AutoModelForCausalLM", "default_model_path"]

# C enum value -> name: the library's tables (names.h).
_ARCHITECTURES = enum_values(_ll.TFM_ENUM_ARCHITECTURE)
_POSITIONALS = enum_values(_ll.TFM_ENUM_POSITIONAL)
_ACTIVATIONS = enum_values(_ll.TFM_ENUM_ACTIVATION)


def default_model_path():
    """The shipped model file: $TRANSFORMER_MODEL when set, else the
    installed copy (<datadir>/transformer/kjv-char.safetensors), else the
    source tree's models/kjv-char.safetensors.  FileNotFoundError when
    neither exists."""
    env = os.environ.get("TRANSFORMER_MODEL")
    if env:
        return env
    candidates = _paths.installed_model_candidates()
    if _paths.SOURCE_MODEL:  # build tree only
        candidates.append(_paths.SOURCE_MODEL)
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(
        "no model file found: set TRANSFORMER_MODEL, or install the model "
        "(cmake --install) or put it in the source tree; looked at "
        + ", ".join(candidates))


def load_model(path=None):
    """Model.load(path): a model file or a Hugging Face checkpoint
    directory; path None means default_model_path()."""
    return Model.load(path)


def from_pretrained(path, dtype=None, mmap=None, torch_dtype=None):
    """Model.from_pretrained(path, dtype=None, mmap=None): a Hugging Face
    checkpoint directory (config.json and safetensors weights; GPT-2,
    Llama, BERT, Marian and ViT), a GGUF file (GPT-2, Llama) or a model
    file, with its tokenizer;
    dtype and mmap as Model.load's."""
    return Model.load(fspath(path), dtype=dtype, mmap=mmap,
                      torch_dtype=torch_dtype)


class AutoModelForCausalLM:
    """Hugging Face's entry point for decoder-only language models:
    ``AutoModelForCausalLM.from_pretrained(path)`` loads a checkpoint
    directory (config.json with "model_type" "gpt2", model.safetensors or
    its shards) or a model file as a Model, with the directory's
    tokenizer, and refuses a model that is not decoder-only.  Not
    instantiated (as in transformers)."""

    _architecture = "decoder_only"

    def __init__(self, *args, **kwargs):
        name = type(self).__name__
        raise TypeError(f"{name} is not instantiated: use "
                        f"{name}.from_pretrained(path)")

    @classmethod
    def from_pretrained(cls, path, dtype=None, mmap=None, torch_dtype=None):
        """The Model of checkpoint directory or model file path, with its
        tokenizer (dtype, mmap: as Model.load's); UnsupportedError when it
        is not of the class's architecture."""
        model = Model.load(fspath(path), dtype=dtype, mmap=mmap,
                           torch_dtype=torch_dtype)
        arch = model.config["architecture"]
        if arch != cls._architecture:
            model.close()
            want = cls._architecture.replace("_", "-")
            article = "an" if want.startswith("e") else "a"
            raise UnsupportedError(
                f"{path}: {cls.__name__} needs {article} {want} model, this "
                f"one is {arch}")
        return model


class AutoModelForMaskedLM(AutoModelForCausalLM):
    """Hugging Face's entry point for masked language models:
    ``AutoModelForMaskedLM.from_pretrained(path)`` loads a checkpoint
    directory ("model_type" "bert": BertForMaskedLM's tensors) or a model
    file as a Model with the directory's tokenizer (vocab.txt), and
    refuses a model that is not encoder-only.  Not instantiated."""

    _architecture = "encoder_only"


def _directory_labels(path):
    """config.json's id2label as {int: str} (an image classifier's labels),
    or None when it has none."""
    labels = read_json(os.path.join(path, "config.json")).get("id2label")
    if not isinstance(labels, dict):
        return None
    return {int(k): str(v) for k, v in labels.items()}


class AutoModelForImageClassification(AutoModelForCausalLM):
    """Hugging Face's entry point for image classifiers:
    ``AutoModelForImageClassification.from_pretrained(path)`` loads a
    checkpoint directory ("model_type" "vit": ViTForImageClassification's
    tensors) or a model file as a Model of images (``logits(pixels)``,
    ``classify(image)``, ``id2label``), and refuses a model of token ids.
    Not instantiated."""

    _architecture = "encoder_only"

    @classmethod
    def from_pretrained(cls, path, dtype=None, mmap=None, torch_dtype=None):
        """The image Model of checkpoint directory or model file path;
        UnsupportedError when it takes token ids."""
        model = super().from_pretrained(path, dtype, mmap, torch_dtype)
        if "patch_size" not in model.config:
            model.close()
            raise UnsupportedError(
                f"{path}: {cls.__name__} needs an image model (a ViT), this "
                f"one takes token ids")
        return model


# The tokenizer files a checkpoint directory may hold (tokenizer_files.c).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model",
                    "sentencepiece.bpe.model", "source.spm", "vocab.txt")
_TOKENIZER_PAIRS = (("encoder.json", "vocab.bpe"),
                    ("vocab.json", "merges.txt"))


def _directory_tokenizer(path):
    """The tokenizer of checkpoint directory path, None when it holds no
    tokenizer file; a tokenizer file that is there but malformed raises."""
    # present(): not opened, and a FIFO or device counts (as the library
    # sees it), so that Tokenizer.load refuses it by name.
    has = any(present(os.path.join(path, n)) for n in _TOKENIZER_FILES)
    has = has or any(all(present(os.path.join(path, n)) for n in pair)
                     for pair in _TOKENIZER_PAIRS)
    return Tokenizer.load(path) if has else None


# ---- Models ----------------------------------------------------------------


def _as_mask(x, name, ndim):
    """Hugging Face's attention_mask as int32: integers, bools or floats
    (as transformers takes them) holding only 1 (a token) and 0
    (padding); anything else raises InvalidArgumentError."""
    a = np.asarray(_to_numpy(x))
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold 1 (a token) and 0 (padding), not "
                        f"dtype {a.dtype}")
    if a.ndim != ndim:
        raise ShapeError(f"{name} must have {ndim} dimension(s), got shape "
                         f"{a.shape}")
    if a.size and not np.all((a == 0) | (a == 1)):
        raise InvalidArgumentError(f"{name} must hold 1 (a token) and 0 "
                                   f"(padding) only")
    return np.require(a.astype(np.int32), np.int32, "CA")


class Model(GenerationMixin, Module):
    """A whole model: decoder-only (GPT style), encoder-only (BERT style) or
    encoder-decoder, with its tokenizer when the file has one.

    ``Model.load(path)`` (or ``load_model(path)``) reads a libtransformer
    model file (safetensors with the configuration in its metadata).
    ``Model(config)`` creates one from a config dict (the keys of
    ``model.config``), initialised as its torch.nn parts would be
    (``reset_parameters``: N(0, 1) embeddings, nn.Linear's head, the
    layers' defaults; from the package's generator, ``manual_seed``).

    Attributes: ``config`` (dict: architecture, vocab_size, d_model,
    n_heads, d_ff, activation, layer_norm_eps, norm_first, n_layers or
    n_encoder_layers / n_decoder_layers, context_length, positional,
    tied_embeddings, embedding_scale, and positional_base and attention
    when they are not the defaults), ``tokenizer`` (Tokenizer or None).

    ``dropout=p`` (not part of the config: a training setting, as
    GPT-2's resid/attn/embd_pdrop together) drops the attention weights,
    the feed-forward's hidden activations, the residual branches and the
    embeddings with probability p in training mode (``set_dropout``
    changes it, e.g. after ``load``).

    ``bias=False`` builds every block without biases, as PyTorch 2.x's
    ``bias=False`` (tfm_model_create_v2: no ``*.bias`` parameter; saved and
    loaded as such); ``config["bias"]`` is present only then.
    ``rms_norm=True`` makes every norm an RMSNorm and ``gated=True`` every
    feed-forward the gated SwiGLU one (tfm_layer_options; Llama's, as
    from_pretrained gives them); ``config["rms_norm"]`` and
    ``config["gated"]`` are present only when true.
    BERT's model parts (tfm_layer_options; what from_pretrained gives a
    "bert" checkpoint): ``type_vocab_size=n`` adds a token-type table
    ``token_type_embedding`` whose row 0 is added to every position (Hugging
    Face's default token_type_ids of zeros), ``embedding_norm=True`` a
    LayerNorm over the summed embeddings, ``final_norm=False`` drops the
    final ``norm`` (BERT's post-norm stack ends with its last layer's),
    ``head_transform=True`` makes the head BertLMPredictionHead's:
    ``LayerNorm(act(h W^T + b)) lm_head^T + lm_head.bias``; present in
    ``config`` only when not the defaults.  ``head_bias=True`` adds
    ``lm_head.bias`` to the logits without a transform (Marian's
    final_logits_bias); encoder-decoder models take it and
    ``final_norm=False`` (no final norm in either stack, as Marian's).

    Options (tfm_model_create_ex): ``positional`` may be "learned",
    "sinusoidal" (interleaved, as the paper), "sinusoidal_concat" (sin |
    cos halves) or "none"; ``positional_base`` is the sinusoids' base
    (10000); ``attention`` is a dict of the attention-variant keywords of
    MultiheadAttention (``{"rope": "half", "n_kv_heads": 1}``, see
    ``help(transformer.Attention)``), used by every block's self-attention
    and honoured by the KV cache (decoder-only and encoder-only models;
    encoder-decoder models take only the default).  ``attention_config``
    has every keyword of the variant; ``config["attention"]`` only those
    that differ from the defaults.

    Methods:
        logits(ids) -> ``[N, L, vocab_size]`` for ids ``[N, L]``
            (``[L, vocab_size]`` for ``[L]``); encoder-decoder models take
            logits(src_ids, tgt_ids).
        generate(prompt, max_new_tokens=100, temperature=None, top_k=None,
            top_p=None, seed=None, greedy=None, do_sample=None) -> str (or
            ids): greedy unless sampling is asked for (do_sample=True, or
            temperature / top_k / top_p / seed given); also Hugging Face's
            min_new_tokens, eos_token_id, stop_strings, repetition_penalty,
            no_repeat_ngram_size.
        stream(prompt, max_new_tokens=100, ...) -> an iterator over the
            text pieces (or ids) as they are generated; generate's
            arguments.
        kv_cache(capacity=None) -> KVCache for step-by-step decoding.
        save(path) writes a model file (with the tokenizer).
    (kv_cache, generate and stream come from generation.GenerationMixin.)
    Plus the Module methods (state_dict, load_state_dict, num_parameters,
    forward_macs, close).
    """

    tokenizer = None
    path = None
    _transient = ("_handle", "_caches")

    def __init__(self, config=None, dropout=0.0, **kwargs):
        cfg = dict(config or {})
        cfg.update(kwargs)
        _model_config(cfg)                      # check it before keeping it
        self._config_dict = cfg
        if cfg.get("id2label"):
            self._id2label = {int(k): str(v)
                              for k, v in cfg["id2label"].items()}
        self.dropout = as_float(dropout, "dropout")
        self._adopt(self._create())
        self._reset_new()

    def _create(self):
        config = _model_config(self._config_dict)
        options = _model_options(self._config_dict)
        cfg = self._config_dict
        if (not cfg.get("bias", True) or not cfg.get("final_norm", True)
                or any(cfg.get(k) for k in (
                    "rms_norm", "gated", "type_vocab_size",
                    "embedding_norm", "head_transform", "head_bias",
                    "patch_size"))):
            layer_options = _ll.tfm_layer_options()
            layer_options.bias = int(bool(cfg.get("bias", True)))
            layer_options.rms_norm = int(bool(cfg.get("rms_norm", False)))
            layer_options.gated = int(bool(cfg.get("gated", False)))
            layer_options.type_vocab_size = as_int(
                cfg.get("type_vocab_size", 0), "type_vocab_size", 0)
            layer_options.embedding_norm = int(bool(
                cfg.get("embedding_norm", False)))
            layer_options.final_norm = int(bool(cfg.get("final_norm", True)))
            layer_options.head_transform = int(bool(
                cfg.get("head_transform", False)))
            layer_options.head_bias = int(bool(cfg.get("head_bias", False)))
            for key in ("patch_size", "image_size", "num_channels"):
                setattr(layer_options, key, as_int(cfg.get(key, 0), key, 0))
            return _ll.tfm_model_create_v2(config, options, layer_options)
        if options is None:
            return _ll.tfm_model_create(config)
        return _ll.tfm_model_create_ex(config, options)

    @property
    def _cache_set(self):
        caches = self.__dict__.get("_caches")
        if caches is None:
            caches = self.__dict__["_caches"] = weakref.WeakSet()
        return caches

    @classmethod
    def load(cls, path=None, dtype=None, mmap=None, torch_dtype=None):
        """Loads a model file (default: default_model_path()) and, when its
        metadata has one, its tokenizer; a GGUF file (llama.cpp's, "gpt2"
        or "llama", weights kept in the file's types) with its tokenizer;
        or a Hugging Face checkpoint
        directory (config.json, model.safetensors or sharded weights with
        model.safetensors.index.json; GPT-2, Llama, BERT, Marian, ViT) with the tokenizer its
        files give (tokenizer.json, vocab.json + merges.txt, ...), None
        when it has none.

        dtype (Hugging Face's ``torch_dtype=`` is the same argument): how
        the weights of the matrix products and embeddings are kept, as
        :meth:`quantize` names them ("float32", "bfloat16", "float16",
        "q8_0", "q4_0", or a torch dtype), or "auto": each in the type the
        file stores it in.  mmap=True (the default once dtype or mmap is
        given) uses the weights kept in the file's own type where they lie
        in a read-only mapping of the file; False copies them
        (tfm_model_load_v2, weights.h).  A weight used from the mapping is
        read-only, float32 ones included: such a model does not train
        (``quantize("float32")`` copies them).  Neither given (None, None):
        every weight float32 in the model's own memory, a trainable model
        (tfm_model_load; a GGUF file's weights as it stores them)."""
        path = default_model_path() if path is None else fspath(path)
        if torch_dtype is not None:
            if dtype is not None:
                raise TypeError("give dtype or torch_dtype, not both")
            dtype = torch_dtype
        self = cls.__new__(cls)
        if dtype is None and mmap is None:
            self._adopt(_ll.tfm_model_load(path))
        else:
            options = _ll.tfm_load_options()
            if dtype is not None:
                options.dtype = dtype_value(dtype, "load", auto=True)
            if mmap is not None:
                options.mmap = 1 if mmap else 0
            self._adopt(_ll.tfm_model_load_v2(path, options))
        self._config_dict = self.config
        self.path = path
        if os.path.isdir(path):
            try:
                if "patch_size" in self._config_dict:  # an image model
                    self._id2label = _directory_labels(path)
                    self._config_dict = self.config
                self.tokenizer = _directory_tokenizer(path)
                self.generation_config = _generation_config(path)
            except BaseException:
                self.close()
                raise
            return self
        if is_gguf(path):  # llama.cpp's: its tokenizer.ggml.* keys
            try:
                self.tokenizer = Tokenizer.load(path)
            except BaseException:
                self.close()
                raise
            return self
        # No tokenizer only when the file has no "tfm.tokenizer" key; a
        # tokenizer that is there but malformed raises its own error.
        f = _ll.tfm_safetensors_open(path)
        try:
            has_tokenizer = _ll.tfm_safetensors_metadata(
                f, "tfm.tokenizer") is not None
            labels = _ll.tfm_safetensors_metadata(f, "id2label")
        finally:
            _ll.tfm_safetensors_close(f)
        if labels is not None and "patch_size" in self._config_dict:
            try:   # what save wrote: {"0": name, ...}
                labels = {int(k): str(v)
                          for k, v in json.loads(labels).items()}
            except (ValueError, AttributeError):
                labels = None
            if labels:
                self._id2label = labels
                self._config_dict = self.config
        if has_tokenizer:
            try:
                self.tokenizer = Tokenizer.load(path)
            except BaseException:
                self.close()
                raise
        return self

    from_pretrained = load

    def close(self):
        """Frees the model and every KV cache made from it."""
        for cache in list(self._cache_set):
            cache.close()
        super().close()

    @property
    def config(self):
        """The configuration as a dict (see the class docstring)."""
        c = _ll.tfm_model_config()
        self._call(_ll.tfm_model_get_config, c)
        arch = _ARCHITECTURES.get(c.architecture, c.architecture)
        out = {"architecture": arch, "vocab_size": c.vocab_size,
               "d_model": c.layer.d_model, "n_heads": c.layer.n_heads,
               "d_ff": c.layer.d_ff,
               "activation": _ACTIVATIONS.get(c.layer.activation,
                                              c.layer.activation),
               "layer_norm_eps": c.layer.layer_norm_eps,
               "norm_first": bool(c.layer.norm_first)}
        if arch == "encoder_decoder":
            out["n_encoder_layers"] = c.n_encoder_layers
            out["n_decoder_layers"] = c.n_decoder_layers
        else:
            out["n_layers"] = c.n_layers
        out.update({"context_length": c.context_length,
                    "positional": _POSITIONALS.get(c.positional, c.positional),
                    "tied_embeddings": bool(c.tied_embeddings),
                    "embedding_scale": bool(c.embedding_scale)})
        lo = _ll.tfm_layer_options()
        self._call(_ll.tfm_model_get_layer_options, lo)
        if not lo.bias:
            out["bias"] = False
        if lo.rms_norm:
            out["rms_norm"] = True
        if lo.gated:
            out["gated"] = True
        if lo.type_vocab_size:
            out["type_vocab_size"] = lo.type_vocab_size
        if lo.embedding_norm:
            out["embedding_norm"] = True
        if not lo.final_norm:
            out["final_norm"] = False
        if lo.head_transform:
            out["head_transform"] = True
        elif lo.head_bias:
            out["head_bias"] = True
        if lo.patch_size:
            out.update(patch_size=lo.patch_size, image_size=lo.image_size,
                       num_channels=lo.num_channels)
        id2label = self.__dict__.get("_id2label")
        if id2label:
            out["id2label"] = dict(id2label)
        base, attention = self._options()
        if base not in (0.0, _DEFAULT_BASE):
            out["positional_base"] = base
        defaults = default_dict()
        variant = {k: v for k, v in attention.items() if v != defaults[k]
                   and not (k == "n_kv_heads" and v == c.layer.n_heads)}
        if variant:
            out["attention"] = variant
        return out

    def _options(self):
        o = _ll.tfm_model_options()
        self._call(_ll.tfm_model_get_options, o)
        return float(o.positional_base), to_dict(o.attention)

    @property
    def attention_config(self):
        """The self-attention variant of every block: a dict with every
        keyword, as MultiheadAttention.attention_config (``config`` holds
        only the keywords that differ from the defaults)."""
        return self._options()[1]

    @torch_results
    def logits(self, ids, tgt_ids=None, attention_mask=None,
               token_type_ids=None):
        """Logits of every position, all at once.

        Decoder-only (causal) and encoder-only (bidirectional): ids ``[N,
        L]`` -> ``[N, L, vocab_size]``; ids ``[L]`` -> ``[L, vocab_size]``.
        Encoder-decoder: ids are the source ``[N, S]``, tgt_ids the target
        ``[N, L]`` (causal) -> ``[N, L, vocab_size]``.
        L must not exceed context_length (CapacityError).
        attention_mask and token_type_ids (decoder-only and encoder-only
        models; the shape of ids) are Hugging Face's: 1 for a token, 0 for
        padding, which no position attends to; BERT's segment ids, for a
        model with a token-type table (tfm_model_logits_v2).  Training
        (backward) takes neither: with either given, the forward is not
        kept for backward."""
        with self._use() as ptr:
            c = self.config
            vocab = c["vocab_size"]
            if "patch_size" in c:
                if (tgt_ids is not None or attention_mask is not None
                        or token_type_ids is not None):
                    raise TypeError("an image model takes only pixel values")
                return self._image_logits(ptr, ids, c)
            src = as_ids(ids, "ids")
            if src.ndim not in (1, 2):
                raise ShapeError(f"ids must be [N, L] or [L], got shape "
                                 f"{src.shape}")
            single = src.ndim == 1
            if single:
                src = src[None]
            if c["architecture"] == "encoder_decoder":
                if attention_mask is not None or token_type_ids is not None:
                    raise TypeError("attention_mask and token_type_ids are "
                                    "for decoder-only and encoder-only "
                                    "models")
                if tgt_ids is None:
                    raise TypeError("an encoder-decoder model needs tgt_ids: "
                                    "logits(src_ids, tgt_ids)")
                tgt = as_ids(tgt_ids, "tgt_ids", 1 if single else 2)
                if single:
                    tgt = tgt[None]
                out = np.empty((tgt.shape[0], tgt.shape[1], vocab), np.float32)
                _ll.tfmpy_model_seq2seq_logits(ptr, src, tgt, out)
            elif attention_mask is not None or token_type_ids is not None:
                if tgt_ids is not None:
                    raise TypeError("tgt_ids is only for encoder-decoder models")
                none = np.zeros((0, 0), np.int32)
                extra = [none if a is None else
                         conv(a, name, 1 if single else 2)
                         for a, name, conv in (
                             (token_type_ids, "token_type_ids", as_ids),
                             (attention_mask, "attention_mask", _as_mask))]
                extra = [a[None] if single and a is not none else a
                         for a in extra]
                for a, name, given in ((extra[0], "token_type_ids",
                                        token_type_ids),
                                       (extra[1], "attention_mask",
                                        attention_mask)):
                    if given is not None and a.shape != src.shape:
                        raise ShapeError(
                            f"{name} must have the shape of ids "
                            f"{tuple(src.shape[single:])}, got "
                            f"{tuple(a.shape[single:])}")
                out = np.empty((src.shape[0], src.shape[1], vocab), np.float32)
                _ll.tfmpy_model_logits_v2(ptr, src, extra[0], extra[1], out)
                # not a forward backward() can follow
                self.__dict__.pop("_saved_ids", None)
                self.__dict__.pop("_saved_dlogits", None)
                return out[0] if single else out
            else:
                if tgt_ids is not None:
                    raise TypeError("tgt_ids is only for encoder-decoder models")
                out = np.empty((src.shape[0], src.shape[1], vocab), np.float32)
                _ll.tfm_model_logits(ptr, src, out)
            if self.training:
                self.__dict__.pop("_saved_dlogits", None)
                self.__dict__["_saved_ids"] = (
                    src.copy(), None if tgt_ids is None else tgt.copy(),
                    single)
            return out[0] if single else out

    forward = logits

    def image_logits(self, pixel_values):
        """An image model's (ViT's) class logits: pixel_values ``[B, C, H,
        W]`` (float32, normalised as the checkpoint's image processor
        does) -> ``[B, num_labels]``; ``[C, H, W]`` -> ``[num_labels]``
        (tfm_model_image_logits).  ``logits(pixel_values)`` and
        ``model(pixel_values)`` are the same for an image model."""
        with self._use() as ptr:
            c = self.config
            if "patch_size" not in c:
                raise UnsupportedError("this model takes token ids, not "
                                       "images (it has no patch embedding)")
            return self._image_logits(ptr, pixel_values, c)

    def _image_logits(self, ptr, pixel_values, c):
        x = np.ascontiguousarray(as_float32(pixel_values, "pixel_values"))
        single = x.ndim == 3
        if single:
            x = x[None]
        if x.ndim != 4:
            raise ShapeError(f"pixel_values must be [B, C, H, W] or [C, H, "
                             f"W], got shape {list(x.shape)}")
        out = np.empty((x.shape[0], c["vocab_size"]), np.float32)
        _ll.tfm_model_image_logits(ptr, x, out)
        if self.training:  # what backward() differentiates
            self.__dict__.pop("_saved_ids", None)
            self.__dict__.pop("_saved_dlogits", None)
            self.__dict__["_saved_pixels"] = (x.copy(), single)
        return out[0] if single else out

    def classify(self, image, top_k=5, processor=None):
        """An image model's top_k classes of image (a path, a PIL image or
        an ``[H, W, 3]`` uint8 array), as Hugging Face's
        image-classification pipeline: a list of ``{"label", "score"}``
        dicts, most likely first, scores the softmax over the labels.  The
        image is decoded by Pillow and preprocessed by ``processor`` (a
        ViTImageProcessor; default: the checkpoint directory's,
        ``ViTImageProcessor.from_pretrained(model.path)``)."""
        from .images import ViTImageProcessor
        if int(top_k) < 1:
            raise InvalidArgumentError(f"top_k must be at least 1, got "
                                       f"{top_k}")
        if processor is None:
            processor = (ViTImageProcessor.from_pretrained(self.path)
                         if self.path and os.path.isdir(self.path) else
                         ViTImageProcessor(size=self.config.get(
                             "image_size", 224)))
        logits = self.image_logits(processor(image))[0].astype(np.float64)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        labels = self.id2label or {}
        order = np.argsort(-p, kind="stable")[:int(top_k)]
        return [{"label": labels.get(int(i), f"LABEL_{int(i)}"),
                 "score": float(p[i])} for i in order]

    @property
    def id2label(self):
        """An image classifier's label names {index: name} (config.json's
        id2label), or None."""
        labels = self.__dict__.get("_id2label")
        return dict(labels) if labels else None

    def loss(self, ids, targets, tgt_ids=None, ignore_index=-100,
             label_smoothing=0.0):
        """The mean cross-entropy of the logits against ``targets``, as
        ``torch.nn.functional.cross_entropy(logits.flatten(0, -2),
        targets.flatten(), ignore_index=..., label_smoothing=...)`` (a
        float).  Decoder-only / encoder-only: logits of ``ids [N, L]``,
        targets ``[N, L]`` the class of each position (for a causal LM,
        the ids shifted left by one, ignore_index where there is none).
        Encoder-decoder: ids are the source, ``tgt_ids [N, L]`` the
        decoder's input (teacher forcing), targets ``[N, L]``.  In training
        mode it keeps what :meth:`backward` needs: then ``model.backward()``
        accumulates every parameter's gradient."""
        from .functional import cross_entropy_backward
        logits = self.logits(ids, tgt_ids)
        logits = np.asarray(logits.numpy() if hasattr(logits, "numpy")
                            else logits)
        t = as_ids(targets, "targets")
        if t.shape != logits.shape[:-1]:
            raise ShapeError(f"targets must have shape "
                             f"{list(logits.shape[:-1])} (the logits' "
                             f"positions), got {list(t.shape)}")
        vocab = logits.shape[-1]
        value, grad = cross_entropy_backward(
            logits.reshape(-1, vocab), t.reshape(-1),
            ignore_index=ignore_index, label_smoothing=label_smoothing)
        if self.training:
            self.__dict__["_saved_dlogits"] = grad.reshape(logits.shape)
        return value

    def loss_backward(self, ids, targets, ignore_index=-100,
                      label_smoothing=0.0, reduction="mean", grad_scale=1.0):
        """``loss(ids, targets, ...)`` then ``backward()`` in one forward
        (tfm_model_loss_backward; decoder-only and encoder-only models in
        training mode): returns the cross-entropy (a float, as
        :meth:`loss`) and accumulates grad_scale times its gradient into
        every parameter's (grad_scale = 1 / n for n accumulated
        micro-batches, torch's ``(loss / n).backward()``).  ids, targets:
        ``[N, L]``; reduction "mean" or "sum".  A failed call (a target
        out of range, a NaN logit) changes no gradient."""
        src = as_ids(ids, "ids", 2)
        t = as_ids(targets, "targets")
        if t.shape != src.shape:
            raise ShapeError(f"targets must have the shape of ids "
                             f"{list(src.shape)}, got {list(t.shape)}")
        if reduction not in ("mean", "sum"):
            raise InvalidArgumentError(
                f"reduction must be \"mean\" or \"sum\", not {reduction!r}")
        if self.config["architecture"] == "encoder_decoder":
            raise UnsupportedError(
                "loss_backward takes decoder-only and encoder-only models; "
                "use loss(src, targets, tgt_ids) and backward()")
        with self._use() as ptr:
            return _ll.tfmpy_model_loss_backward(
                ptr, src, np.ascontiguousarray(t.reshape(-1)),
                as_int(ignore_index, "ignore_index"),
                as_float(label_smoothing, "label_smoothing"),
                0 if reduction == "mean" else 1,
                as_float(grad_scale, "grad_scale"))

    def backward(self, grad_logits=None):
        """Back from the gradient of a loss with respect to the logits of
        the last training-mode call: accumulates the gradient of every
        parameter (:meth:`grad`), as ``loss.backward()`` does in torch
        (dropout 0).  Without grad_logits, the loss is the last
        :meth:`loss`'s; with it (the logits' shape), any loss of the last
        :meth:`logits` call (e.g. the ``dlogits`` of
        :func:`cross_entropy_backward`).  Returns None: ids have no
        gradient.  An image model (ViT) differentiates its last
        training-mode ``logits(pixels)`` given grad_logits
        (tfm_model_image_backward)."""
        pixels = self.__dict__.get("_saved_pixels")
        if pixels is not None and "patch_size" in self.config:
            if grad_logits is None:
                raise InvalidArgumentError(
                    "Model.backward of an image model needs grad_logits "
                    "(the gradient of a loss with respect to the logits)")
            x, single = pixels
            g = as_float32(grad_logits, "grad_logits")
            want = (self.config["vocab_size"],) if single else \
                (x.shape[0], self.config["vocab_size"])
            if g.shape != want:
                raise ShapeError(f"grad_logits must have the logits' shape "
                                 f"{list(want)}, got {list(g.shape)}")
            self._call(_ll.tfm_model_image_backward, x,
                       np.ascontiguousarray(g.reshape(x.shape[0], -1)))
            return None
        saved = self.__dict__.get("_saved_ids")
        if grad_logits is None:
            grad_logits = self.__dict__.get("_saved_dlogits")
            if grad_logits is None:
                raise InvalidArgumentError(
                    "Model.backward(): no training-mode loss() to "
                    "differentiate (call train(), then loss(ids, targets), "
                    "then backward(); or pass grad_logits)")
        if saved is None:
            raise InvalidArgumentError(
                "Model.backward: no training-mode call to differentiate "
                "(call train(), then logits(ids), then backward)")
        src, tgt, single = saved
        g = as_float32(grad_logits, "grad_logits")
        want = ((tgt if tgt is not None else src).shape[1],
                self.config["vocab_size"])
        if single:
            # the call was unbatched: so is grad_logits, [L, vocab_size]
            if g.shape != want:
                raise ShapeError(f"grad_logits must have the logits' shape "
                                 f"{list(want)}, got {list(g.shape)}")
            g = g[None]
        g = np.ascontiguousarray(g)
        if tgt is None:
            self._call(_ll.tfm_model_backward, src, g)
        else:
            self._call(_ll.tfmpy_model_seq2seq_backward, src, tgt, g)

    def save(self, path, metadata=None):
        """Writes a model file (atomically): parameters, configuration and
        the tokenizer (if any), plus optional {str: str} metadata, which
        adds to the file's own: "format" and the configuration keys
        ("tfm.d_model", "tfm.attention.*", ...) raise ValueError
        (tfm_model_save's TFM_ERR_INVALID_ARGUMENT) and nothing is
        written."""
        with self._use() as ptr:
            extra = {}
            if self.tokenizer is not None:
                extra["tfm.tokenizer"] = "char"
                extra["tfm.vocab"] = self.tokenizer.vocab
            labels = self.__dict__.get("_id2label")
            if labels:   # an image model's label names (config.json's)
                extra["id2label"] = json.dumps(
                    {str(k): v for k, v in sorted(labels.items())})
            extra.update(metadata or {})
            _ll.tfmpy_model_save(ptr, fspath(path), extra)

    def save_safetensors(self, path, metadata=None):
        """Same as save(): a model file is a safetensors file."""
        self.save(path, metadata)

    def _child_specs(self):
        """Sub-module views, torch.nn's way: token_embedding and (learned)
        position_embedding (Embedding), and for decoder-only and
        encoder-only models layers (a ModuleList of
        TransformerEncoderLayer, batch_first; decoder-only layers are
        causal, so call them with is_causal=True) and norm (LayerNorm)."""
        from .blocks import TransformerEncoderLayer
        from .layers import Embedding, PatchEmbedding, _norm_view
        from ._tree import ModuleList, make_view, using
        c = self.config
        with using(self) as ptr:
            names = [_ll.tfm_module_child_name(ptr, i)
                     for i in range(_ll.tfm_module_child_count(ptr))]
        specs = []
        if "token_embedding" in names:
            specs.append(("token_embedding", lambda: make_view(
                Embedding, self, "token_embedding", c["vocab_size"],
                c["d_model"], scale=c["embedding_scale"])))
        if "patch_embedding" in names:  # an image model (ViT)
            specs.append(("patch_embedding", lambda: make_view(
                PatchEmbedding, self, "patch_embedding", c["d_model"],
                c["num_channels"], c["patch_size"], c["image_size"])))
        if "position_embedding" in names:
            specs.append(("position_embedding", lambda: make_view(
                Embedding, self, "position_embedding",
                c["context_length"], c["d_model"])))
        if "layers.0" not in names:
            return specs
        variant = c.get("attention") or {}

        parts = {k: c[k] for k in ("bias", "rms_norm", "gated") if k in c}

        def layer(i):
            return make_view(TransformerEncoderLayer, self, f"layers.{i}",
                             c["d_model"], c["n_heads"], c["d_ff"],
                             activation=c["activation"],
                             layer_norm_eps=c["layer_norm_eps"],
                             norm_first=c["norm_first"], batch_first=True,
                             **parts, **variant)
        specs.append(("layers", lambda: ModuleList(
            layer(i) for i in range(c["n_layers"]))))
        if "norm" in names:
            specs.append(("norm", lambda: _norm_view(
                self, "norm", c["d_model"], c["layer_norm_eps"])))
        return specs

    def _extra_repr(self):
        c = self.config
        layers = (f"n_layers={c['n_layers']}" if "n_layers" in c else
                  f"n_encoder_layers={c['n_encoder_layers']}, "
                  f"n_decoder_layers={c['n_decoder_layers']}")
        return (f"{c['architecture']}, vocab_size={c['vocab_size']}, "
                f"d_model={c['d_model']}, n_heads={c['n_heads']}, {layers}, "
                f"context_length={c['context_length']}")

    def __repr__(self):
        if self.closed:
            return "Model(<closed>)"
        return super().__repr__()


def _model_config(cfg):
    """A dict (keys of Model.config) -> tfm_model_config."""
    def pick(table, key, default):
        value = cfg.get(key, default)
        for k, v in table.items():
            if v == value:
                return k
        raise InvalidArgumentError(f"{key} must be one of "
                                   f"{sorted(table.values())}, not {value!r}")

    known = {"architecture", "vocab_size", "d_model", "n_heads", "d_ff",
             "activation", "layer_norm_eps", "norm_first", "n_layers",
             "n_encoder_layers", "n_decoder_layers", "context_length",
             "positional", "tied_embeddings", "embedding_scale",
             "positional_base", "attention", "bias", "rms_norm", "gated",
             "type_vocab_size", "embedding_norm", "final_norm",
             "head_transform", "head_bias", "patch_size", "image_size",
             "num_channels", "id2label"}
    unknown = set(cfg) - known
    if unknown:
        raise InvalidArgumentError(f"unknown model config keys: "
                                   f"{sorted(unknown)}")
    for key in ("vocab_size", "d_model", "n_heads", "context_length"):
        if key not in cfg:
            raise InvalidArgumentError(f"the model config needs {key!r}")
    d_model = as_int(cfg["d_model"], "d_model", 1)
    c = _ll.tfm_model_config()
    c.architecture = pick(_ARCHITECTURES, "architecture", "decoder_only")
    c.layer = _ll.tfm_layer_config_default(d_model,
                                           as_int(cfg["n_heads"], "n_heads", 1))
    c.layer.d_ff = as_int(cfg.get("d_ff", 4 * d_model), "d_ff", 1)
    c.layer.activation = pick(_ACTIVATIONS, "activation", "relu")
    c.layer.layer_norm_eps = as_float(cfg.get("layer_norm_eps", 1e-5),
                                      "layer_norm_eps")
    c.layer.norm_first = 1 if cfg.get("norm_first", False) else 0
    c.vocab_size = as_int(cfg["vocab_size"], "vocab_size", 1)
    c.n_layers = as_int(cfg.get("n_layers", 1), "n_layers", 1)
    c.n_encoder_layers = as_int(cfg.get("n_encoder_layers", 1),
                                "n_encoder_layers", 1)
    c.n_decoder_layers = as_int(cfg.get("n_decoder_layers", 1),
                                "n_decoder_layers", 1)
    c.context_length = as_int(cfg["context_length"], "context_length", 1)
    c.positional = pick(_POSITIONALS, "positional", "learned")
    c.tied_embeddings = 1 if cfg.get("tied_embeddings", True) else 0
    c.embedding_scale = 1 if cfg.get("embedding_scale", False) else 0
    _model_options(cfg)                         # check those keys too
    return c


_DEFAULT_BASE = 10000.0


def _model_options(cfg):
    """The "attention" and "positional_base" keys of a config dict -> a
    tfm_model_options, or None when both are the defaults (so that
    tfm_model_create makes the model)."""
    attention = cfg.get("attention")
    if attention is None:
        attention = {}
    elif not isinstance(attention, dict):
        raise TypeError(f"the model config's 'attention' must be a dict of "
                        f"attention-variant keywords, not "
                        f"{type(attention).__name__}")
    variant = normalize(attention, "the model config's 'attention'")
    base = cfg.get("positional_base")
    base = 0.0 if base is None else as_float(base, "positional_base")
    defaults = default_dict()
    if base in (0.0, _DEFAULT_BASE) and all(
            defaults[k] == v for k, v in variant.items()):
        return None
    o = _ll.tfm_model_options()
    o.positional_base = base
    o.attention = to_config(variant)
    return o
