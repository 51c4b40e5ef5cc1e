"""Handles, argument conversion and the Module base class."""

import collections
import collections.abc
import operator
import os
import threading

import numpy as np

from . import _lowlevel as _ll
from ._errors import (ClosedError, InvalidArgumentError, NonFiniteError,
                      NotFoundError, ShapeError, StateDictError,
                      StateDictShapeError, TransformerOverflowError,
                      UnsupportedError)
from ._tree import _VIEW, ModuleTree
from ._weights import StoredWeights
from ._tree import using as _tree_using
from . import _torch

_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1

# ---- Handles ---------------------------------------------------------------

_live_lock = threading.RLock()   # re-entrant: __del__ may run inside
_live = collections.Counter()   # kind -> number of open handles


def live_handles(kind=None):
    """Number of C handles currently open (all kinds, or one kind such as
    "module"); for tests and leak hunting."""
    with _live_lock:
        if kind is None:
            return sum(_live.values())
        return _live[kind]


class _Handle:
    """Owns one C handle and frees it exactly once: on close(), or when the
    garbage collector drops the last reference.  Closing twice is a no-op.

    Every use of the pointer goes through ``with handle.use(what) as ptr``:
    it raises ClosedError once the handle is closed, and otherwise counts
    the call as in progress until the block ends.  close() from another
    thread waits for the calls in progress (it releases the GIL while it
    waits), so a call either completes or raises ClosedError, and never
    runs on freed memory.  A close() from inside one of the calling
    thread's own uses does not wait for itself: the last use to end frees
    the handle."""

    __slots__ = ("_ptr", "_free", "_kind", "_owner", "_cv", "_users",
                 "_pending", "__weakref__")

    def __init__(self, ptr, free, kind, owner=None):
        self._ptr = ptr
        self._free = free
        self._kind = kind
        self._owner = owner       # a handle that must outlive this one
        self._cv = threading.Condition(threading.Lock())
        self._users = {}          # thread ident -> nesting depth of uses
        self._pending = None      # closed while in use: freed by the last
        with _live_lock:
            _live[kind] += 1

    def use(self, what):
        """A context manager giving the pointer for the span of a call."""
        return _Use(self, what)

    def get(self, what):
        """The raw pointer (no in-use count: single-threaded callers and
        tests only; the package itself uses use())."""
        ptr = self._ptr
        if ptr is None:
            raise ClosedError(f"{what} is closed")
        return ptr

    @property
    def closed(self):
        return self._ptr is None

    def close(self):
        me = threading.get_ident()
        with self._cv:
            ptr, self._ptr = self._ptr, None
            if ptr is None:
                return
            if me in self._users:
                self._pending = ptr
                return
            while self._users:
                self._cv.wait()
        self._release(ptr)

    def _release(self, ptr):
        with _live_lock:
            _live[self._kind] -= 1
        self._free(ptr)
        self._owner = None

    def __del__(self):
        try:
            self.close()
        except Exception:   # interpreter shutdown: nothing left to do
            pass


class _Use:
    """One call in progress on a _Handle (see _Handle.use)."""

    __slots__ = ("_h", "_what")

    def __init__(self, handle, what):
        self._h = handle
        self._what = what

    def __enter__(self):
        h = self._h
        me = threading.get_ident()
        with h._cv:
            ptr = h._ptr
            if ptr is None:
                raise ClosedError(f"{self._what} is closed")
            h._users[me] = h._users.get(me, 0) + 1
        return ptr

    def __exit__(self, *exc):
        h = self._h
        me = threading.get_ident()
        pending = None
        with h._cv:
            depth = h._users[me] - 1
            if depth:
                h._users[me] = depth
            else:
                del h._users[me]
            if not h._users:
                h._cv.notify_all()
                pending, h._pending = h._pending, None
        if pending is not None:
            h._release(pending)
        return False


# ---- Argument conversion ---------------------------------------------------

def _to_numpy(x):
    """A torch tensor becomes a numpy array; anything else is returned."""
    if hasattr(x, "detach") and hasattr(x, "numpy") and not isinstance(
            x, np.ndarray):
        x = x.detach().cpu()
        if hasattr(x, "resolve_conj"):
            x = x.resolve_conj()
        return x.numpy()
    return x


