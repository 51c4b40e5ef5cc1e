"""transformer.optim and transformer.optim.lr_scheduler against torch.optim
(torch 1.13).  Each step our module's backward gives the gradients; the
same gradients are copied into torch's .grad, both optimizers step, and
every parameter must agree within 1e-6 relative (to the largest magnitude
of the parameter; float32 updates), the state too.  Schedules are
compared with torch's LambdaLR driven by the formulas written here from
the papers, and with those formulas in float64."""

import math

import numpy as np
import pytest
import torch

import transformer
from transformer.nn.utils import clip_grad_norm_
from transformer.optim import SGD, Adam, AdamW
from transformer.optim.lr_scheduler import (InverseSqrtWarmup, LambdaLR,
                                            WarmupCosine,
                                            get_cosine_schedule_with_warmup)

RTOL = 1e-6

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                  amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.5, amsgrad=True, maximize=True)),
]


def close(ours, ref, what):
    ref = ref.detach().numpy().astype(np.float64)
    err = np.max(np.abs(np.asarray(ours, np.float64) - ref))
    scale = max(np.max(np.abs(ref)), 1e-30)
    assert err <= RTOL * scale, f"{what}: {err / scale:.3g} relative"


def make_pair(kind):
    torch.manual_seed(0)
    if kind == "mha":
        ref = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        ours = transformer.MultiheadAttention(8, 2, batch_first=True)
    else:
        ref = torch.nn.Linear(6, 5)
        ours = transformer.Linear(6, 5)
    ours.load_state_dict(ref.state_dict())
    return ours.train(), ref


def backward(ours, kind, rng):
    if kind == "mha":
        x = rng.standard_normal((2, 4, 8)).astype(np.float32)
        out, _ = ours(x, x, x, need_weights=False)
        ours.backward(rng.standard_normal(out.shape).astype(np.float32))
    else:
        x = rng.standard_normal((3, 6)).astype(np.float32)
        out = ours(x)
        ours.backward(rng.standard_normal(out.shape).astype(np.float32))


def copy_grads(ours, ref):
    grads = ours.named_grads()
    for name, p in ref.named_parameters():
        p.grad = torch.from_numpy(grads[name].copy())


def steps_agree(ours, ref, opt, topt, kind, rng, steps, accumulate_at=None):
    """`steps` steps of both optimizers from our gradients (accumulated
    twice at step accumulate_at); every parameter agrees after each."""
    for step in range(steps):
        opt.zero_grad()
        backward(ours, kind, rng)
        if step == accumulate_at:
            backward(ours, kind, rng)
        copy_grads(ours, ref)
        opt.step()
        topt.step()
        params = ours.state_dict()
        for pname, p in ref.named_parameters():
            close(params[pname], p, f"step {step} {pname}")


@pytest.mark.parametrize("kind", ["linear", "mha"])
@pytest.mark.parametrize("name,kw", CONFIGS)
def test_matches_torch(kind, name, kw):
    ours, ref = make_pair(kind)
    opt = getattr(transformer.optim, name)(ours, **kw)
    topt = getattr(torch.optim, name)(ref.parameters(), **(
        {"lr": 1e-3, **kw} if name == "SGD" else kw))
    rng = np.random.default_rng(1)
    steps_agree(ours, ref, opt, topt, kind, rng, 6, accumulate_at=2)
    state = opt.state_dict()["state"]
    for (pname, p) in ref.named_parameters():
        tstate = {k: v for k, v in topt.state[p].items() if v is not None}
        for key, value in tstate.items():
            if torch.is_tensor(value) and value.dim() == 0:
                assert float(state[pname][key]) == float(value), key
            else:
                close(state[pname][key], value, f"{pname}.{key}")
        # torch 1.13's SGD keeps no step count; ours does (C "step")
        extra = {"step"} if name == "SGD" else set()
        assert set(state[pname]) == set(tstate) | extra


