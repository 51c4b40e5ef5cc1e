"""transformer.cross_entropy / cross_entropy_backward against
torch.nn.functional.cross_entropy (PyTorch 1.13) in float64 on the same
float32 inputs: [N, C], [C], torch's [N, C, d1] layout, ignore_index with
label smoothing, mean and sum; within 1e-6 relative."""
import numpy as np
import pytest

import transformer

torch = pytest.importorskip("torch")
F = torch.nn.functional


def reference(x, t, **kw):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    loss = F.cross_entropy(xt, torch.tensor(t), **kw)
    loss.backward()
    return loss.item(), xt.grad.numpy()


@pytest.mark.parametrize("shape", [(7, 5), (3, 11, 4), (2, 6, 3, 2), (9,)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_equals_torch(shape, reduction, smoothing):
    rng = np.random.default_rng(len(shape) * 100 + int(smoothing * 10))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    C = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    t = rng.integers(0, C, tshape)
    if t.ndim:
        t[rng.random(tshape) < 0.3] = -100
    t[(0,) * t.ndim] = 1              # at least one target kept
    kw = dict(ignore_index=-100, reduction=reduction,
              label_smoothing=smoothing)
    want, want_grad = reference(x, t, **kw)
    got = transformer.cross_entropy(x, t, **kw)
    loss, grad = transformer.cross_entropy_backward(x, t, **kw)
    assert isinstance(got, float) and got == loss
    assert abs(got - want) <= 1e-6 * abs(want)
    assert grad.shape == x.shape
    assert np.max(np.abs(grad - want_grad)) <= 1e-6 * np.max(np.abs(want_grad))


def test_ignore_index_a_class_and_torch_tensors():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    t = rng.integers(0, 6, 8)
    want, _ = reference(x, t, ignore_index=2, label_smoothing=0.2)
    got = transformer.cross_entropy(torch.tensor(x), torch.tensor(t),
                                    ignore_index=2, label_smoothing=0.2)
    assert abs(got - want) <= 1e-6 * abs(want)


def test_errors():
    x = np.zeros((4, 3), np.float32)
    with pytest.raises(transformer.ShapeError):
        transformer.cross_entropy(x, np.zeros(5, np.int64))
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.cross_entropy(x, np.array([0, 1, 2, 3]))   # 3 >= C
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.cross_entropy(x, np.zeros(4, np.int64), reduction="none")
    with pytest.raises(transformer.UnsupportedError):
        transformer.cross_entropy(x, np.zeros(4, np.int64), weight=np.ones(3))
    x[1, 2] = np.nan
    with pytest.raises(transformer.NonFiniteError):
        transformer.cross_entropy(x, np.zeros(4, np.int64))
    # every target ignored: 0 (torch: nan), a zero gradient
    loss, grad = transformer.cross_entropy_backward(
        np.ones((2, 3), np.float32), np.array([-100, -100]))
    assert loss == 0.0 and not grad.any()
