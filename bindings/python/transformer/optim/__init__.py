"""Optimizers with torch.optim's names, arguments and defaults, stepping a
module's parameters in place from the gradients its backward passes
accumulated (training.h: tfm_optimizer)::

    import transformer
    from transformer.optim import AdamW
    from transformer.optim.lr_scheduler import WarmupCosine

    lin = transformer.Linear(16, 4).train()     # train() allocates grads
    opt = AdamW(lin, lr=3e-4)
    sched = WarmupCosine(opt, warmup_steps=100, total_steps=1000)
    for x, dy in batches:
        opt.zero_grad()
        lin(x)
        lin.backward(dy)
        transformer.nn.utils.clip_grad_norm_(opt, 1.0)
        opt.step()
        sched.step()

The first argument is the module (not ``module.parameters()``: those are
copies here): every parameter of the module and its sub-modules is
optimized, each once.  One parameter group: ``param_groups[0]["lr"]``
reads and sets the learning rate of the next step, as torch's
schedulers do; the other hyperparameters are fixed at construction.
``state_dict()`` keys the state by parameter name (torch uses indices).
"""

import collections
import math

import numpy as np

from .. import _lowlevel as _ll
from .._core import HandleOwner, Module, _Handle, as_float
from .._errors import InvalidArgumentError, NotFoundError, UnsupportedError

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]

_STATE_NAMES = ("step", "momentum_buffer", "exp_avg", "exp_avg_sq",
                "max_exp_avg_sq")


class _ParamGroup(dict):
    """torch's param_group dict; "lr" is the C optimizer's learning rate,
    the hyperparameters are read-only, other keys (a scheduler's
    "initial_lr") are stored."""

    def __init__(self, optimizer, items):
        super().__init__(items)
        self._opt = optimizer

    def __getitem__(self, key):
        if key == "lr":
            return self._opt._get_lr()
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value):
        if key == "lr":
            self._opt._set_lr(value)
        elif key in self._opt.defaults or key == "params":
            raise UnsupportedError(
                f"param_groups[0][{key!r}] is fixed at construction; create "
                "a new optimizer to change it")
        super().__setitem__(key, value)

    def items(self):
        return [(k, self[k]) for k in self]

    def values(self):
        return [self[k] for k in self]

    def __repr__(self):
        return repr(dict(self.items()))


