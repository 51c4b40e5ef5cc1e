"""Sub-modules: torch.nn's module tree over the C library's child handles.

``layer.self_attn``, ``layer.linear1``, ``encoder.layers[0]``,
``transformer.encoder`` are *views*: Python modules whose C handle is a
part of the parent's (include/transformer/module.h: tfm_module_child), so
their parameters are the parent's memory.  Loading parameters into a view
changes the parent's forward pass, and a view's forward pass computes with
the parent's weights.

Lifetime: a view keeps its parent alive (a view of a garbage-collected
parent cannot exist); once the parent is closed, the view raises
ClosedError.  ``view.close()`` detaches that one view object (later use
raises ClosedError) and frees nothing.
"""

import collections

from . import _lowlevel as _ll
from ._errors import ClosedError


class _ViewHandle:
    """The handle of a view: the child's pointer, valid while the parent's
    handle is open.  Uses of the pointer count as uses of the parent's
    handle, so closing the parent waits for them as for its own calls."""

    __slots__ = ("_parent", "_child", "_detached", "__weakref__")

    def __init__(self, parent_handle, child_ptr):
        self._parent = parent_handle
        self._child = child_ptr
        self._detached = False

    @property
    def closed(self):
        return self._detached or self._parent.closed

    def get(self, what):
        if self._detached:
            raise ClosedError(f"{what} is closed")
        self._parent.get(what)       # raises ClosedError once closed
        return self._child

    def use(self, what):
        if self._detached:
            raise ClosedError(f"{what} is closed")
        return _ViewUse(self, self._parent.use(what))

    def close(self):
        self._detached = True


class _ViewUse:
    """A use of a view: a use of the parent's handle giving the child."""

    __slots__ = ("_view", "_inner")

    def __init__(self, view, inner):
        self._view = view
        self._inner = inner

    def __enter__(self):
        self._inner.__enter__()
        return self._view._child

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)


_VIEW = object()    # what a view's _create returns (see make_view)


class _Now:
    """using() where handles have no use(): the pointer, read once."""

    def __init__(self, ptr):
        self._p = ptr

    def __enter__(self):
        return self._p

    def __exit__(self, *exc):
        return False


def using(owner):
    """``with using(module) as ptr``: the module's C pointer for the span of
    a call (counted as in use where the handle supports it), ClosedError
    once closed."""
    use = getattr(owner, "_use", None)
    if use is not None:
        return use()
    handle = owner._handle
    if handle is None:
        raise ClosedError(f"{type(owner).__name__} is closed")
    return _Now(handle.get(type(owner).__name__))


def child_pointer(module, path):
    """The C pointer of sub-module `path` of a Python module."""
    with using(module) as ptr:
        return _ll.tfm_module_child(ptr, path)


def make_view(cls, parent, path, *args, **kwargs):
    """A `cls` module over sub-module `path` of `parent`: cls's own
    constructor checks and stores the configuration (args, kwargs), and the
    handle is the child's instead of a new one."""
    handle = parent._handle
    ptr = child_pointer(parent, path)
    obj = cls.__new__(cls)
    # _create is looked up on the instance first: the constructor's
    # self._adopt(self._create()) receives _VIEW and takes the view handle.
    obj.__dict__["_create"] = lambda: _VIEW
    obj.__dict__["_view_handle"] = _ViewHandle(handle, ptr)
    obj.__init__(*args, **kwargs)
    return obj


def view_without_init(cls, parent, path, attrs):
    """A `cls` module over sub-module `path` with the given attributes, for
    classes whose constructor takes other modules (the stacks)."""
    obj = cls.__new__(cls)
    obj.__dict__.update(attrs)
    obj._handle = _ViewHandle(parent._handle, child_pointer(parent, path))
    return obj


class ModuleTree:
    """torch.nn.Module's navigation: children, named_children, modules,
    named_modules, get_submodule, attribute access to sub-modules.

    Subclasses list their sub-modules in ``_child_specs()``: (name, factory)
    pairs in PyTorch's order; each factory is called once and its module
    kept (``layer.self_attn is layer.self_attn``)."""

    def _child_specs(self):
        return []

    def _child_map(self):
        views = self.__dict__.get("_views")
        if views is None:
            if self.__dict__.get("_building_views"):
                return {}       # an attribute lookup while building them
            self.__dict__["_building_views"] = True
            try:
                views = collections.OrderedDict()
                for name, factory in self._child_specs():
                    views[name] = factory()
            finally:
                del self.__dict__["_building_views"]
            self.__dict__["_views"] = views
        return views

    def named_children(self):
        """Iterator of (name, module) over the direct sub-modules, in
        PyTorch's order (dropout modules have no counterpart)."""
        return iter(list(self._child_map().items()))

    def children(self):
        """Iterator over the direct sub-modules."""
        return iter(list(self._child_map().values()))

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """Iterator of (dotted name, module) over this module (name
        ``prefix``, "" by default) and every sub-module, depth first, as
        torch.nn.Module.named_modules."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._child_map().items():
            sub = prefix + ("." if prefix else "") + name
            yield from child.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        """Iterator over this module and every sub-module."""
        for _, m in self.named_modules():
            yield m

    def get_submodule(self, target):
        """The sub-module at a dotted path ("layers.0.self_attn"); "" is
        the module itself.  AttributeError when there is none."""
        mod = self
        if target == "":
            return mod
        for part in target.split("."):
            children = mod._child_map()
            if part not in children:
                raise AttributeError(f"{type(mod).__name__} has no "
                                     f"sub-module {part!r} (in {target!r})")
            mod = children[part]
        return mod

    def __getattr__(self, name):
        # Only reached when normal lookup fails: sub-modules by name.
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            children = self._child_map()
        except ClosedError:
            children = {}
        if name in children:
            return children[name]
        raise AttributeError(f"{type(self).__name__!r} object has no "
                             f"attribute {name!r}")


class ModuleList(ModuleTree):
    """A list of modules, as torch.nn.ModuleList (a stack's ``layers``):
    ``layers[0]``, ``len(layers)``, iteration, slices (a list).  Its
    entries are views of the stack's layers."""

    def __init__(self, modules):
        self._modules = list(modules)

    def _child_map(self):
        return collections.OrderedDict(
            (str(i), m) for i, m in enumerate(self._modules))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(self._modules[index])
        return self._modules[index]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def state_dict(self):
        """The entries' parameters as {"<i>.<name>": array}."""
        out = collections.OrderedDict()
        for i, m in enumerate(self._modules):
            for k, v in m.state_dict().items():
                out[f"{i}.{k}"] = v
        return out

    def named_parameters(self, prefix="", recurse=True):
        """(name, array) pairs, as state_dict().items()."""
        p = prefix + "." if prefix else ""
        return iter([(p + k, v) for k, v in self.state_dict().items()])

    def parameters(self, recurse=True):
        """The parameter arrays (copies)."""
        return iter(list(self.state_dict().values()))

    def __repr__(self):
        if not self._modules:
            return "ModuleList()"
        lines = [f"  ({i}): {m!r}" for i, m in enumerate(self._modules)]
        return "ModuleList(\n" + "\n".join(lines) + "\n)"
