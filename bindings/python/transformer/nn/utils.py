"""torch.nn.utils: gradient clipping."""

import math

from .. import _lowlevel as _ll
from .._core import Module, as_float
from .._errors import InvalidArgumentError

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0,
                    error_if_nonfinite=False):
    """torch.nn.utils.clip_grad_norm_ of PyTorch 1.13 over every gradient
    of ``parameters`` -- a Module or an optimizer (its module): total = the
    norm_type-norm of all the gradients together (float("inf") for the
    largest magnitude), computed in double; when max_norm / (total + 1e-6)
    < 1 every gradient is multiplied by that factor.  Returns total (a
    float).  A NaN or infinite gradient always raises NonFiniteError and
    changes nothing (torch's error_if_nonfinite=True; False is accepted
    but behaves the same: the C library never writes NaN gradients).
    (tfm_optimizer_clip_grad_norm.)"""
    del error_if_nonfinite
    from ..optim import Optimizer, SGD
    max_norm = as_float(max_norm, "max_norm")
    norm_type = as_float(norm_type, "norm_type")
    if not (max_norm >= 0.0):
        raise InvalidArgumentError(f"max_norm must be >= 0, got {max_norm}")
    if not (norm_type > 0.0):
        raise InvalidArgumentError(f"norm_type must be > 0, got {norm_type}")
    if isinstance(parameters, Optimizer):
        opt, own = parameters, False
    elif isinstance(parameters, Module):
        # a plain SGD keeps no buffers: only its handle is allocated
        opt, own = SGD(parameters, lr=0.0), True
    else:
        raise TypeError("clip_grad_norm_ takes a transformer Module or "
                        "optimizer, not " + type(parameters).__name__)
    try:
        if len(opt._parts) == 1:
            return opt._each(_ll.tfm_optimizer_clip_grad_norm, max_norm,
                             norm_type)[0]
        # several C modules: one global norm, then each part scaled by the
        # same factor (max_norm / (total + 1e-6), as torch)
        norms = opt._each(_ll.tfm_optimizer_clip_grad_norm, math.inf,
                          norm_type)
        if norm_type == math.inf:
            total = max(norms)
        else:
            total = math.fsum(n ** norm_type for n in norms) ** (1 / norm_type)
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            for (mod, h), n in zip(opt._parts, norms):
                with mod._use(), h.use("optimizer") as ptr:
                    _ll.tfm_optimizer_clip_grad_norm(ptr, coef * (n + 1e-6),
                                                     norm_type)
        return total
    finally:
        if own:
            opt.close()
