"""Batch generation over a Dask cluster (Debian's python3-distributed).

``generate(client, model, prompts, **generate_kwargs)`` runs
``model.generate(prompt, **generate_kwargs)`` for every prompt on the
workers of a ``distributed.Client`` and returns the results in the order
of the prompts, the same list a loop over ``model.generate`` gives::

    from distributed import Client, LocalCluster
    import transformer, transformer.dask

    model = transformer.load_model()             # or any decoder-only Model
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, \\
            Client(cluster) as client:
        texts = transformer.dask.generate(
            client, model, ["And God said", "In the beginning"],
            max_new_tokens=100, temperature=0.8, top_p=0.9, seed=1)

The same code runs on several machines: ``dask scheduler`` on one,
``dask worker tcp://HOST:8786`` on each of the others (each with
libtransformer's Python package installed), and
``Client("tcp://HOST:8786")`` in the script (README.md, "Generating on a
Dask cluster").

How the model travels: the client writes it as a model file (the
library's safetensors file: the parameters, the configuration and a
character-level tokenizer in its metadata, what ``Model.save`` writes) into
memory, and scatters those bytes to every worker once (``broadcast=True``);
the prompts go in chunks, one task per chunk.  A worker loads the bytes the
first time a task needs them and keeps the loaded model, keyed by the
SHA-256 of the bytes, for later tasks and later calls (the last few models
are kept).  So it is the client's weights that run, not a file the workers
might have.  ``ship(client, model)`` scatters the model once for many calls
(``generate(client, shipped, ...)`` or ``shipped.generate(...)``).  A
tokenizer that is not character-level (a GPT-2 tokenizer loaded from a
directory) is not in a model file: it travels as its pickle, which loads it
again from the same path, so that path must exist on the workers too.

Each result is what ``model.generate`` returns: a str for a str prompt,
the list of new ids for an ids prompt (beam search: its own return value).
Generation is deterministic, so a worker gives the local result; the
library's threads change only rounding, as between machines with other CPUs
(a greedy tie may then break the other way).

Errors: TypeError for a client that is not a ``distributed.Client``, a
model that is not a ``transformer.Model``, prompts that are one str
rather than a list of them, or keywords that ``Model.generate`` does not
take; ValueError for an empty list of prompts.  An error on a worker
(an id outside the vocabulary, say) is raised again in the caller with
its type and message (Dask's own re-raise), with a note naming the prompt.
"""

import collections
import hashlib
import inspect
import math
import os
import pickle
import tempfile
import threading

from . import _lowlevel as _ll
from ._files import open_regular
from .models import Model

__all__ = ["generate", "ship", "ShippedModel", "model_bytes"]


def _distributed():
    import distributed   # imported only when used
    return distributed


def _check_client(client):
    if not isinstance(client, _distributed().Client):
        raise TypeError("client must be a distributed.Client, not "
                        f"{type(client).__name__}")


def _travels_in_file(tokenizer):
    """A model file holds a character-level tokenizer (or none)."""
    return tokenizer is None or tokenizer.kind == "char"


def model_bytes(model):
    """The model file of ``model`` (what ``model.save`` writes: a
    safetensors file with the configuration, and a character-level
    tokenizer, in its metadata) as bytes.  ``Model.load`` of those bytes
    written to a file gives the same model.  Another kind of tokenizer is
    left out (it has no place in a model file)."""
    if not isinstance(model, Model):
        raise TypeError("model must be a transformer.Model, not "
                        f"{type(model).__name__}")
    fd, path = tempfile.mkstemp(prefix="transformer-", suffix=".safetensors")
    os.close(fd)
    try:
        if _travels_in_file(model.tokenizer):
            model.save(path)
        else:
            with model._use() as ptr:
                _ll.tfmpy_model_save(ptr, path, {})
        # mkstemp made it (O_EXCL, mode 0600) and save wrote it; read
        # through the package's one door all the same (no cap: a model
        # file is not read whole anywhere else either).
        with open_regular(path) as f:
            return f.read()
    finally:
        os.unlink(path)


# ---- the worker's side -----------------------------------------------------

# SHA-256 hex digest -> loaded Model, most recently used last.
_CACHE_SIZE = 4
_cache = collections.OrderedDict()
_cache_lock = threading.Lock()
_loads = 0            # models loaded by this process (the tests read it)


def _load(data, tokenizer_blob):
    """A Model from model-file bytes (through a temporary file: the library
    loads models from paths) and the pickled tokenizer, if any."""
    fd, path = tempfile.mkstemp(prefix="transformer-", suffix=".safetensors")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        model = Model.load(path)
    finally:
        os.unlink(path)
    model.path = None
    if tokenizer_blob is not None:
        model.tokenizer = pickle.loads(tokenizer_blob)
    elif model.tokenizer is not None:
        model.tokenizer._path = None   # pickles by its vocabulary, not path
    return model


class _Payload:
    """What is scattered: the key (SHA-256 hex digest), the model file's
    bytes and the pickled tokenizer (None when it is in the file).  Its
    repr stays short in Dask's logs of a failed task."""

    __slots__ = ("key", "data", "tokenizer_blob")

    def __init__(self, key, data, tokenizer_blob):
        self.key, self.data = key, data
        self.tokenizer_blob = tokenizer_blob

    def __getstate__(self):
        return self.key, self.data, self.tokenizer_blob

    def __setstate__(self, state):
        self.key, self.data, self.tokenizer_blob = state

    def __repr__(self):
        return f"<model {self.key[:12]}, {len(self.data)} bytes>"


