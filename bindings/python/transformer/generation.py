"""Text generation for Model: generate (greedy, sampled, a batch of
prompts), the beam search, stream, the sampler and its options, and the KV
cache.

GenerationMixin holds Model's generation methods (kv_cache, generate,
stream and their helpers); Model (models.py) inherits them, so they are
called as ``model.generate(...)``.  Sampler draws ids from logits with
generate's rule; KVCache keeps the keys and values of the positions decoded
so far; both are also importable from transformer and transformer.models.
"""

import contextlib
import os
import threading
import types
import weakref

import numpy as np

from . import _lowlevel as _ll
from ._core import as_seed
from ._core import (HandleOwner, _Handle, as_float, as_float32, as_ids,
                    as_int)
from ._errors import BusyError, InvalidArgumentError, ShapeError
from ._files import read_json
from ._torch import torch_results

__all__ = ["GenerationMixin", "KVCache", "Sampler", "DEFAULT_SEED"]


# ---- Generation defaults of a checkpoint ------------------------------------

def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _generation_config(path):
    """The generation defaults of checkpoint directory path:
    decoder_start_token_id (else bos_token_id, as transformers falls back),
    forced_eos_token_id, num_beams, max_length, max_new_tokens,
    min_length, min_new_tokens, length_penalty, early_stopping,
    renormalize_logits, eos_token_id (an int, or a list of several),
    suppress_tokens and the single-id entries of bad_words_ids (as a list
    of ids), from generation_config.json when
    it has them, else config.json (as transformers' GenerationConfig
    from_model_config: the former alone when there is one); absent keys
    are left out.  The file is read through the package's one door
    (_files.read_json): TransformerIOError or FormatError naming it when
    it is not a regular file, too large, or not strict JSON (a key twice,
    NaN)."""
    out = {}
    # Whether it is there is asked without opening it (as the command
    # line): a FIFO or a link to /dev/zero named generation_config.json is
    # then refused by read_json, naming it, never taken for missing.
    name = "generation_config.json"
    if not os.path.exists(os.path.join(path, name)):
        name = "config.json"
    cfg = read_json(os.path.join(path, name))
    for key in ("decoder_start_token_id", "forced_eos_token_id",
                "bos_token_id", "num_beams", "max_length",
                "max_new_tokens", "min_length", "min_new_tokens"):
        if _is_int(cfg.get(key)):
            out[key] = cfg[key]
    lp = cfg.get("length_penalty")
    if isinstance(lp, (int, float)) and not isinstance(lp, bool):
        out["length_penalty"] = float(lp)
    if cfg.get("early_stopping") in (True, False, "never"):
        out["early_stopping"] = cfg["early_stopping"]
    if isinstance(cfg.get("renormalize_logits"), bool):
        out["renormalize_logits"] = cfg["renormalize_logits"]
    eos = cfg.get("eos_token_id")
    if _is_int(eos) or (isinstance(eos, list) and eos
                        and all(_is_int(i) for i in eos)):
        # a list: generate's beam search takes one (else it says so)
        out["eos_token_id"] = eos[0] if isinstance(eos, list) and \
            len(eos) == 1 else eos
    listed = cfg.get("suppress_tokens")
    if isinstance(listed, list) and listed:
        out["suppress_tokens"] = sorted({i for i in listed
                                         if _is_int(i)})
    bad = cfg.get("bad_words_ids")
    bad = [b[0] for b in (bad if isinstance(bad, list) else [])
           if isinstance(b, list) and len(b) == 1 and _is_int(b[0])]
    if bad:
        out["bad_words_ids"] = sorted(set(bad))
    return out

# ---- Sampling ---------------------------------------------------------------

# The seed used when sampling is asked for without one: the same in
# generate, Sampler, the Lua module and transformer-generate.
DEFAULT_SEED = 42


def _wants_sampling(temperature, top_k, top_p, seed, greedy, do_sample):
    """The one decoding rule of the bindings and transformer-generate:
    greedy unless sampling is asked for, i.e. do_sample=True (greedy=False),
    or any of temperature, top_k, top_p or seed given (as the command
    line's --temperature, --top-k, --top-p, --seed).  temperature=0 means
    greedy unless do_sample=True (or greedy=False) says otherwise."""
    if greedy is not None and do_sample is not None \
            and bool(greedy) == bool(do_sample):
        raise InvalidArgumentError(
            f"greedy={greedy!r} and do_sample={do_sample!r} contradict each "
            "other: give one of them")
    if do_sample is not None:
        return bool(do_sample)
    if greedy is not None:
        return not greedy
    if temperature is not None and as_float(temperature, "temperature") == 0:
        return False
    return any(v is not None for v in (temperature, top_k, top_p, seed))