def test_defaults_and_param_groups():
    lin = transformer.Linear(3, 2).train()
    tlin = torch.nn.Linear(3, 2)
    for name in ("Adam", "AdamW"):
        ours = getattr(transformer.optim, name)(lin).param_groups[0]
        ref = getattr(torch.optim, name)(tlin.parameters()).param_groups[0]
        for k in ("lr", "betas", "eps", "weight_decay", "amsgrad",
                  "maximize"):
            assert ours[k] == ref[k], (name, k)
    sgd = SGD(lin, lr=0.5)
    assert sgd.param_groups[0]["lr"] == 0.5
    sgd.param_groups[0]["lr"] = 0.25
    assert sgd.param_groups[0]["lr"] == 0.25
    assert sgd.state_dict()["param_groups"][0]["lr"] == 0.25
    assert sgd.param_groups[0]["params"] == ["weight", "bias"]
    with pytest.raises(transformer.UnsupportedError):
        sgd.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ValueError):
        sgd.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError):            # torch: ValueError as well
        SGD(lin, lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        Adam(lin, betas=(1.0, 0.999))
    with pytest.raises(TypeError):
        Adam(lin.parameters())


def test_lr_change_reaches_the_step():
    # SGD, lr set between steps: p -= lr g with the new lr.
    ours, ref = make_pair("linear")
    opt = SGD(ours, lr=1.0)
    backward(ours, "linear", np.random.default_rng(3))
    before = ours.state_dict()["weight"].astype(np.float64)
    g = ours.grad("weight").astype(np.float64)
    opt.param_groups[0]["lr"] = 0.125
    opt.step()
    np.testing.assert_allclose(ours.state_dict()["weight"], before - 0.125 * g,
                               rtol=1e-6, atol=1e-7)


def test_non_finite_gradient_changes_nothing():
    ours, _ = make_pair("linear")
    opt = Adam(ours)
    ours(np.full((1, 6), np.nan, np.float32))
    ours.backward(np.ones((1, 5), np.float32))
    before = ours.state_dict()
    with pytest.raises(transformer.NonFiniteError):
        opt.step()
    with pytest.raises(transformer.NonFiniteError):
        clip_grad_norm_(opt, 1.0)
    for k, v in ours.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    assert float(opt.state["weight"]["step"]) == 0.0


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("through", ["module", "optimizer"])
def test_clip_grad_norm(norm_type, max_norm, through):
    ours, ref = make_pair("mha")
    opt = AdamW(ours)
    backward(ours, "mha", np.random.default_rng(5))
    copy_grads(ours, ref)
    total = clip_grad_norm_(ours if through == "module" else opt, max_norm,
                            norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm,
                                            norm_type)
    assert math.isclose(total, float(ttotal), rel_tol=1e-6)
    grads = ours.named_grads()
    for name, p in ref.named_parameters():
        close(grads[name], p.grad, name)


def test_state_dict_round_trip():
    ours, _ = make_pair("linear")
    opt = Adam(ours, lr=0.01, amsgrad=True)
    rng = np.random.default_rng(2)
    for _ in range(3):
        opt.zero_grad()
        backward(ours, "linear", rng)
        opt.step()
    saved = opt.state_dict()
    other, _ = make_pair("linear")
    other.load_state_dict(ours.state_dict())
    opt2 = Adam(other, lr=0.5, amsgrad=True)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 0.01
    opt.zero_grad()
    opt2.zero_grad()
    backward(ours, "linear", np.random.default_rng(9))
    backward(other, "linear", np.random.default_rng(9))
    opt.step()
    opt2.step()
    for k, v in ours.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[k], v)
    bad = opt.state_dict()
    bad["state"]["bias"]["exp_avg"] = np.zeros(4, np.float32)
    before = opt2.state_dict()
    with pytest.raises(ValueError):
        opt2.load_state_dict(bad)
    after = opt2.state_dict()
    for k in ("exp_avg", "exp_avg_sq", "step"):
        np.testing.assert_array_equal(after["state"]["weight"][k],
                                      before["state"]["weight"][k])