class Optimizer(HandleOwner):
    """Base of SGD, Adam and AdamW: one C optimizer per C module of the
    given Module (most modules are one)."""

    _kind = None

    def __init__(self, module, defaults, fields):
        if not isinstance(module, Module):
            hint = (" (pass the module itself: its parameters() are copies)"
                    if not isinstance(module, (str, bytes)) else "")
            raise TypeError("the optimizer takes a transformer Module, not "
                            f"{type(module).__name__}{hint}")
        opts = _ll.tfm_optimizer_options(self._kind)
        for name, value in fields.items():
            setattr(opts, name, value)
        self._module = module
        self._parts = []       # [(module part, _Handle)]
        try:
            for _, mod in module._components():
                with mod._use() as mptr:
                    ptr = _ll.tfm_optimizer_create(mptr, opts)
                self._parts.append((mod, _Handle(ptr, _ll.tfm_optimizer_free,
                                                 "optimizer",
                                                 owner=mod._handle)))
        except BaseException:
            self.close()
            raise
        self._handle = self._parts[0][1]
        self.defaults = dict(defaults)
        self.param_groups = [_ParamGroup(
            self, [("params", list(module._table()))] +
            list(defaults.items()))]

    # -- handles --
    def _each(self, fn, *args):
        """[fn(optimizer pointer, *args)] for every part, the module and
        the optimizer both in use (a closed module raises ClosedError)."""
        out = []
        for mod, h in self._parts:
            with mod._use(), h.use(type(self).__name__) as ptr:
                out.append(fn(ptr, *args))
        return out

    def close(self):
        """Frees the C optimizers (the module stays).  Idempotent."""
        for _, h in self._parts:
            h.close()

    @property
    def closed(self):
        """True once close() was called."""
        return not self._parts or self._parts[0][1].closed

    # -- torch.optim.Optimizer --
    def step(self, closure=None):
        """One update of every parameter that has gradients (the module was
        put in training mode), from the accumulated gradients.  closure (as
        torch) is called first and its loss returned.  A NaN or infinite
        gradient raises NonFiniteError and changes nothing.  With several
        C modules (Transformer with a final norm) each is checked and
        stepped in turn."""
        loss = closure() if closure is not None else None
        self._each(_ll.tfm_optimizer_step)
        return loss

    def zero_grad(self, set_to_none=False):
        """Zeroes every gradient (set_to_none is accepted; the memory is the
        module's, so it is zeroed either way)."""
        del set_to_none
        self._each(_ll.tfm_optimizer_zero_grad)

    def _get_lr(self):
        return self._each(_ll.tfm_optimizer_get_lr)[0]

    def _set_lr(self, lr):
        lr = as_float(lr, "lr")
        if not (lr >= 0.0 and lr != float("inf")):
            raise InvalidArgumentError(f"invalid learning rate: {lr}")
        self._each(_ll.tfm_optimizer_set_lr, lr)

    # -- state --
    def _param_table(self):
        """[(name, module part, optimizer handle, C name, C shape, shape)]."""
        handles = {id(mod): h for mod, h in self._parts}
        return [(name, mod, handles[id(mod)], c_name, c_shape, shape)
                for name, (mod, c_name, c_shape, shape)
                in self._module._table().items()]

    @property
    def state(self):
        """{parameter name: {state name: float32 array (a copy)}}: torch's
        optimizer.state keyed by name ("step" a 0-d array, as torch 1.13's
        step tensor)."""
        out = collections.OrderedDict()
        for name, mod, h, c_name, c_shape, shape in self._param_table():
            entry = collections.OrderedDict()
            for s in _STATE_NAMES:
                a = np.empty((1,) if s == "step" else c_shape, np.float32)
                try:
                    with mod._use(), h.use(type(self).__name__) as ptr:
                        _ll.tfm_optimizer_get_state(ptr, c_name, s, a)
                except NotFoundError:
                    continue
                entry[s] = a.reshape(()) if s == "step" else a.reshape(shape)
            out[name] = entry
        return out

    def state_dict(self):
        """{"state": {name: {state: array}}, "param_groups": [{...}]}, as
        torch's but keyed by parameter name."""
        group = dict(self.param_groups[0].items())
        return {"state": self.state, "param_groups": [group]}

    def load_state_dict(self, state_dict):
        """Loads what state_dict() returned: every state of every parameter,
        the learning rate and the weight decay (given to every parameter,
        as torch's one group).  Everything is checked (names, shapes,
        finiteness, integer steps, hyperparameter ranges as torch's
        constructors check them) before anything changes; betas, eps,
        amsgrad, momentum, dampening, nesterov and maximize are fixed at
        construction, so a value differing from this optimizer's raises
        InvalidArgumentError (a ValueError) naming the key."""
        table = {row[0]: row for row in self._param_table()}
        state = state_dict["state"]
        unknown = [k for k in state if k not in table]
        if unknown:
            raise NotFoundError(f"optimizer state for unknown parameters "
                                f"{unknown}")
        writes = []
        for name, entry in state.items():
            _, mod, h, c_name, c_shape, shape = table[name]
            for s, value in entry.items():
                want = (1,) if s == "step" else c_shape
                a = np.array(value, np.float32).reshape(
                    (1,) if s == "step" else shape)
                if not np.all(np.isfinite(a)):
                    raise InvalidArgumentError(f"{name}.{s} is not finite")
                if s == "step" and (a[0] < 0 or a[0] != np.floor(a[0]) or
                                    a[0] >= 2.0 ** 53):
                    raise InvalidArgumentError(f"{name}.step must be a "
                                               "non-negative integer "
                                               "below 2**53")
                # as tfm_optimizer_set_state refuses them, but here, before
                # the first write: a refusal half-way used to leave the
                # states written before it changed
                if s in ("exp_avg_sq", "max_exp_avg_sq") and np.any(a < 0):
                    raise InvalidArgumentError(
                        f"{name}.{s} holds a negative value; second "
                        "moments are never negative")
                writes.append((mod, h, c_name, s,
                               np.ascontiguousarray(a.reshape(want))))
        # shapes and names: get_state into scratch checks they exist
        for mod, h, c_name, s, a in writes:
            with mod._use(), h.use(type(self).__name__) as ptr:
                _ll.tfm_optimizer_get_state(ptr, c_name, s, np.empty_like(a))
        lr, weight_decay, extra = self._check_group(
            state_dict.get("param_groups"))
        for mod, h, c_name, s, a in writes:
            with mod._use(), h.use(type(self).__name__) as ptr:
                _ll.tfm_optimizer_set_state(ptr, c_name, s, a)
        if lr is not None:
            self.param_groups[0]["lr"] = lr
        if weight_decay is not None:
            for _, mod, h, c_name, _, _ in table.values():
                with mod._use(), h.use(type(self).__name__) as ptr:
                    _ll.tfm_optimizer_set_weight_decay(ptr, c_name,
                                                       weight_decay)
            dict.__setitem__(self.param_groups[0], "weight_decay",
                             weight_decay)
        for key, value in extra.items():
            self.param_groups[0][key] = value

    def _check_group(self, groups):
        """(lr, weight_decay, {other key: value}) to apply from a
        state_dict's param_groups, every value checked first (issue 44
        follow-up: betas, eps, weight_decay and amsgrad were ignored; torch
        applies them).  lr and weight_decay are applied; the other
        hyperparameters cannot change after construction, so a value that
        differs from this optimizer's raises InvalidArgumentError naming
        the key; keys that are no hyperparameter (a scheduler's
        initial_lr) are stored, as torch stores them."""
        if not groups:
            return None, None, {}
        if not isinstance(groups, (list, tuple)) or len(groups) != 1 or \
                not isinstance(groups[0], dict):
            raise InvalidArgumentError("param_groups must be a list of one "
                                       "dict (one parameter group)")
        group = groups[0]

        def number(key, value, low, below=None):
            v = as_float(value, key)
            if not (math.isfinite(v) and v >= low and
                    (below is None or v < below)):
                bound = f" and below {below}" if below is not None else ""
                raise InvalidArgumentError(
                    f"param_groups[0][{key!r}] = {value!r}: must be finite, "
                    f">= {low}{bound}")
            return v

        lr = weight_decay = None
        extra = {}
        for key, value in group.items():
            if key == "params":
                continue
            if key == "lr":
                lr = number(key, value, 0.0)
            elif key == "weight_decay":
                weight_decay = number(key, value, 0.0)
            elif key == "betas":
                b1, b2 = _check_betas(value)
                got = (number("betas[0]", b1, 0.0, 1.0),
                       number("betas[1]", b2, 0.0, 1.0))
                self._same(key, got)
            elif key in ("eps", "momentum", "dampening"):
                self._same(key, number(key, value, 0.0))
            elif key in ("amsgrad", "nesterov", "maximize"):
                if not isinstance(value, (bool, int, np.bool_)) or \
                        value not in (0, 1):
                    raise InvalidArgumentError(
                        f"param_groups[0][{key!r}] = {value!r}: must be "
                        "True or False")
                self._same(key, bool(value))
            elif key in self.defaults:
                self._same(key, value)
            else:
                extra[key] = value
        return lr, weight_decay, extra

    def _same(self, key, value):
        own = self.defaults.get(key)
        if own is None or own != value:
            raise InvalidArgumentError(
                f"param_groups[0][{key!r}] = {value!r} differs from this "
                f"optimizer's {own!r}; it is fixed at construction: create "
                "the optimizer with it to load this state")

    def __repr__(self):
        args = "\n".join(f"    {k}: {v}" for k, v in
                         self.param_groups[0].items() if k != "params")
        return f"{type(self).__name__} (\n{args}\n)"


