"""Shared helpers: PyTorch references in float64, relative errors, paths.

Run from the build tree (ctest -R python), or by hand:
    PYTHONPATH=<build>/bindings/python /usr/bin/python3 -m pytest -q \
        bindings/python/tests
"""

import copy
import os
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import transformer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[3]
TEST_MODELS = REPO / "tests" / "models"

# max |ours - ref| / max |ref|, as the C fixtures (tests/test_fixtures.c).
REL_TOLERANCE = 1e-5

torch.set_num_threads(1)


def rel_err(ours, ref):
    ours = np.asarray(ours, np.float64)
    ref = np.asarray(ref.detach().numpy() if hasattr(ref, "detach") else ref,
                     np.float64)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    assert np.isfinite(ref).all(), "reference has NaN/inf"
    scale = np.max(np.abs(ref)) if ref.size else 0.0
    diff = np.max(np.abs(ours - ref)) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


def assert_close(ours, ref, tol=REL_TOLERANCE):
    err = rel_err(ours, ref)
    assert err <= tol, f"relative error {err:.3e} > {tol:.0e}"


def randomize(module, seed=0):
    """Random float32 parameters (LayerNorm scales near 1), so that every
    weight and bias matters; returns the module, in training mode with
    dropout 0 (no PyTorch fast paths)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or ("norm" in name and
                                                 name.endswith("weight")):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.rand(p.shape, generator=g) - 0.5)
    return module.train()


def ref64(module):
    """A float64 copy of a torch module, for the reference."""
    return copy.deepcopy(module).double().train()


def t64(x):
    """numpy -> float64 torch tensor (None stays None; bool stays bool)."""
    if x is None:
        return None
    x = np.asarray(x)
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t if x.dtype == np.bool_ else t.double()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def rand(rng, *shape):
    return (rng.standard_normal(shape)).astype(np.float32)


def model_path_or_skip():
    """The shipped model ($TRANSFORMER_MODEL, as ctest sets it), or skip."""
    path = os.environ.get("TRANSFORMER_MODEL")
    if not path:
        pytest.skip("TRANSFORMER_MODEL is not set")
    if not os.path.isfile(path):
        pytest.skip(f"shipped model not built yet: {path} is absent")
    return path