def test_load_state_dict_refused_late_changes_nothing():
    """A state the C layer refuses (a negative second moment, a step past
    2**53) in a parameter after the first: nothing written, the first
    parameter's states included (issue 44 kind 8: they used to be written
    before the refusal)."""
    lin = transformer.Linear(3, 2).train()
    opt = Adam(lin, lr=1e-3)
    y = lin(np.ones((1, 3), np.float32))
    lin.backward(np.ones_like(y))
    opt.step()
    before = opt.state_dict()
    for state, value in (("exp_avg_sq", np.full(2, -1.0, np.float32)),
                         ("step", np.float32(2.0 ** 60))):
        bad = opt.state_dict()
        bad["state"]["weight"]["exp_avg"] = np.full((2, 3), 7.0, np.float32)
        bad["state"]["bias"][state] = value
        with pytest.raises(ValueError):
            opt.load_state_dict(bad)
        after = opt.state_dict()
        for name in ("weight", "bias"):
            for k, v in before["state"][name].items():
                np.testing.assert_array_equal(after["state"][name][k], v)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_load_state_dict_applies_lr_and_weight_decay(name):
    """Issue 44 follow-up: param_groups' weight_decay was ignored by
    load_state_dict; torch 1.13 applies the loaded group (lr and
    weight_decay here), so both optimizers, given the same state dict,
    step to the same parameters."""
    kw = dict(lr=0.01, weight_decay=0.01)
    if name == "SGD":
        kw["momentum"] = 0.9
    ours, ref = make_pair("linear")
    opt = getattr(transformer.optim, name)(ours, **kw)
    topt = getattr(torch.optim, name)(ref.parameters(), **kw)
    rng = np.random.default_rng(4)
    steps_agree(ours, ref, opt, topt, "linear", rng, 2)
    sd, tsd = opt.state_dict(), topt.state_dict()
    for group in (sd["param_groups"][0], tsd["param_groups"][0]):
        group["lr"], group["weight_decay"] = 0.05, 0.3
    opt.load_state_dict(sd)
    topt.load_state_dict(tsd)
    assert opt.param_groups[0]["weight_decay"] == 0.3
    assert opt.param_groups[0]["lr"] == 0.05
    assert opt.state_dict()["param_groups"][0]["weight_decay"] == 0.3
    steps_agree(ours, ref, opt, topt, "linear", rng, 3)


@pytest.mark.parametrize("name,key,value", [
    ("AdamW", "betas", (2.0, 2.0)),           # torch's constructor: < 1
    ("AdamW", "betas", (float("nan"), 0.999)),
    ("AdamW", "betas", (0.8, 0.999)),         # valid, but not ours
    ("AdamW", "eps", float("nan")),
    ("AdamW", "eps", -1e-8),
    ("AdamW", "eps", 1e-6),
    ("AdamW", "amsgrad", True),
    ("AdamW", "amsgrad", 2),
    ("AdamW", "maximize", True),
    ("AdamW", "weight_decay", -0.1),
    ("AdamW", "weight_decay", float("nan")),
    ("AdamW", "lr", -1.0),
    ("AdamW", "lr", float("inf")),
    ("SGD", "momentum", 0.5),
    ("SGD", "nesterov", True),
    ("SGD", "dampening", float("nan")),
])
def test_load_state_dict_refused_group_changes_nothing(name, key, value):
    """A param_groups value that cannot be applied (a hyperparameter fixed
    at construction, different from this optimizer's) or is out of the
    range torch's constructors allow raises ValueError naming the key,
    before anything is written: the state, lr and weight_decay loaded
    beside it stay as they were (they used to be accepted and ignored)."""
    kw = dict(lr=0.01, momentum=0.9) if name == "SGD" else dict(lr=0.01)
    ours, _ = make_pair("linear")
    opt = getattr(transformer.optim, name)(ours, **kw)
    backward(ours, "linear", np.random.default_rng(6))
    opt.step()
    before = opt.state_dict()
    bad = opt.state_dict()
    bad["state"]["weight"] = {k: np.full_like(v, 0.5) if v.ndim else v
                              for k, v in bad["state"]["weight"].items()}
    group = bad["param_groups"][0]
    group["lr"], group["weight_decay"] = 0.125, 0.25
    group[key] = value
    with pytest.raises(ValueError, match=key):
        opt.load_state_dict(bad)
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for pname, entry in before["state"].items():
        for k, v in entry.items():
            np.testing.assert_array_equal(after["state"][pname][k], v)
    # the C weight decay too: the next step is the unchanged optimizer's
    twin, _ = make_pair("linear")
    twin.load_state_dict(ours.state_dict())
    topt = getattr(transformer.optim, name)(twin, **kw)
    topt.load_state_dict(before)
    for m, o in ((ours, opt), (twin, topt)):
        o.zero_grad()
        backward(m, "linear", np.random.default_rng(7))
        o.step()
    for k, v in ours.state_dict().items():
        np.testing.assert_array_equal(twin.state_dict()[k], v)


