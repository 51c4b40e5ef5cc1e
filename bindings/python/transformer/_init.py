"""Default initialisation: the package's generator and reset_parameters.

Modules draw PyTorch's default initialisation (``reset_parameters``) from
the library's SplitMix64 generator (tfm_module_reset_parameters, module.h),
as torch draws from its default generator: ``manual_seed(s)`` makes the
modules constructed afterwards reproducible; ``module.reset_parameters(
seed=s)`` redraws one module from its own generator seeded with s.
"""

import contextlib
import threading

from . import _lowlevel as _ll
from ._core import as_seed

_lock = threading.Lock()
_generator = _ll.tfm_rng()
_ll.tfm_rng_seed(_generator, 0)


def _seed(seed):
    return as_seed(seed)


# Dropout streams (module.h: tfm_module_set_dropout_state): module number
# i made since the last manual_seed(s) gets seed output i + 1 of a
# SplitMix64 generator seeded with s, apart from the parameters' draws.
_dropout_streams = _ll.tfm_rng()
_ll.tfm_rng_seed(_dropout_streams, 0)


def next_dropout_seed():
    """The dropout stream seed of the next module made."""
    with _lock:
        return _ll.tfm_rng_next(_dropout_streams)


def manual_seed(seed):
    """Seeds the package's generator, as ``torch.manual_seed``: modules
    constructed (or reset with ``reset_parameters()``) afterwards draw the
    same values for the same seed, in the same order, and get the same
    dropout streams.  seed: an int in -2**63 .. 2**64 - 1 (negative ones
    modulo 2**64, as torch takes them).  The generator
    starts seeded with 0 at import."""
    with _lock:
        _ll.tfm_rng_seed(_generator, _seed(seed))
        _ll.tfm_rng_seed(_dropout_streams, _seed(seed))


def reset_module(module, seed=None):
    """Draws every C component of module with tfm_module_reset_parameters,
    from a generator seeded with seed, or from the package's generator."""
    with contextlib.ExitStack() as uses:     # every part in use (_core)
        parts = [uses.enter_context(mod._use())
                 for _, mod in module._components()]
        if seed is None:
            with _lock:
                for ptr in parts:
                    _ll.tfm_module_reset_parameters(ptr, _generator)
        else:
            rng = _ll.tfm_rng()
            _ll.tfm_rng_seed(rng, _seed(seed))
            for ptr in parts:
                _ll.tfm_module_reset_parameters(ptr, rng)