def _worker_model(payload):
    """This process's model for a _Payload, loaded once per key."""
    global _loads
    key, data, tokenizer_blob = payload.key, payload.data, payload.tokenizer_blob
    with _cache_lock:
        model = _cache.get(key)
        if model is not None:
            _cache.move_to_end(key)
            return model
        model = _load(data, tokenizer_blob)
        _loads += 1
        _cache[key] = model
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
        return model


def _cached_keys():
    """(keys of the models this process holds, models it has loaded)."""
    with _cache_lock:
        return list(_cache), _loads


def _generate_chunk(payload, start, prompts, kwargs):
    """One task: model.generate of each prompt of a chunk."""
    model = _worker_model(payload)
    out = []
    for i, prompt in enumerate(prompts):
        try:
            out.append(model.generate(prompt, **kwargs))
        except Exception as e:
            e.add_note(f"transformer.dask.generate: prompt {start + i} "
                       f"(on a worker)")
            raise
    return out


# ---- the client's side -----------------------------------------------------

class ShippedModel:
    """A model scattered to every worker of a client (``ship``): the model
    file bytes held by the cluster, loaded by each worker on first use.
    ``generate(prompts, **kwargs)`` is ``transformer.dask.generate`` with
    it; ``release()`` (or leaving a ``with`` block) lets the cluster drop
    the bytes (workers keep a loaded copy in their cache of recent
    models)."""

    def __init__(self, client, model):
        _check_client(client)
        data = model_bytes(model)
        tokenizer = model.tokenizer
        blob = None if _travels_in_file(tokenizer) else pickle.dumps(tokenizer)
        digest = hashlib.sha256(data)
        if blob is not None:
            digest.update(blob)
        self.client = client
        self.key = digest.hexdigest()
        self.nbytes = len(data)
        self.config = model.config
        self.has_tokenizer = tokenizer is not None
        [self._future] = client.scatter([_Payload(self.key, data, blob)],
                                        broadcast=True, hash=False)

    def generate(self, prompts, chunk_size=None, **generate_kwargs):
        """``transformer.dask.generate(self.client, self, prompts, ...)``."""
        return generate(self.client, self, prompts, chunk_size,
                        **generate_kwargs)

    def release(self):
        """Releases the scattered bytes; the object cannot generate after."""
        if self._future is not None:
            self._future.release()
            self._future = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        state = "released" if self._future is None else f"{self.nbytes} bytes"
        return f"ShippedModel({self.key[:12]}, {state})"


def ship(client, model):
    """Scatters ``model`` (a transformer.Model) to every worker of
    ``client`` once, for several ``generate`` calls: a ShippedModel."""
    return ShippedModel(client, model)


def _worker_threads(client):
    workers = client.scheduler_info().get("workers", {})
    return max(1, sum(w.get("nthreads", 1) for w in workers.values()))


def generate(client, model, prompts, chunk_size=None, **generate_kwargs):
    """``[model.generate(p, **generate_kwargs) for p in prompts]``, computed
    on the workers of ``client`` (a distributed.Client).

    Args:
        client: the distributed.Client of the cluster.
        model: a transformer.Model (scattered for this call, then
            released) or a ShippedModel from ``ship`` (scattered already).
        prompts: a list (any iterable but a str) of prompts, each a str
            (the model's tokenizer encodes it on the worker) or token ids.
        chunk_size: prompts per task (default: about four tasks per worker
            thread, so that long and short prompts even out).
        generate_kwargs: Model.generate's keywords (max_new_tokens,
            temperature, top_p, seed, num_beams, ...), the same for every
            prompt; a seed gives every prompt the same sampler seed, as
            the same calls to model.generate do.

    Returns:
        the list of results, in the order of the prompts.

    Raises TypeError (client, model, prompts, keywords), ValueError (no
    prompts, chunk_size < 1), InvalidArgumentError (str prompts for a model
    without a tokenizer), and a worker's error as it was raised there."""
    _check_client(client)
    if isinstance(prompts, (str, bytes)):
        raise TypeError("prompts must be a list of prompts, not one "
                        f"{type(prompts).__name__} (use model.generate)")
    try:
        prompts = list(prompts)
    except TypeError:
        raise TypeError("prompts must be a list of prompts, not "
                        f"{type(prompts).__name__}") from None
    if not prompts:
        raise ValueError("prompts is empty: nothing to generate")
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
            raise TypeError("chunk_size must be an int")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, not {chunk_size}")
    try:
        inspect.signature(Model.generate).bind(None, None, **generate_kwargs)
    except TypeError as e:
        raise TypeError(f"Model.generate does not take these keywords: {e}") \
            from None

    owned = None
    if isinstance(model, ShippedModel):
        shipped = model
        if shipped._future is None:
            raise ValueError("this ShippedModel was released")
        if shipped.client is not client:
            raise ValueError("this ShippedModel belongs to another client")
    elif isinstance(model, Model):
        shipped = owned = ShippedModel(client, model)
    else:
        raise TypeError("model must be a transformer.Model or a "
                        f"ShippedModel, not {type(model).__name__}")
    if not shipped.has_tokenizer and any(isinstance(p, str) for p in prompts):
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(
            "this model has no tokenizer: pass token ids, not str prompts")

    try:
        if chunk_size is None:
            chunk_size = math.ceil(len(prompts) / (4 * _worker_threads(client)))
        futures = [
            client.submit(_generate_chunk, shipped._future, start,
                          prompts[start:start + chunk_size], generate_kwargs,
                          pure=False)
            for start in range(0, len(prompts), chunk_size)]
        try:
            chunks = client.gather(futures)
        finally:
            for f in futures:
                f.release()
    finally:
        if owned is not None:
            owned.release()
    return [result for chunk in chunks for result in chunk]