def as_float32(x, name):
    """x as a C-contiguous, aligned float32 numpy array (no copy when it is
    one already).  Integer and other float dtypes are converted; None,
    strings, booleans, complex and object arrays raise TypeError."""
    if x is None:
        raise TypeError(f"{name} must be an array of numbers, not None")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an array of numbers, not "
                        f"{type(x).__name__}")
    x = _to_numpy(x)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} cannot be converted to a float32 array: "
                        f"{e}") from None
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers (float32), not "
                        f"dtype {a.dtype}")
    return np.require(a, np.float32, "CA")


def as_mask(x, name):
    """A mask as (float32 array, is_bool).  bool (and uint8) masks are
    boolean; float masks are additive; other dtypes raise TypeError."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a bool or float array, not "
                        f"{type(x).__name__}")
    x = _to_numpy(x)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} cannot be converted to an array: {e}") from None
    if a.dtype == np.bool_ or a.dtype == np.uint8:
        return np.require(a != 0, np.float32, "CA"), True
    if a.dtype.kind == "f":
        return np.require(a, np.float32, "CA"), False
    raise TypeError(f"{name} must be a bool or floating-point array, not "
                    f"dtype {a.dtype}")


def as_ids(x, name, ndim=None):
    """Token ids as a C-contiguous int32 array (list, tuple, int, numpy or
    torch integers).  Floats raise TypeError; ids that do not fit int32
    raise InvalidArgumentError (the library checks the vocabulary range)."""
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be integer token ids, not "
                        f"{type(x).__name__}")
    x = _to_numpy(x)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} cannot be converted to integer ids: {e}") \
            from None
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids, not dtype "
                        f"{a.dtype}")
    if a.size and (a.min() < -_INT32_MAX - 1 or a.max() > _INT32_MAX):
        raise InvalidArgumentError(f"{name} holds ids outside int32")
    if ndim is not None and a.ndim != ndim:
        raise ShapeError(f"{name} must have {ndim} dimension(s), got shape "
                         f"{a.shape}")
    return np.require(a, np.int32, "CA")


def as_int(x, name, minimum=None):
    """An int (operator.index) that fits int64, at least minimum."""
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(x).__name__}") \
            from None
    if v > _INT64_MAX or v < -_INT64_MAX - 1:
        raise TransformerOverflowError(f"{name} = {v} does not fit in 64 bits")
    if minimum is not None and v < minimum:
        raise InvalidArgumentError(f"{name} must be at least {minimum}, "
                                   f"got {v}")
    return v


def as_seed(x, name="seed"):
    """A seed as the C library takes it (uint64): an int in torch's
    range, -2**63 .. 2**64 - 1, negative ones taken modulo 2**64 as
    torch.manual_seed takes them; outside it, an error rather than a seed
    wrapped to another (2**64 is not 0)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(x).__name__}") \
            from None
    if v >= 2**64 or v < -2**63:
        raise TransformerOverflowError(
            f"{name} = {v} is outside -2**63 .. 2**64 - 1")
    return v % 2**64


def as_float(x, name):
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, not {type(x).__name__}") \
            from None


def fspath(path, name="path"):
    """path (str, bytes or os.PathLike) as a str, as os.fsdecode gives it:
    a name that is not UTF-8 holds surrogate escapes, which the C calls'
    path typemap (transformer.i: tfmpy_c_path) encodes back with
    os.fsencode, so the file it names is the one opened."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(f"{name} must be a str or os.PathLike, not "
                        f"{type(path).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return path


def check_float32_dtype(dtype, device, who):
    """Accepts PyTorch's device= and dtype= constructor arguments when they
    name what the library computes in (float32 on the CPU)."""
    if device is not None and str(device) != "cpu":
        raise UnsupportedError(f"{who}: only device='cpu' is supported, "
                               f"got {device!r}")
    if dtype is not None:
        name = str(dtype).replace("torch.", "")
        if name not in ("float32", "float"):
            try:
                ok = np.dtype(dtype) == np.float32
            except TypeError:
                ok = False
            if not ok:
                raise UnsupportedError(f"{who}: libtransformer computes in "
                                       f"float32, got dtype={dtype!r}")


# ---- Enum names (names.h: one table per enum, in C) -----------------------

def enum_names(kind):
    """{name: value} of the C enum `kind` (a TFM_ENUM_* constant), in value
    order: the library's own table, shared with model files and Lua."""
    names = {}
    for value in range(_ll.tfm_enum_count(kind)):
        name = _ll.tfm_enum_name(kind, value)
        if name is not None:
            names[name] = value
    return names


