"""Learning-rate schedulers with torch.optim.lr_scheduler's stepping
convention: construction sets the lr for step 0 (last_epoch 0), and each
``step()`` after ``optimizer.step()`` moves to the next one; lr =
base_lr * factor(last_epoch), base_lr being the optimizer's lr when the
scheduler was made (kept as param_groups[0]["initial_lr"]).

InverseSqrtWarmup and WarmupCosine are LambdaLR with the factors of
training.h (tfm_lr_inverse_sqrt_warmup, tfm_lr_warmup_cosine), so the
Python, Lua and C schedules give the same lr at every step.
"""


from .. import _lowlevel as _ll
from .._core import as_float, as_int
from .._errors import UnsupportedError

__all__ = ["LambdaLR", "InverseSqrtWarmup", "WarmupCosine",
           "get_cosine_schedule_with_warmup"]


class LambdaLR:
    """torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda,
    last_epoch=-1): lr = initial_lr * lr_lambda(last_epoch).
    last_epoch=-1 starts from the optimizer's lr; another value resumes,
    which needs param_groups[0]["initial_lr"] (as torch)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose=False):
        del verbose
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != 1:
                raise ValueError(f"Expected 1 lr_lambdas, but got "
                                 f"{len(lr_lambda)}")
            lr_lambda = lr_lambda[0]
        if not callable(lr_lambda):
            raise TypeError("lr_lambda must be callable")
        self.optimizer = optimizer
        self.lr_lambda = lr_lambda
        group = optimizer.param_groups[0]
        last_epoch = as_int(last_epoch, "last_epoch", minimum=-1)
        if last_epoch == -1:
            group["initial_lr"] = group["lr"]
        elif "initial_lr" not in group:
            raise KeyError("param 'initial_lr' is not specified in "
                           "param_groups[0] when resuming an optimizer")
        self.base_lrs = [group["initial_lr"]]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self):
        """The lr for the current last_epoch."""
        return [base * float(self.lr_lambda(self.last_epoch))
                for base in self.base_lrs]

    def step(self, epoch=None):
        """Moves to the next step (or to ``epoch``) and sets the lr."""
        self.last_epoch = (self.last_epoch + 1 if epoch is None
                           else as_int(epoch, "epoch", minimum=0))
        lr = self.get_lr()[0]
        self.optimizer.param_groups[0]["lr"] = lr
        self._last_lr = [self.optimizer.param_groups[0]["lr"]]

    def get_last_lr(self):
        """[the lr the last step() set], as torch."""
        return list(self._last_lr)

    def state_dict(self):
        """Everything but the optimizer and the lambda (as torch)."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("optimizer", "lr_lambda")}

    def load_state_dict(self, state_dict):
        """Restores what state_dict() returned."""
        self.__dict__.update(state_dict)


class InverseSqrtWarmup(LambdaLR):
    """"Attention Is All You Need" (Vaswani et al. 2017, section 5.3):
    factor = d_model^-0.5 * min(n^-0.5, n * warmup_steps^-1.5), n =
    max(last_epoch, 1).  The paper's lr is the factor itself: give the
    optimizer lr=1 (scale it to multiply the schedule)."""

    def __init__(self, optimizer, d_model, warmup_steps=4000, last_epoch=-1):
        self.d_model = as_int(d_model, "d_model")
        self.warmup_steps = as_int(warmup_steps, "warmup_steps")
        # argument errors now, not at the first step
        _ll.tfm_lr_inverse_sqrt_warmup(0, self.d_model, self.warmup_steps)
        super().__init__(optimizer, self._factor, last_epoch)

    def _factor(self, s):
        return _ll.tfm_lr_inverse_sqrt_warmup(s, self.d_model,
                                              self.warmup_steps)


class WarmupCosine(LambdaLR):
    """Linear warm-up from 0 over warmup_steps, then cosine decay to
    min_factor * base lr at total_steps (held after): Hugging Face's
    get_cosine_schedule_with_warmup with num_cycles 0.5, floored at
    min_factor (tfm_lr_warmup_cosine)."""

    def __init__(self, optimizer, warmup_steps, total_steps, min_factor=0.0,
                 last_epoch=-1):
        self.warmup_steps = as_int(warmup_steps, "warmup_steps")
        self.total_steps = as_int(total_steps, "total_steps")
        self.min_factor = as_float(min_factor, "min_factor")
        _ll.tfm_lr_warmup_cosine(0, self.warmup_steps, self.total_steps,
                                 self.min_factor)
        super().__init__(optimizer, self._factor, last_epoch)

    def _factor(self, s):
        return _ll.tfm_lr_warmup_cosine(s, self.warmup_steps,
                                        self.total_steps, self.min_factor)


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps,
                                    num_training_steps, num_cycles=0.5,
                                    last_epoch=-1):
    """Hugging Face's function of that name (a WarmupCosine, min_factor 0).
    Only num_cycles=0.5 (half a cosine, HF's default) is supported: other
    values raise UnsupportedError.  Note HF's schedule keeps decaying
    past num_training_steps (cosine rises again); this one holds 0."""
    if as_float(num_cycles, "num_cycles") != 0.5:
        raise UnsupportedError("get_cosine_schedule_with_warmup: only "
                               "num_cycles=0.5 is supported")
    return WarmupCosine(optimizer, num_warmup_steps, num_training_steps,
                        0.0, last_epoch)