def _sampling(temperature, top_k, top_p, seed, greedy, do_sample):
    """(tfm_sampling, seed) from the keyword arguments of generate and
    Sampler; unset values take the defaults temperature 1, top_k 0 (all),
    top_p 1 (no limit), seed DEFAULT_SEED."""
    sample = _wants_sampling(temperature, top_k, top_p, seed, greedy,
                             do_sample)
    s = _ll.tfm_sampling()
    s.greedy = 0 if sample else 1
    s.temperature = (as_float(temperature, "temperature")
                     if sample and temperature is not None else 1.0)
    s.top_k = as_int(top_k, "top_k") if top_k is not None else 0
    s.top_p = (as_float(top_p, "top_p")
               if sample and top_p is not None else 1.0)
    return s, _seed(DEFAULT_SEED if seed is None else seed)


def _seed(seed):
    return as_seed(seed)


class Sampler:
    """Draws token ids from logits, reproducibly.

    ``Sampler(temperature=None, top_k=None, top_p=None, greedy=None,
    seed=None, do_sample=None)`` follows generate's rule: greedy (argmax,
    ties to the lowest id) unless sampling is asked for with
    ``do_sample=True`` or any of temperature, top_k, top_p, seed.  Sampling
    scales the logits by 1 / temperature (default 1), keeps the top_k most
    likely (default 0: all) and the nucleus of probability top_p (default
    1: all), and draws from a SplitMix64 generator seeded with seed
    (default 42; the same stream as the C library's).  ``temperature=0``
    means greedy.

    ``sampler(logits)``: logits ``[vocab_size]`` -> int id.
    """

    def __init__(self, temperature=None, top_k=None, top_p=None, greedy=None,
                 seed=None, do_sample=None):
        self._sampling, seed = _sampling(temperature, top_k, top_p, seed,
                                         greedy, do_sample)
        self._rng = _ll.tfm_rng()
        _ll.tfm_rng_seed(self._rng, seed)

    def __call__(self, logits):
        x = as_float32(logits, "logits")
        if x.ndim != 1:
            raise ShapeError(f"logits must be [vocab_size], got shape "
                             f"{x.shape}")
        return int(_ll.tfm_sample(x, self._sampling, self._rng))

    def __repr__(self):
        s = self._sampling
        if s.greedy:
            return "Sampler(greedy=True)"
        return (f"Sampler(temperature={s.temperature:g}, top_k={s.top_k}, "
                f"top_p={s.top_p:g})")


# ---- generate's arguments ---------------------------------------------------

class _Unset:
    """generate's default for the arguments an encoder-decoder checkpoint's
    generation_config may set (see generate)."""

    def __repr__(self):
        return "<from generation_config, else the library's default>"


_UNSET = _Unset()

_GENERATE_KEYWORDS = ("temperature", "top_k", "top_p", "seed", "greedy",
                      "do_sample", "min_new_tokens", "eos_token_id",
                      "stop_strings", "repetition_penalty",
                      "no_repeat_ngram_size", "past_context",
                      "past_key_values")
_GENERATE_DEFAULTS = {"min_new_tokens": 0, "repetition_penalty": 1.0,
                      "no_repeat_ngram_size": 0, "past_context": "auto"}
_PAST_CONTEXT = {"auto": 0, "reencode": 1}   # tfm_past_context


def _is_prompt_list(prompt):
    """Whether generate's prompt is a list of prompts (a list or tuple of
    str or id sequences) rather than one prompt of ids."""
    return (isinstance(prompt, (list, tuple)) and len(prompt) > 0
            and any(isinstance(p, (str, list, tuple, np.ndarray))
                    for p in prompt))


def _generate_args(kwargs):
    """generate's keyword arguments after max_new_tokens, in order."""
    unknown = set(kwargs) - set(_GENERATE_KEYWORDS)
    if unknown:
        raise TypeError("unexpected keyword argument(s): "
                        + ", ".join(sorted(unknown)))
    return [kwargs.get(k, _GENERATE_DEFAULTS.get(k))
            for k in _GENERATE_KEYWORDS]


# ---- Model's generation methods ---------------------------------------------