def enum_values(kind):
    """{value: name} of the C enum `kind` (the inverse of enum_names)."""
    return {value: name for name, value in enum_names(kind).items()}


# ---- Masks -----------------------------------------------------------------

CAUSAL_NONE = _ll.TFM_CAUSAL_NONE
CAUSAL_TOP_LEFT = _ll.TFM_CAUSAL_TOP_LEFT
MASK_BLOCK = _ll.TFM_MASK_BLOCK
MASK_ALLOW = _ll.TFM_MASK_ALLOW
MASK_ADDITIVE = _ll.TFM_MASK_ADDITIVE


def mha_masks(batch, num_heads, batched, key_padding_mask, attn_mask,
              is_causal, names=("key_padding_mask", "attn_mask")):
    """The low-level masks tuple for nn.MultiheadAttention's conventions
    (bool True = masked out, float = additive):
      key_padding_mask [B, S] ([S] unbatched),
      attn_mask [L, S] or [B*num_heads, L, S] ([num_heads, L, S] unbatched).
    None when there is no mask at all."""
    if key_padding_mask is None and attn_mask is None and not is_causal:
        return None
    kpm = attn = None
    kpm_kind = attn_kind = MASK_BLOCK
    if key_padding_mask is not None:
        kpm, is_bool = as_mask(key_padding_mask, names[0])
        kpm_kind = MASK_BLOCK if is_bool else MASK_ADDITIVE
        if not batched:
            if kpm.ndim != 1:
                raise ShapeError(f"{names[0]} of unbatched input must be "
                                 f"[S], got shape {kpm.shape}")
            kpm = kpm[None]
        elif kpm.ndim != 2:
            raise ShapeError(f"{names[0]} must be [batch, S], got shape "
                             f"{kpm.shape}")
    if attn_mask is not None:
        attn, is_bool = as_mask(attn_mask, names[1])
        attn_kind = MASK_BLOCK if is_bool else MASK_ADDITIVE
        if attn.ndim == 3:
            if attn.shape[0] != batch * num_heads:
                raise ShapeError(
                    f"{names[1]} has {attn.shape[0]} matrices; a 3-D mask "
                    f"must be [batch * num_heads, L, S] with batch * "
                    f"num_heads = {batch * num_heads}")
            attn = attn.reshape(batch, num_heads, attn.shape[1],
                                attn.shape[2])
        elif attn.ndim != 2:
            raise ShapeError(f"{names[1]} must be [L, S] or [batch * "
                             f"num_heads, L, S], got shape {attn.shape}")
    causal = CAUSAL_TOP_LEFT if is_causal else CAUSAL_NONE
    return (causal, kpm, kpm_kind, attn, attn_kind)


class BatchIO:
    """Converts PyTorch-layout activations to the library's [B, L, E]
    (zero-copy when batch_first, a transposing copy otherwise; unbatched
    [L, E] becomes [1, L, E]) and results back."""

    def __init__(self, batch_first, batched):
        self.batch_first = batch_first
        self.batched = batched
        self._seen = {}

    def take(self, x, name):
        a = as_float32(x, name)
        if a.ndim != (3 if self.batched else 2):
            layout = ("[batch, seq, features]" if self.batch_first
                      else "[seq, batch, features]")
            raise ShapeError(f"{name} must be 3-D {layout}, or 2-D "
                             f"(unbatched [seq, features]) like the query; "
                             f"got shape {a.shape}")
        key = id(x)
        if key in self._seen:           # self-attention: convert once
            return self._seen[key][1]
        if not self.batched:
            b = a[None]
        elif self.batch_first:
            b = a
        else:
            b = np.ascontiguousarray(a.swapaxes(0, 1))
        self._seen[key] = (x, b)
        return b

    def give(self, out):
        if not self.batched:
            return out[0]
        if self.batch_first:
            return out
        return out.swapaxes(0, 1)