def test_load_state_dict_same_hyperparameters_and_extra_keys():
    """Equal fixed hyperparameters load (a list for betas, as JSON gives
    them); keys that are no hyperparameter (torch's foreach, a scheduler's
    initial_lr) are stored in the group, as torch stores them."""
    ours, _ = make_pair("linear")
    opt = Adam(ours, lr=0.01, betas=(0.8, 0.99), amsgrad=True)
    sd = opt.state_dict()
    sd["param_groups"][0].update(betas=[0.8, 0.99], foreach=None,
                                 initial_lr=0.02)
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["betas"] == (0.8, 0.99)
    assert opt.param_groups[0]["foreach"] is None
    assert opt.param_groups[0]["initial_lr"] == 0.02


# ---- schedulers --------------------------------------------------------------

def inverse_sqrt(s, d_model, warmup):
    """Vaswani et al. 2017, eq. in section 5.3, steps counted from 1."""
    n = max(s, 1)
    return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


def warmup_cosine(s, warmup, total, min_factor=0.0):
    """HF get_cosine_schedule_with_warmup (num_cycles 0.5), floored."""
    if s < warmup:
        return s / max(1, warmup)
    q = min(max((s - warmup) / max(1, total - warmup), 0.0), 1.0)
    return min_factor + (1 - min_factor) * 0.5 * (1 + math.cos(math.pi * q))


def run_both(make_ours, lam, base_lr, steps):
    """The lr before each optimizer step, ours and torch LambdaLR's."""
    lin = transformer.Linear(2, 2).train()
    opt = SGD(lin, lr=base_lr)
    sched = make_ours(opt)
    topt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=base_lr)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, lam)
    ours, ref = [], []
    for _ in range(steps):
        ours.append((opt.param_groups[0]["lr"], sched.get_last_lr()[0]))
        ref.append(tsched.get_last_lr()[0])
        opt.step()
        sched.step()
        topt.step()
        tsched.step()
    return ours, ref


@pytest.mark.parametrize("warmup,total,min_factor",
                         [(3, 10, 0.0), (0, 5, 0.1), (4, 4, 0.0)])
def test_warmup_cosine(warmup, total, min_factor):
    ours, ref = run_both(
        lambda o: WarmupCosine(o, warmup, total, min_factor),
        lambda s: warmup_cosine(s, warmup, total, min_factor), 0.3, 14)
    for s, ((lr, last), r) in enumerate(zip(ours, ref)):
        assert lr == last
        assert math.isclose(lr, r, rel_tol=1e-12, abs_tol=1e-15), s
    if min_factor == 0.0:
        hf, _ = run_both(lambda o: get_cosine_schedule_with_warmup(
            o, warmup, total), lambda s: 0.0, 0.3, 14)
        assert hf == ours