def _check_betas(betas):
    try:
        b1, b2 = betas
    except (TypeError, ValueError):
        raise TypeError("betas must be a pair of numbers") from None
    return as_float(b1, "betas[0]"), as_float(b2, "betas[1]")


class SGD(Optimizer):
    """torch.optim.SGD(module, lr=1e-3, momentum=0, dampening=0,
    weight_decay=0, nesterov=False, maximize=False).  torch 1.13 requires
    lr; this default is later torch's.  Invalid values raise
    InvalidArgumentError (a ValueError, as torch)."""

    _kind = _ll.TFM_OPTIMIZER_SGD

    def __init__(self, module, lr=1e-3, momentum=0, dampening=0,
                 weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False):
        del foreach, differentiable
        lr, momentum = as_float(lr, "lr"), as_float(momentum, "momentum")
        dampening = as_float(dampening, "dampening")
        weight_decay = as_float(weight_decay, "weight_decay")
        super().__init__(
            module,
            dict(lr=lr, momentum=momentum, dampening=dampening,
                 weight_decay=weight_decay, nesterov=bool(nesterov),
                 maximize=bool(maximize)),
            dict(lr=lr, momentum=momentum, dampening=dampening,
                 weight_decay=weight_decay, nesterov=int(bool(nesterov)),
                 maximize=int(bool(maximize))))


class Adam(Optimizer):
    """torch.optim.Adam(module, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=0, amsgrad=False, maximize=False): weight_decay is L2
    (added to the gradient)."""

    _kind = _ll.TFM_OPTIMIZER_ADAM
    _default_wd = 0.0

    def __init__(self, module, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=None, amsgrad=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False,
                 fused=None):
        del foreach, capturable, differentiable, fused
        if weight_decay is None:
            weight_decay = self._default_wd
        b1, b2 = _check_betas(betas)
        lr, eps = as_float(lr, "lr"), as_float(eps, "eps")
        weight_decay = as_float(weight_decay, "weight_decay")
        super().__init__(
            module,
            dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay,
                 amsgrad=bool(amsgrad), maximize=bool(maximize)),
            dict(lr=lr, beta1=b1, beta2=b2, eps=eps,
                 weight_decay=weight_decay, amsgrad=int(bool(amsgrad)),
                 maximize=int(bool(maximize))))


class AdamW(Adam):
    """torch.optim.AdamW(module, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=1e-2, amsgrad=False, maximize=False): decoupled weight
    decay (Loshchilov and Hutter 2019)."""

    _kind = _ll.TFM_OPTIMIZER_ADAMW
    _default_wd = 1e-2


from . import lr_scheduler   # noqa: E402  (needs Optimizer)