def is_batched(x, name):
    """Whether an activation is batched (3-D) or unbatched (2-D)."""
    if x is None:
        raise TypeError(f"{name} must be an array of numbers, not None")
    try:
        return np.ndim(_to_numpy(x)) != 2
    except (TypeError, ValueError):     # ragged: as_float32 says why
        return True


# ---- Modules ---------------------------------------------------------------

def _rebuild_module(cls, attrs, params):
    module = cls.__new__(cls)
    module.__dict__.update(attrs)
    module._adopt(module._create())
    for name, value in params.items():
        module._call(_ll.tfm_module_set_parameter, name, value)
    return module


IncompatibleKeys = collections.namedtuple("IncompatibleKeys",
                                          ["missing_keys", "unexpected_keys"])


class _Closed:
    """_use() of an owner without a handle: raises ClosedError."""

    def __init__(self, what):
        self._what = what

    def __enter__(self):
        raise ClosedError(f"{self._what} is closed")

    def __exit__(self, *exc):   # pragma: no cover - __enter__ raises
        return False


class HandleOwner:
    """An object that owns one C handle (``self._handle``, a _Handle):
    ``close()`` frees it now (idempotent; the garbage collector does it
    otherwise), ``closed`` tells, ``with`` closes at the end.

    Every call into C takes the pointer with ``with self._use() as ptr:``
    around the whole call, argument conversion included, or with
    ``self._call(fn, *args)`` for a single call: close() from another thread
    then waits for it (see _Handle).  ``_ptr`` gives the raw pointer
    without that protection, for tests that call the low-level module
    directly; the package itself never uses it
    (test_threads_close.py::test_package_never_reads_raw_pointers)."""

    _handle = None

    def _use(self):
        h = self._handle
        if h is None:
            return _Closed(type(self).__name__)
        return h.use(type(self).__name__)

    def _call(self, fn, *args):
        """fn(ptr, *args) with the handle in use for the call."""
        with self._use() as ptr:
            return fn(ptr, *args)

    @property
    def _ptr(self):
        h = self._handle
        if h is None:
            raise ClosedError(f"{type(self).__name__} is closed")
        return h.get(type(self).__name__)

    def close(self):
        """Frees the C handle now, after any call in progress on it from
        another thread has finished.  Idempotent; later use raises
        ClosedError."""
        if self._handle is not None:
            self._handle.close()

    @property
    def closed(self):
        """True once close() was called."""
        return self._handle is None or self._handle.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Module(ModuleTree, StoredWeights, HandleOwner):
    """Base class of every layer: a libtransformer module handle with
    PyTorch's parameter API.

    Parameters use PyTorch's ``state_dict`` names and shapes.  A new
    module starts with PyTorch's default initialisation (see
    :meth:`reset_parameters`), drawn from the package's generator
    (``transformer.manual_seed``); load trained weights with
    :meth:`load_state_dict` (a ``torch.nn`` module's ``state_dict()`` works
    as is) or :meth:`load_safetensors`.  Calling the module runs
    :meth:`forward`.  Modules compute in float32; in training mode
    (:meth:`train`) they apply their constructor's dropout, as torch's
    (:meth:`set_dropout`, :attr:`dropout_state`).  :meth:`quantize`
    stores its weights in 16, 8 or 4 bits.  :meth:`close` frees the C handle at once (the
    garbage collector does it otherwise); a closed module raises
    :class:`ClosedError`.
    """

    def _adopt(self, ptr):
        if ptr is _VIEW:            # a sub-module view (_tree.make_view)
            del self.__dict__["_create"]
            self._handle = self.__dict__.pop("_view_handle")
            return
        self._handle = _Handle(ptr, _ll.tfm_module_free, "module")
        # The constructor's dropout (torch's dropout=p) and a dropout
        # stream of its own (transformer.manual_seed makes it repeatable).
        from ._init import next_dropout_seed
        p = self.__dict__.get("dropout")
        with self._use() as h:
            if isinstance(p, float) and p != 0.0:
                _ll.tfm_module_set_dropout(h, p)
            _ll.tfm_module_set_dropout_state(h, next_dropout_seed(), 0)

    # -- calling --
    def __call__(self, *args, **kwargs):
        """module(...) runs module.forward(...).  When an argument is a
        torch.Tensor the arrays it returns are torch.Tensors (sharing the
        result's memory, torch.from_numpy); otherwise numpy arrays."""
        out = self.forward(*args, **kwargs)
        if _torch.any_tensor(args, kwargs):
            out = _torch.to_torch(out)
        return out

    # -- attributes: parameters and sub-modules, as torch.nn.Module --
    def __getattr__(self, name):
        """Sub-modules (``layer.self_attn``) and this module's own
        parameters (``mha.in_proj_weight``: a read-only copy; assign to
        the attribute, or use load_state_dict, to change it)."""
        try:
            return ModuleTree.__getattr__(self, name)
        except AttributeError:
            if (name.startswith("_") or self.closed or
                    self.__dict__.get("_in_getattr")):
                raise
        self.__dict__["_in_getattr"] = True
        try:
            entry = self._table().get(name)
        finally:
            del self.__dict__["_in_getattr"]
        if entry is None:
            raise AttributeError(f"{type(self).__name__!r} object has no "
                                 f"attribute {name!r}")
        mod, c_name, c_shape, shape = entry
        a = np.empty(c_shape, np.float32)
        with _tree_using(mod) as ptr:
            _ll.tfm_module_get_parameter(ptr, c_name, a)
        a = a.reshape(shape)
        a.flags.writeable = False
        return a

    def __setattr__(self, name, value):
        """``module.weight = array`` sets that parameter (as assigning a
        torch.nn.Parameter); ``layer.norm1 = other`` copies the weights of
        a module of the same class and configuration into the sub-module
        (the layer's structure is fixed in C)."""
        if (name.startswith("_") or name in self.__dict__ or
                hasattr(type(self), name) or self.closed):
            object.__setattr__(self, name, value)
            return
        children = self._child_map()
        if name in children:
            child = children[name]
            if (type(value) is not type(child) or
                    value._extra_repr() != child._extra_repr()):
                raise UnsupportedError(
                    f"{type(self).__name__}.{name} can only take a "
                    f"{type(child).__name__}({child._extra_repr()}), whose "
                    f"weights are copied in (the layer's structure is fixed"
                    f"); got {value!r}")
            child.load_state_dict(value.state_dict())
            return
        table = self._table()
        if name in table and "." not in name:
            self.load_state_dict({name: value}, strict=False)
            return
        object.__setattr__(self, name, value)

    @classmethod
    def from_torch(cls, module):
        """A new module of this class with the configuration and the
        parameters (copied) of the equivalent ``torch.nn`` module, e.g.
        ``transformer.TransformerEncoderLayer.from_torch(torch_layer)``."""
        return _torch.from_torch(cls, module)

    def forward(self, *args, **kwargs):   # pragma: no cover - abstract
        """The computation; each layer documents its own shapes."""
        raise NotImplementedError

    # -- training mode and gradients --
    @property
    def training(self):
        """True in training mode (torch's ``module.training``)."""
        comps = self._components()
        return bool(comps) and all(
            mod._call(_ll.tfm_module_is_training) for _, mod in comps)

    def train(self, mode=True):
        """Training mode (``mode`` True) or evaluation mode, for this module
        and its sub-modules, as torch's ``module.train(mode)``; returns
        self.  The first ``train()`` allocates zeroed gradients of every
        parameter.  In training mode a call keeps what :meth:`backward`
        needs; evaluation mode (the default) is the forward pass bit for
        bit."""
        for _, mod in self._components():
            mod._call(_ll.tfm_module_train, 1 if mode else 0)
        return self

    def eval(self):
        """Evaluation mode (``train(False)``); returns self."""
        return self.train(False)

    def set_dropout(self, p):
        """Sets the dropout probability of every dropout site of this
        module and its sub-modules (libtransformer's; torch's equivalent
        is setting each ``nn.Dropout``'s ``p``): the attention weights,
        the feed-forward's hidden activations, the residual branches and
        a model's embeddings (tfm_module_set_dropout).  Dropout applies in
        training mode only; evaluation mode is unchanged.  p in [0, 1].
        Returns self."""
        p = as_float(p, "p")
        if not 0.0 <= p <= 1.0:
            raise InvalidArgumentError(
                f"dropout probability has to be between 0 and 1, but got {p}")
        for _, mod in self._components():
            mod._call(_ll.tfm_module_set_dropout, p)
        if "dropout" in self.__dict__ and isinstance(self.dropout, float):
            self.__dict__["dropout"] = p
        return self

    @property
    def dropout_state(self):
        """(seed, offset) of this module's dropout stream: the next
        training-mode call draws key number ``offset`` of the stream
        seeded with ``seed`` (module.h: tfm_module_set_dropout_state).
        Assign a (seed, offset) pair to repeat or resume a run's masks;
        each new module gets a seed of its own from
        ``transformer.manual_seed``'s sequence."""
        return tuple(self._call(_ll.tfm_module_get_dropout_state))

    @dropout_state.setter
    def dropout_state(self, value):
        seed, offset = value
        for _, mod in self._components():
            mod._call(_ll.tfm_module_set_dropout_state,
                      as_seed(seed), as_seed(offset, "offset"))

    def backward(self, *grad_outputs):   # overridden by the kinds that have one
        """The gradients with respect to the inputs of the last training-
        mode call, given the gradient of the loss with respect to its
        output; parameter gradients are accumulated (see :meth:`grad`)."""
        raise UnsupportedError(f"{type(self).__name__} has no backward "
                               "pass yet")

    def _keep_for_backward(self, *arrays):
        """In training mode, keeps copies of a call's inputs for
        :meth:`backward` (the C backward passes take the forward's inputs
        again; the layers' and stacks' use the activations their training
        forward kept when given the same inputs, the others recompute
        them)."""
        if self.training:
            self.__dict__["_saved_inputs"] = tuple(
                None if a is None else np.array(a, np.float32, copy=True)
                for a in arrays)

    def _saved_for_backward(self):
        saved = self.__dict__.get("_saved_inputs")
        if saved is None:
            raise InvalidArgumentError(
                f"{type(self).__name__}.backward: no training-mode call to "
                "differentiate (call train(), then the module, then "
                "backward)")
        return saved

    def zero_grad(self, set_to_none=False):
        """Sets every parameter's gradient to zero (torch's
        ``zero_grad(set_to_none=False)``; set_to_none=True is accepted and
        also zeroes, the memory being the module's)."""
        del set_to_none
        for _, mod in self._components():
            mod._call(_ll.tfm_module_zero_grad)

    def grad(self, name):
        """The gradient of parameter ``name`` (PyTorch's name and shape), a
        float32 numpy array (a copy), as ``dict(module.named_parameters())
        [name].grad``.  Raises NotFoundError for an unknown name and
        InvalidArgumentError before the first ``train()``."""
        table = self._table()
        if name not in table:
            raise NotFoundError(f"{type(self).__name__} has no parameter "
                                f"{name!r}")
        mod, c_name, c_shape, shape = table[name]
        a = np.empty(c_shape, np.float32)
        mod._call(_ll.tfm_module_get_grad, c_name, a)
        return a.reshape(shape)

    def named_grads(self):
        """{PyTorch name: gradient array (a copy)}, in PyTorch's order."""
        return collections.OrderedDict(
            (name, self.grad(name)) for name in self._table())

    # -- parameters --
    def _components(self):
        """[(prefix, module)] whose C parameters make up the state dict."""
        return [("", self)]

    def _exposed(self, c_name, c_shape):
        """The PyTorch name and shape of a C parameter, or None to hide
        it.  Subclasses reshape or hide parameters (LayerNorm)."""
        return c_name, c_shape

    def _table(self):
        """name -> (module, C name, C shape, exposed shape), PyTorch order."""
        table = collections.OrderedDict()
        for prefix, mod in self._components():
            with mod._use() as ptr:
                for i in range(_ll.tfm_module_parameter_count(ptr)):
                    c_name = _ll.tfm_module_parameter_name(ptr, i)
                    c_shape = tuple(_ll.tfm_module_parameter_shape(ptr,
                                                                   c_name))
                    exposed = mod._exposed(c_name, c_shape)
                    if exposed is not None:
                        table[prefix + exposed[0]] = (mod, c_name, c_shape,
                                                      tuple(exposed[1]))
        return table

    def state_dict(self):
        """All parameters as {PyTorch name: float32 numpy array (a copy)},
        in PyTorch's order."""
        out = collections.OrderedDict()
        for name, (mod, c_name, c_shape, shape) in self._table().items():
            a = np.empty(c_shape, np.float32)
            mod._call(_ll.tfm_module_get_parameter, c_name, a)
            out[name] = a.reshape(shape)
        return out

    def named_parameters(self, prefix="", recurse=True):
        """Iterator of (name, array) pairs, as state_dict().items(), each
        name after ``prefix + "."`` when a prefix is given.  The arrays are
        copies: change parameters with load_state_dict (on this module or
        on any sub-module view).  recurse=False keeps only this module's
        own parameters (no dot in the name, as torch)."""
        p = prefix + "." if prefix else ""
        items = [(p + k, v) for k, v in self.state_dict().items()
                 if recurse or k not in self._child_param_names()]
        return iter(items)

    def parameters(self, recurse=True):
        """Iterator of the parameter arrays (copies)."""
        return iter([v for _, v in self.named_parameters(recurse=recurse)])

    def _child_param_names(self):
        names = set()
        for name, child in self._child_map().items():
            names.update(f"{name}.{k}" for k in child.state_dict())
        return names

    def load_state_dict(self, state_dict, strict=True):
        """Copies parameters from a mapping of PyTorch names to arrays: a
        ``torch.nn`` module's ``state_dict()`` (tensors) or numpy arrays.

        strict=True (as PyTorch): every parameter must be present and no
        other key; otherwise StateDictError lists them (a RuntimeError, as
        PyTorch raises, and a NotFoundError / KeyError).  strict=False
        loads the keys that match and reports the others.  Either way
        shapes must match exactly (StateDictShapeError: a RuntimeError and
        a ShapeError) and values be finite (NonFiniteError); nothing is
        changed unless everything checks out.  Returns
        ``(missing_keys, unexpected_keys)`` as PyTorch does.  A key that is
        not a str raises TypeError with strict=True and strict=False alike
        (torch 1.13 fails on one in both modes too), before any change."""
        if not isinstance(state_dict, collections.abc.Mapping):
            hint = _torch.state_dict_hint(state_dict)
            raise TypeError("state_dict must be a mapping of names to arrays, "
                            f"not {type(state_dict).__name__}{hint}")
        for key in state_dict:
            if not isinstance(key, str):
                raise TypeError("state_dict keys must be parameter names "
                                f"(str), not {type(key).__name__} {key!r} "
                                f"(strict={strict!r})")
        table = self._table()
        missing = [k for k in table if k not in state_dict]
        unexpected = [k for k in state_dict if k not in table]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append("missing keys: " + ", ".join(map(repr, missing)))
            if unexpected:
                parts.append("unexpected keys: " +
                             ", ".join(map(repr, unexpected)))
            raise StateDictError(f"error loading state_dict for "
                                 f"{type(self).__name__}: " + "; ".join(parts))
        staged = []
        for name, (mod, c_name, c_shape, shape) in table.items():
            if name not in state_dict:
                continue
            a = as_float32(state_dict[name], name)
            if a.shape != shape:
                raise StateDictShapeError(f"size mismatch for {name}: "
                                          f"shape {a.shape} given, the "
                                          f"module has {shape}")
            if not np.isfinite(a).all():
                raise NonFiniteError(f"{name} holds NaN or infinity")
            staged.append((mod, c_name, a.reshape(c_shape)))
        for mod, c_name, a in staged:
            mod._call(_ll.tfm_module_set_parameter, c_name, a)
        return IncompatibleKeys(missing, unexpected)

    def reset_parameters(self, seed=None):
        """Draws every parameter afresh with PyTorch's default
        initialisation, as the ``torch.nn`` module's ``reset_parameters``
        (tfm_module_reset_parameters in module.h lists each parameter's
        distribution): xavier-uniform attention projections and zero
        attention biases, nn.Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        for out_proj.weight and the feed-forward layers, LayerNorm ones and
        zeros, N(0, 1) embeddings; Transformer then xavier-uniform on every
        matrix, as nn.Transformer.  seed None draws from the package's
        generator (``transformer.manual_seed``), an int from a generator
        seeded with it (reproducible on its own).  Returns self."""
        from ._init import reset_module
        reset_module(self, seed)
        self._after_reset()
        return self

    def _reset_new(self):
        """A constructor's initialisation: reset_parameters() for a new
        module, nothing for a view of a parent's sub-module (its weights
        are the parent's)."""
        if isinstance(self._handle, _Handle):
            self.reset_parameters()

    def _after_reset(self):
        """Hook after reset_parameters (Embedding zeroes padding_idx)."""

    def num_parameters(self):
        """Number of scalar parameters (sum of the parameters' sizes)."""
        return sum(int(np.prod(v[3], dtype=np.int64))
                   for v in self._table().values())

    def forward_macs(self, batch, tgt_len, src_len=None):
        """Multiply-accumulates of one forward pass (matrix products only)
        on ``batch`` sequences of ``tgt_len`` query positions attending over
        ``src_len`` key positions (default: tgt_len)."""
        batch = as_int(batch, "batch", 1)
        tgt_len = as_int(tgt_len, "tgt_len", 1)
        src_len = tgt_len if src_len is None else as_int(src_len, "src_len", 1)
        total = 0
        for _, mod in self._components():
            total += mod._call(_ll.tfm_module_forward_macs, batch, tgt_len,
                               src_len)
        return total

    def save_safetensors(self, path, metadata=None, dtype="F32"):
        """Writes state_dict() to a safetensors file (PyTorch names), with
        optional string metadata, stored as dtype ("F32", "F16", "BF16";
        see transformer.save_safetensors).  Returns the bytes written."""
        from .safetensors import save_safetensors
        return save_safetensors(self.state_dict(), path, metadata, dtype)

    def load_safetensors(self, path, strict=True):
        """Loads parameters from a safetensors file written by
        save_safetensors (or by PyTorch's safetensors.torch.save_file)."""
        from .safetensors import load_safetensors
        return self.load_state_dict(load_safetensors(path), strict=strict)

    # -- copies --
    _transient = ("_handle", "_views")

    def _create(self):   # pragma: no cover - every layer defines it
        """A new C handle for this module's configuration (attributes)."""
        raise NotImplementedError

    def __reduce__(self):
        """pickle and copy.deepcopy: the configuration (attributes) and the
        module's own parameters; a new C handle is made on load."""
        attrs = {k: v for k, v in self.__dict__.items()
                 if k not in self._transient}
        params = {}
        with self._use() as ptr:
            for i in range(_ll.tfm_module_parameter_count(ptr)):
                name = _ll.tfm_module_parameter_name(ptr, i)
                a = np.empty(_ll.tfm_module_parameter_shape(ptr, name),
                             np.float32)
                _ll.tfm_module_get_parameter(ptr, name, a)
                params[name] = a
        return (_rebuild_module, (type(self), attrs, params))

    # -- display --
    def _extra_repr(self):
        return ""

    def __repr__(self):
        text = f"{type(self).__name__}({self._extra_repr()})"
        if self.closed:
            text += " <closed>"
        return text