class GenerationMixin:
    """Model's text generation: kv_cache, generate (greedy, sampled,
    batched, beam search), stream and their helpers.  Model inherits it;
    the methods use its config, tokenizer, generation_config and C
    handle (self._use())."""

    # An encoder-decoder checkpoint's generation defaults (from_pretrained
    # of a directory): decoder_start_token_id, eos_token_id,
    # suppress_tokens, which generate uses when not given, and
    # bad_words_ids' single ids, always banned.  Read-only here; a loaded
    # model has its own dict.
    generation_config = types.MappingProxyType({})

    def kv_cache(self, capacity=None, rolling=False):
        """A KVCache for this (decoder-only) model holding up to capacity
        positions (default: the context length); rolling=True: once full,
        each new position drops the oldest (tfm_kv_cache_create_rolling;
        models without learned or sinusoidal positions only)."""
        return KVCache(self, capacity, rolling)

    def _prompt_ids(self, prompt):
        """(ids int32 [n], as_text) of a str or ids prompt."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidArgumentError(
                    "this model has no tokenizer (its file has no "
                    "tfm.tokenizer metadata): pass token ids")
            return np.asarray(self.tokenizer.encode(prompt), np.int32), True
        ids = as_ids(prompt, "prompt")
        if ids.ndim > 1 and ids.size // max(ids.shape[-1], 1) > 1:
            raise ShapeError(
                f"prompt must be one sequence of ids ([n] or [1, n]), got "
                f"shape {list(ids.shape)}; generate takes a list of prompts")
        return ids.reshape(-1), False

    def _generate_options(self, max_new_tokens, temperature, top_k, top_p,
                          seed, greedy, do_sample, min_new_tokens,
                          eos_token_id, stop_strings, repetition_penalty,
                          no_repeat_ngram_size, past_context="auto"):
        """(options, eos int32 array, stop strings, tokenizer or None) for
        the keyword arguments of generate."""
        o = _ll.tfm_generate_options()
        if past_context not in _PAST_CONTEXT:
            raise InvalidArgumentError(
                f"past_context {past_context!r} is not one of "
                + ", ".join(repr(k) for k in _PAST_CONTEXT))
        o.past_context = _PAST_CONTEXT[past_context]
        o.max_new_tokens = as_int(max_new_tokens, "max_new_tokens", 0)
        o.min_new_tokens = as_int(min_new_tokens, "min_new_tokens", 0)
        o.sampling, o.seed = _sampling(temperature, top_k, top_p, seed,
                                       greedy, do_sample)
        o.repetition_penalty = as_float(repetition_penalty,
                                        "repetition_penalty")
        o.no_repeat_ngram_size = as_int(no_repeat_ngram_size,
                                        "no_repeat_ngram_size", 0)
        if eos_token_id is None:
            eos = []
        elif isinstance(eos_token_id, (int, np.integer)):
            eos = [eos_token_id]
        else:
            eos = list(eos_token_id)
        eos = np.asarray([as_int(e, "eos_token_id") for e in eos], np.int64)
        if eos.size and (eos.min() < -2**31 or eos.max() >= 2**31):
            raise InvalidArgumentError(
                f"eos_token_id {eos.tolist()} is outside the vocabulary "
                f"(0 .. {self.config['vocab_size'] - 1})")
        if stop_strings is None:
            stops = []
        elif isinstance(stop_strings, str):
            stops = [stop_strings]
        else:
            stops = list(stop_strings)
        if stops and self.tokenizer is None:
            raise InvalidArgumentError(
                "stop_strings need the model's tokenizer, and this model "
                "has none")
        tokenizer = self.tokenizer if stops else None
        return o, eos.astype(np.int32), stops, tokenizer

    def _generator(self, ids, *args, past_key_values=None):
        """A _Generator (tfm_generator_create) for the keyword arguments
        of generate (_generate_options' order), in the KVCache
        past_key_values when given (prefix reuse)."""
        cache = past_key_values
        if cache is not None:
            if not isinstance(cache, KVCache) or cache._model is not self:
                raise InvalidArgumentError(
                    "past_key_values must be a KVCache of this model "
                    "(model.kv_cache())")
        with contextlib.ExitStack() as uses:
            if cache is not None:
                # Taken until the _Generator holds it (BusyError for any
                # other use meanwhile, from any thread).
                uses.enter_context(cache._claim())
            o, eos, stops, tokenizer = self._generate_options(*args)
            ptr = uses.enter_context(self._use())
            tok = uses.enter_context(tokenizer._use()) if tokenizer else None
            if cache is not None:
                o.cache = uses.enter_context(cache._use())
            g = _ll.tfmpy_generator_create(ptr, ids, o, eos, stops, tok)
            return _Generator(g, self, tokenizer, cache)

    def _generate_batch(self, prompts, *args):
        """generate on a list of prompts (tfm_model_generate_batch): a
        list of results, each what generate gives for that prompt alone."""
        for i, p in enumerate(prompts):
            if not isinstance(p, (str, list, tuple, np.ndarray)):
                raise TypeError(f"prompts[{i}] must be a str or a sequence "
                                f"of token ids, not {type(p).__name__}")
        pairs = [self._prompt_ids(p) for p in prompts]
        o, eos, stops, tokenizer = self._generate_options(*args)
        flat = np.concatenate([ids for ids, _ in pairs]).astype(np.int32)
        lengths = [int(ids.size) for ids, _ in pairs]
        with contextlib.ExitStack() as uses:
            ptr = uses.enter_context(self._use())
            tok = uses.enter_context(tokenizer._use()) if tokenizer else None
            out, n_out = _ll.tfmpy_model_generate_batch(
                ptr, flat, lengths, o, eos, stops, tok)
        results = []
        for (_, as_text), row, n in zip(pairs, out, n_out):
            new = row[:n].tolist()
            results.append(self.tokenizer.decode(new) if as_text else new)
        return results

    def generate(self, prompt, max_new_tokens=_UNSET, temperature=None,
                 top_k=None, top_p=None, seed=None, greedy=None,
                 do_sample=None, min_new_tokens=_UNSET, eos_token_id=None,
                 stop_strings=None, repetition_penalty=1.0,
                 no_repeat_ngram_size=0, num_beams=_UNSET,
                 length_penalty=_UNSET, early_stopping=_UNSET,
                 num_return_sequences=1, return_scores=False,
                 decoder_start_token_id=None, past_context="auto",
                 past_key_values=None, suppress_tokens=None,
                 forced_eos_token_id=None, renormalize_logits=_UNSET):
        """Generates up to max_new_tokens tokens after prompt (decoder-only
        models), with a KV cache; past the context length as past_context
        says.  The arguments are Hugging Face generate()'s.

        With num_beams > 1 (or num_return_sequences > 1, return_scores, or
        an encoder-decoder model) it is Hugging Face's beam search
        (tfm_model_beam_search): see the beam arguments below.

        Decoding is greedy (argmax, ties to the lowest id) unless sampling
        is asked for: ``do_sample=True``, or any of temperature, top_k,
        top_p, seed given -- the rule of transformer-generate, whose
        --temperature, --top-k, --top-p and --seed likewise sample.  The
        same call gives the same text every time.

        Args:
            prompt: a str (encoded with the model's tokenizer) or token ids,
                at least one; longer than the context, its last
                context_length tokens (the earlier ones are not seen, by
                the model nor the processors), as tfm_model_generate and
                transformer-generate take one.  An encoder-decoder
                model's source must fit (CapacityError beyond).
            max_new_tokens: the most tokens to generate.
            temperature: logits / temperature before sampling (default 1);
                0 means greedy.
            top_k: sample among the k most likely (default 0: all).
            top_p: nucleus sampling (default 1: no limit).
            seed: the generator's seed (default 42); the same seed gives
                the same text.
            greedy: True for argmax decoding whatever else is given; False
                is do_sample=True.
            do_sample: True to sample (with the defaults above for what is
                not given), False for greedy decoding whatever else is
                given; None (default): sample exactly when temperature,
                top_k, top_p or seed is given.
            min_new_tokens: EOS ids are masked until this many tokens are
                generated (HF's MinNewTokensLengthLogitsProcessor).
            eos_token_id: an id or a list of ids that end the generation
                (the EOS token is returned).
            stop_strings: a str or a list of str; generation ends once the
                generated text contains one (it may span tokens; the text
                up to and including the token completing it is returned).
            repetition_penalty: CTRL's penalty (1: none): the logit x of
                every token already in prompt or output becomes x / r if
                x > 0, else x * r.
            no_repeat_ngram_size: no n-gram of this size occurs twice
                (0: no limit).
            num_beams: beams of the beam search (1 .. vocab_size; 1 is
                greedy decoding).  The beam search takes one eos_token_id,
                min_new_tokens, and none of the sampling arguments,
                stop_strings, repetition_penalty, no_repeat_ngram_size;
                past the context a decoder-only model's beams go on as
                past_context="auto" (an encoder-decoder model's
                max_new_tokens must fit in its context).
            length_penalty: a finished sequence scores its summed
                log-probability / (its new tokens, EOS included) **
                length_penalty (the prompt is not counted); > 0 favours
                longer sequences, < 0 shorter ones.
            early_stopping: True: stop once num_beams sequences are
                finished; False (default): also once no running beam can
                score better, judged at the current length (HF's
                heuristic); "never": only when no running beam can,
                judged at max_new_tokens.
            num_return_sequences: how many of the best sequences to return
                (1 .. num_beams), best first.
            return_scores: also return each sequence's score (above).
            decoder_start_token_id: encoder-decoder models: the target's
                first token (required; the prompt is the source).  For a
                checkpoint directory's model, None takes its
                generation_config.json's (else config.json's), as
                eos_token_id and suppress_tokens do.
            suppress_tokens: beam search (and encoder-decoder models):
                ids never generated (Hugging Face's suppress_tokens; a
                checkpoint's bad_words_ids of single ids, as Marian's
                [[pad_token_id]], are banned besides).
            forced_eos_token_id: beam search: the id the max_new_tokens-th
                token is forced to be (Hugging Face's; Marian's configs
                say 0).
            renormalize_logits: beam search: log-softmax each step's
                log-probabilities again after the bans above (Hugging
                Face's LogitNormalization).

        Encoder-decoder checkpoint directories (from_pretrained) take what
        is not given from their generation_config.json (else config.json),
        as transformers' generate does: num_beams, max_new_tokens (else
        max_length - 1, the decoder start counted, at most the context
        length), min_new_tokens (else min_length - 1), length_penalty,
        early_stopping, renormalize_logits, decoder_start_token_id (else
        bos_token_id), eos_token_id, forced_eos_token_id, suppress_tokens
        and bad_words_ids of single ids.  Otherwise the defaults are
        max_new_tokens 100, num_beams 1, min_new_tokens 0,
        length_penalty 1.0, early_stopping False, renormalize_logits
        False.
            past_context: past the context length W, "auto" (default): a
                rolling cache for models without absolute positions (RoPE,
                ALiBi, ...: each query sees the last W keys, Mistral's
                sliding window), else the half-window shift (when the cache
                is full, the last ceil(W/2) tokens are encoded afresh, then
                appended to); "reencode": every token encodes the last W
                tokens afresh (the most context, a full pass per token).
                Not taken by the beam search, which always uses "auto".
            past_key_values: a KVCache of this model (model.kv_cache(),
                of the context length; rolling=True, needed exactly when
                "auto" rolls: a model without learned or sinusoidal
                positions) to generate in, for prefix reuse across calls (llama.cpp's
                prompt cache): of the positions it holds, the longest
                common prefix with the prompt (never its last token) is
                kept and only the rest of the prompt is computed; the new
                tokens are appended, so afterwards it holds the prompt and
                the new tokens but the last.  A chat whose next prompt is
                the conversation so far computes only its new turn.  The
                tokens are those of a call without it.  Not taken by the
                beam search; one generation at a time per cache
                (BusyError).

        A list (or tuple) of prompts -- each a str or a list of ids -- is
        generated as a batch (tfm_model_generate_batch): the result is a
        list, item i what generate(prompts[i], ...) returns (same tokens,
        same seed per sequence), each sequence stopping on its own; every
        step runs the new tokens of all sequences through the weights
        together (one matrix product per projection), which is faster than
        one by one.  Not with the beam search's arguments.

        Returns:
            the generated text (str) for a str prompt, else the list of the
            new ids (the prompt is not repeated).  Beam search: the same for
            the best sequence, a list of them (best first) when
            num_return_sequences > 1, and with return_scores a pair
            (that, score or list of scores)."""
        (max_new_tokens, num_beams, min_new_tokens, length_penalty,
         early_stopping, renormalize_logits) = self._generation_defaults(
            max_new_tokens, num_beams, min_new_tokens, length_penalty,
            early_stopping, renormalize_logits)
        if _is_prompt_list(prompt):
            if (num_beams != 1 or num_return_sequences != 1 or return_scores
                    or self.config["architecture"] == "encoder_decoder"):
                raise InvalidArgumentError(
                    "a list of prompts is generated without beam search "
                    "(num_beams, num_return_sequences and return_scores "
                    "take one prompt) and by decoder-only models")
            if past_key_values is not None or suppress_tokens is not None:
                raise InvalidArgumentError(
                    "a list of prompts does not take "
                    + ("past_key_values (one cache serves one sequence)"
                       if past_key_values is not None else
                       "suppress_tokens (the beam search's)"))
            return self._generate_batch(
                prompt, max_new_tokens, temperature, top_k, top_p, seed,
                greedy, do_sample, min_new_tokens, eos_token_id,
                stop_strings, repetition_penalty, no_repeat_ngram_size,
                past_context)
        if (num_beams != 1 or num_return_sequences != 1 or return_scores
                or self.config["architecture"] == "encoder_decoder"):
            if past_key_values is not None:
                raise InvalidArgumentError(
                    "beam search does not take past_key_values")
            return self._beam_search(
                prompt, max_new_tokens, num_beams, length_penalty,
                early_stopping, num_return_sequences, return_scores,
                decoder_start_token_id, min_new_tokens, eos_token_id,
                suppress_tokens, forced_eos_token_id, renormalize_logits,
                dict(temperature=temperature, top_k=top_k, top_p=top_p,
                     seed=seed, do_sample=do_sample, stop_strings=stop_strings,
                     repetition_penalty=repetition_penalty,
                     no_repeat_ngram_size=no_repeat_ngram_size), greedy)
        if (suppress_tokens is not None or forced_eos_token_id is not None
                or renormalize_logits):
            raise InvalidArgumentError(
                "suppress_tokens, forced_eos_token_id and renormalize_logits "
                "are taken by the beam search (num_beams, encoder-decoder "
                "models), not by sampling or the KV-cache generator")
        ids, as_text = self._prompt_ids(prompt)
        g = self._generator(ids, max_new_tokens, temperature, top_k, top_p,
                            seed, greedy, do_sample, min_new_tokens,
                            eos_token_id, stop_strings, repetition_penalty,
                            no_repeat_ngram_size, past_context,
                            past_key_values=past_key_values)
        with g:
            new = list(g)
        return self.tokenizer.decode(new) if as_text else new

    _EARLY_STOPPING = {False: 0, True: 1, "never": 2}

    def _generation_defaults(self, max_new_tokens, num_beams, min_new_tokens,
                             length_penalty, early_stopping,
                             renormalize_logits):
        """generate's arguments left unset, from an encoder-decoder
        checkpoint's generation defaults (transformers' GenerationConfig
        rules, see generate) or the library's."""
        cfg = (self.generation_config
               if self.config["architecture"] == "encoder_decoder" else {})
        if max_new_tokens is _UNSET:
            if "max_new_tokens" in cfg:
                max_new_tokens = cfg["max_new_tokens"]
            elif "max_length" in cfg:   # counts the decoder start token
                max_new_tokens = min(cfg["max_length"] - 1,
                                     self.config["context_length"])
            else:
                max_new_tokens = 100
        if min_new_tokens is _UNSET:
            min_new_tokens = cfg.get("min_new_tokens",
                                     max(cfg.get("min_length", 0) - 1, 0))
        pick = [(num_beams, "num_beams", 1),
                (length_penalty, "length_penalty", 1.0),
                (early_stopping, "early_stopping", False),
                (renormalize_logits, "renormalize_logits", False)]
        num_beams, length_penalty, early_stopping, renormalize_logits = [
            cfg.get(key, fallback) if value is _UNSET else value
            for value, key, fallback in pick]
        return (max_new_tokens, num_beams, min_new_tokens, length_penalty,
                early_stopping, renormalize_logits)

    def _beam_search(self, prompt, max_new_tokens, num_beams, length_penalty,
                     early_stopping, num_return_sequences, return_scores,
                     decoder_start_token_id, min_new_tokens, eos_token_id,
                     suppress_tokens, forced_eos_token_id, renormalize_logits,
                     others, greedy):
        """generate's beam search (tfm_model_beam_search)."""
        defaults = (self.generation_config
                    if self.config["architecture"] == "encoder_decoder"
                    else {})
        if decoder_start_token_id is None:
            decoder_start_token_id = defaults.get(
                "decoder_start_token_id", defaults.get("bos_token_id"))
        if eos_token_id is None:
            eos_token_id = defaults.get("eos_token_id")
        if forced_eos_token_id is None:
            forced_eos_token_id = defaults.get("forced_eos_token_id")
        if suppress_tokens is None:
            suppress_tokens = defaults.get("suppress_tokens", ())
        # bad_words_ids stay banned whatever suppress_tokens says (two
        # settings in transformers too)
        suppress = as_ids(sorted(set(list(suppress_tokens))
                                 | set(defaults.get("bad_words_ids", ()))),
                          "suppress_tokens", 1)
        unsupported = [k for k, v in others.items()
                       if v is not None and v != _GENERATE_DEFAULTS.get(k)
                       and not (k == "do_sample" and v is False)]
        if unsupported or greedy is False:
            raise InvalidArgumentError(
                "beam search does not take "
                + ", ".join(unsupported or ["greedy=False"])
                + " (it is deterministic, with min_new_tokens and one "
                "eos_token_id as its only processors)")
        o = _ll.tfm_beam_search_options()
        o.num_beams = as_int(num_beams, "num_beams")
        o.max_new_tokens = as_int(max_new_tokens, "max_new_tokens")
        o.min_new_tokens = as_int(min_new_tokens, "min_new_tokens", 0)
        o.length_penalty = as_float(length_penalty, "length_penalty")
        o.num_return_sequences = as_int(num_return_sequences,
                                        "num_return_sequences")
        key = early_stopping if isinstance(early_stopping, (bool, str)) \
            else None
        if key not in self._EARLY_STOPPING:
            raise InvalidArgumentError(
                f"early_stopping must be True, False or \"never\", not "
                f"{early_stopping!r}")
        o.early_stopping = self._EARLY_STOPPING[key]
        o.renormalize_logits = 1 if renormalize_logits else 0
        if eos_token_id is not None and not isinstance(
                eos_token_id, (int, np.integer)):
            eos = list(eos_token_id)
            if len(eos) > 1:
                raise InvalidArgumentError(
                    "beam search takes one eos_token_id, not "
                    f"{len(eos)}: {eos}")
            eos_token_id = eos[0] if eos else None
        vocab = self.config["vocab_size"]
        for name, value in (("eos_token_id", eos_token_id),
                            ("decoder_start_token_id",
                             decoder_start_token_id),
                            ("forced_eos_token_id", forced_eos_token_id)):
            if value is None:
                continue
            value = as_int(value, name)
            if not 0 <= value < vocab:
                raise InvalidArgumentError(
                    f"{name} {value} is outside the vocabulary (0 .. "
                    f"{vocab - 1})")
            setattr(o, name, value)
        ids, as_text = self._prompt_ids(prompt)
        with self._use() as ptr:
            out, lengths, scores = _ll.tfmpy_model_beam_search(ptr, ids, o,
                                                               suppress)
        seqs = [out[r, :lengths[r]].tolist() for r in range(len(lengths))]
        if as_text:
            seqs = [self.tokenizer.decode(s) for s in seqs]
        result = seqs[0] if len(seqs) == 1 else seqs
        if not return_scores:
            return result
        scores = [float(x) for x in scores]
        return result, (scores[0] if len(scores) == 1 else scores)

    def stream(self, prompt, max_new_tokens=100, **kwargs):
        """Iterates over what generate(prompt, ...) returns, as it is
        generated: text pieces (str) for a str prompt -- each the new text
        once it is whole characters, so "".join(...) equals generate's
        text -- else the new ids (int), one per token.  The arguments are
        generate's.  Leaving the loop early (break) ends the generation
        and frees it."""
        if _is_prompt_list(prompt):
            raise TypeError("stream takes one prompt (a str or a sequence "
                            "of ids), not a list of prompts: generate "
                            "takes a list")
        ids, as_text = self._prompt_ids(prompt)
        args = _generate_args(kwargs)
        g = self._generator(ids, max_new_tokens, *args[:-1],
                            past_key_values=args[-1])
        with g:
            if not as_text:
                yield from g
                return
            new, emitted = [], 0
            for token in g:
                new.append(token)
                text = self.tokenizer.decode(new)
                if text.endswith("\ufffd"):   # a character cut in the middle
                    continue
                if len(text) > emitted:
                    yield text[emitted:]
                    emitted = len(text)
            text = self.tokenizer.decode(new)
            if len(text) > emitted:
                yield text[emitted:]


# ---- The generator (tfm_generator) ------------------------------------------

class _Generator(HandleOwner):
    """A tfm_generator: iterating yields the new ids until a stop
    condition; ``stop_reason`` says which ("max_new_tokens", "eos",
    "stop_string", or None while it runs)."""

    _REASONS = {0: None, 1: "max_new_tokens", 2: "eos", 3: "stop_string",
                4: "callback"}

    def __init__(self, ptr, model, tokenizer, cache=None):
        self._handle = _Handle(ptr, _ll.tfm_generator_free, "generator",
                               owner=model._handle)
        self._model = model            # all must outlive the generator
        self._tokenizer = tokenizer
        self._cache = cache            # past_key_values: in use until closed
        if cache is not None:
            cache._generator = weakref.ref(self)

    def __iter__(self):
        while True:
            # Each step uses the model (and the tokenizer of stop strings)
            # through C: they are in use for the step, so closing them from
            # another thread waits for it, and a step after raises
            # ClosedError.
            with contextlib.ExitStack() as uses:
                ptr = uses.enter_context(self._use())
                uses.enter_context(self._model._use())
                if self._tokenizer is not None:
                    uses.enter_context(self._tokenizer._use())
                if self._cache is not None:
                    uses.enter_context(self._cache._use())
                token, produced = _ll.tfm_generator_next(ptr)
            if not produced:
                return
            yield int(token)

    @property
    def stop_reason(self):
        return self._REASONS.get(
            int(self._call(_ll.tfm_generator_stop_reason)))

    @property
    def reused_tokens(self):
        """Prompt positions taken from past_key_values
        (tfm_generator_reused_tokens)."""
        return int(self._call(_ll.tfm_generator_reused_tokens))


# ---- KV cache ---------------------------------------------------------------

class KVCache(HandleOwner):
    """The keys and values of the positions decoded so far (batch 1), so
    that each new token costs one position's work.  Made by
    ``model.kv_cache(capacity)``; closed with the model.

    decode(ids) appends ids and returns their logits ``[n, vocab_size]``
    (``[vocab_size]`` for the last one only with last_only=True), equal to
    the rows of model.logits on the whole sequence.  reset() empties it;
    len(cache) is the number of positions held; capacity is the most it
    holds (CapacityError beyond, the cache unchanged).
    """

    _generator = None   # weakref to the generation using it (generate's
                        # past_key_values)
    _busy = False       # taken by _claim (a call or a generator's creation)
    _claims = threading.Lock()

    def __init__(self, model, capacity=None, rolling=False):
        if not isinstance(model, GenerationMixin):   # i.e. a Model
            raise TypeError("KVCache needs a Model")
        with model._use() as mptr:
            cfg = model.config
            if capacity is None:
                capacity = cfg["context_length"]
            self._vocab = cfg["vocab_size"]
            self._model = model
            create = (_ll.tfm_kv_cache_create_rolling if rolling
                      else _ll.tfm_kv_cache_create)
            self._handle = _Handle(
                create(mptr, as_int(capacity, "capacity")),
                _ll.tfm_kv_cache_free, "kv_cache", owner=model._handle)
            model._cache_set.add(self)

    def _check_free(self):
        """BusyError while a generation (past_key_values) uses it."""
        g = self._generator() if self._generator is not None else None
        if self._busy or (g is not None and not g.closed):
            raise BusyError("this KVCache is in use by a generation in "
                            "progress (past_key_values) or a call from "
                            "another thread; finish or close it first")

    @contextlib.contextmanager
    def _claim(self):
        """The cache for this thread alone for the block (BusyError if a
        generation or another call has it), so that the check and the use
        cannot interleave with another thread's."""
        with KVCache._claims:
            self._check_free()
            self._busy = True
        try:
            yield
        finally:
            self._busy = False

    @torch_results
    def decode(self, ids, last_only=False):
        """Appends token ids (an int or a 1-D sequence) and returns logits
        ``[n, vocab_size]``, or ``[vocab_size]`` of the last position with
        last_only=True."""
        with self._claim(), self._use() as ptr:
            ids = as_ids(ids, "ids").reshape(-1)
            n = 1 if last_only else max(ids.size, 1)
            logits = np.empty((n, self._vocab), np.float32)
            _ll.tfm_kv_cache_decode(ptr, ids, logits)
            return logits[0] if last_only else logits

    def reset(self):
        """Empties the cache for a new sequence."""
        with self._claim():
            self._call(_ll.tfm_kv_cache_reset)

    def __len__(self):
        return int(self._call(_ll.tfm_kv_cache_length))

    @property
    def capacity(self):
        """The most positions the cache holds."""
        return int(self._call(_ll.tfm_kv_cache_capacity))

    def __reduce__(self):
        raise TypeError("a KVCache cannot be pickled or copied; make a new "
                        "one with model.kv_cache()")

    def __repr__(self):
        if self.closed:
            return "KVCache(<closed>)"
        return f"KVCache(length={len(self)}, capacity={self.capacity})"