def test_inverse_sqrt_warmup():
    ours, ref = run_both(lambda o: InverseSqrtWarmup(o, 512, 4),
                         lambda s: inverse_sqrt(s, 512, 4), 1.0, 12)
    for s, ((lr, _), r) in enumerate(zip(ours, ref)):
        assert math.isclose(lr, r, rel_tol=1e-12), s
    # the peak is at warmup: d^-0.5 warmup^-0.5
    assert math.isclose(max(lr for lr, _ in ours), (512 * 4) ** -0.5,
                        rel_tol=1e-12)


def test_lambda_lr_and_resume():
    lam = lambda s: 0.9 ** s   # noqa: E731
    ours, ref = run_both(lambda o: LambdaLR(o, lam), lam, 0.2, 6)
    assert [lr for lr, _ in ours] == ref
    lin = transformer.Linear(2, 2).train()
    opt = SGD(lin, lr=0.2)
    sched = LambdaLR(opt, lam)
    for _ in range(3):
        sched.step()
    opt2 = SGD(lin, lr=0.7)
    opt2.param_groups[0]["initial_lr"] = 0.2
    resumed = LambdaLR(opt2, lam, last_epoch=2)
    assert resumed.get_last_lr() == sched.get_last_lr()
    with pytest.raises(KeyError):
        LambdaLR(SGD(lin), lam, last_epoch=3)
    with pytest.raises(ValueError):
        WarmupCosine(opt, 5, 3)
    with pytest.raises(transformer.UnsupportedError):
        get_cosine_schedule_with_warmup(opt, 1, 5, num_cycles=1.0)


def test_readme_training_snippet():
    """README's "A training step in Python" runs and its loss falls."""
    import pathlib
    import re
    readme = (pathlib.Path(__file__).resolve().parents[3] /
              "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
              if "transformer.optim" in b]
    assert len(blocks) == 1
    env = {}
    exec(compile(blocks[0].replace("print(", "(lambda *a: None)("),
                 "README.md", "exec"), env)
    # 32 points in 16 dimensions, 4 classes: separable, so the loss must
    # fall well below chance, -log(1/4) = 1.386
    assert env["loss"] < 0.3, env["loss"]
    assert env["sched"].get_last_lr()[0] == 0.0     # cosine end: 0


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_per_parameter_weight_decay_matches_param_groups(name):
    # C tfm_optimizer_set_weight_decay: one parameter's own weight_decay,
    # as a torch param group (nanoGPT's no decay on biases).
    from transformer import _lowlevel as _ll
    ours, ref = make_pair("linear")
    kw = {"lr": 0.05, "weight_decay": 0.3}
    opt = getattr(transformer.optim, name)(ours, **kw)
    opt._each(_ll.tfm_optimizer_set_weight_decay, "bias", 0.0)
    topt = getattr(torch.optim, name)(
        [{"params": [ref.weight]}, {"params": [ref.bias], "weight_decay": 0.0}],
        **kw)
    steps_agree(ours, ref, opt, topt, "linear", np.random.default_rng(5), 4)
    with pytest.raises(transformer.NotFoundError):
        opt._each(_ll.tfm_optimizer_set_weight_decay, "nope", 0.0)
    with pytest.raises(ValueError):
        opt._each(_ll.tfm_optimizer_set_weight_decay, "bias", -1.0)


def test_rng_next_is_splitmix64():
    # tfm_rng_next: SplitMix64 (Steele, Lea and Flood 2014) written here
    # from Vigna's splitmix64.c constants.
    from transformer import _lowlevel as _ll
    M = (1 << 64) - 1
    state = 1234
    rng = _ll.tfm_rng()
    _ll.tfm_rng_seed(rng, 1234)
    for _ in range(5):
        state = (state + 0x9E3779B97F4A7C15) & M
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        z ^= z >> 31
        assert _ll.tfm_rng_next(rng) == z
