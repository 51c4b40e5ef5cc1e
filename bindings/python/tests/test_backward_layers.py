"""Backward passes of Linear, LayerNorm and the feed-forward network against
torch.autograd (torch 1.13): the same weights, the same input and
grad_output; our grad_input and parameter gradients must equal torch's
x.grad and p.grad (float32 tolerances: 1e-5 relative to the largest
magnitude).  Accumulation: two backward calls give twice the gradient, as
torch accumulates into .grad."""

import numpy as np
import pytest
import torch

import transformer
from grad_check import close, load
from transformer import _lowlevel as _ll


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5), (2, 1, 3, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_autograd(shape, bias):
    torch.manual_seed(0)
    ref = torch.nn.Linear(5, 4, bias=bias)
    ours = transformer.Linear(5, 4, bias=bias)
    load(ours, ref)
    ours.train()
    x = torch.randn(*shape, requires_grad=True)
    g = torch.randn(*shape[:-1], 4)
    ref(x).backward(g)
    y = ours(x.detach().numpy())
    close(y, ref(x))
    gx = ours.backward(g.numpy())
    close(gx, x.grad)
    close(ours.grad("weight"), ref.weight.grad)
    if bias:
        close(ours.grad("bias"), ref.bias.grad)
    # a second backward accumulates: torch's .grad after two backward calls
    ours.backward(g.numpy())
    close(ours.grad("weight"), 2 * ref.weight.grad)


def test_linear_many_rows_threads():
    # rows enough for the threaded split (by rows and by output features)
    torch.manual_seed(1)
    ref = torch.nn.Linear(48, 40)
    ours = transformer.Linear(48, 40)
    load(ours, ref)
    ours.train()
    x = torch.randn(300, 48, requires_grad=True)
    g = torch.randn(300, 40)
    ref(x).backward(g)
    ours(x.detach().numpy())
    close(ours.backward(g.numpy()), x.grad)
    close(ours.grad("weight"), ref.weight.grad)
    close(ours.grad("bias"), ref.bias.grad)


@pytest.mark.parametrize("shape,norm", [((4, 6), (6,)), ((2, 3, 8), (8,)),
                                        ((2, 3, 4), (3, 4))])
def test_layer_norm_matches_autograd(shape, norm):
    torch.manual_seed(2)
    ref = torch.nn.LayerNorm(norm, eps=1e-5)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = transformer.LayerNorm(norm, eps=1e-5)
    load(ours, ref)
    ours.train()
    x = (torch.randn(*shape) * 3 + 5).requires_grad_()
    g = torch.randn(*shape)
    ref(x).backward(g)
    close(ours(x.detach().numpy()), ref(x))
    close(ours.backward(g.numpy()), x.grad)
    close(ours.grad("weight"), ref.weight.grad)
    close(ours.grad("bias"), ref.bias.grad)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
def test_feed_forward_matches_autograd(activation):
    # the layer's feed-forward network through the C function on the
    # encoder layer's linear1/linear2 weights: torch's
    # linear2(act(linear1(x))) with the same weights.
    torch.manual_seed(3)
    d, dff = 8, 16
    l1, l2 = torch.nn.Linear(d, dff), torch.nn.Linear(dff, d)
    act = {"relu": torch.nn.functional.relu,
           "gelu": torch.nn.functional.gelu,
           "gelu_tanh": lambda t: torch.nn.functional.gelu(
               t, approximate="tanh"),
           "silu": torch.nn.functional.silu}[activation]
    kind = {"relu": _ll.TFM_ACTIVATION_RELU,
            "gelu": _ll.TFM_ACTIVATION_GELU,
            "gelu_tanh": _ll.TFM_ACTIVATION_GELU_TANH,
            "silu": _ll.TFM_ACTIVATION_SILU}[activation]
    ff = _ll.tfm_feed_forward_create(d, dff, kind)
    try:
        for name, t in [("linear1.weight", l1.weight), ("linear1.bias", l1.bias),
                        ("linear2.weight", l2.weight), ("linear2.bias", l2.bias)]:
            _ll.tfm_module_set_parameter(ff, name, np.ascontiguousarray(
                t.detach().numpy()))
        _ll.tfm_module_train(ff, 1)
        x = torch.randn(2, 5, d)
        x[0, 0, :3] = 0.0           # ReLU's kink: torch's derivative is 0
        x.requires_grad_()
        g = torch.randn(2, 5, d)
        y_ref = l2(act(l1(x)))
        y_ref.backward(g)
        xn = np.ascontiguousarray(x.detach().numpy())
        y = np.empty_like(xn)
        _ll.tfm_feed_forward_forward(ff, xn, y)
        close(y, y_ref)
        gx = np.empty_like(xn)
        _ll.tfm_feed_forward_backward(ff, xn, g.numpy(), gx)
        close(gx, x.grad)
        for name, t in [("linear1.weight", l1.weight), ("linear1.bias", l1.bias),
                        ("linear2.weight", l2.weight), ("linear2.bias", l2.bias)]:
            shape = tuple(t.shape)
            out = np.empty(shape, np.float32)
            _ll.tfm_module_get_grad(ff, name, out)
            close(out, t.grad)
        # grad_input NULL: only the parameter gradients (accumulated again)
        _ll.tfm_feed_forward_backward(ff, xn, g.numpy(), None)
        out = np.empty((d, dff), np.float32)
        _ll.tfm_module_get_grad(ff, "linear2.weight", out)
        close(out, 2 * l2.weight.grad)
    finally:
        _ll.tfm_module_free(ff)


def test_errors_leave_gradients_unchanged():
    lin = transformer.Linear(3, 2)
    lin(np.ones((1, 3), np.float32))
    with pytest.raises(transformer.InvalidArgumentError):
        lin.backward(np.ones((1, 2), np.float32))    # never trained
    lin.train()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    lin(x)
    before = lin.grad("weight")
    with pytest.raises(transformer.NonFiniteError):
        lin.backward(np.array([[1.0, np.nan], [0.0, 0.0]], np.float32))
    with pytest.raises(transformer.ShapeError):
        lin.backward(np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(lin.grad("weight"), before)
    # hand-worked: weight.grad = g^T x with g = ones [2, 2]:
    # each row is the column sums of x = (0 + 3, 1 + 4, 2 + 5)
    lin.backward(np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(lin.grad("weight"),
                                  [[3, 5, 7], [3, 5, 7]])
    np.testing.assert_array_equal(lin.grad("bias"), [2, 2])


def test_backward_without_bias():
    """bias=False parts (tfm_layer_norm_create_v2 / tfm_feed_forward_create_v2
    with bias 0) against torch's bias-free modules: nn.LayerNorm whose bias
    is re-registered as None (torch 2.x's LayerNorm(bias=False); F.layer_norm
    with bias None) and nn.Linear(bias=False)."""
    torch.manual_seed(4)
    ref = torch.nn.LayerNorm(6)
    ref.register_parameter("bias", None)
    with torch.no_grad():
        ref.weight.normal_()
    ours = transformer.LayerNorm(6, bias=False)
    load(ours, ref)
    ours.train()
    x = (torch.randn(3, 6) * 2 + 1).requires_grad_()
    g = torch.randn(3, 6)
    ref(x).backward(g)
    close(ours(x.detach().numpy()), ref(x))
    close(ours.backward(g.numpy()), x.grad)
    close(ours.grad("weight"), ref.weight.grad)
    assert list(ours.named_grads()) == ["weight"]

    d, dff = 8, 16
    l1 = torch.nn.Linear(d, dff, bias=False)
    l2 = torch.nn.Linear(dff, d, bias=False)
    ff = _ll.tfm_feed_forward_create_v2(d, dff, _ll.TFM_ACTIVATION_SILU, 0)
    try:
        assert _ll.tfm_module_parameter_count(ff) == 2
        for name, t in [("linear1.weight", l1.weight),
                        ("linear2.weight", l2.weight)]:
            _ll.tfm_module_set_parameter(ff, name, np.ascontiguousarray(
                t.detach().numpy()))
        _ll.tfm_module_train(ff, 1)
        x = torch.randn(2, 5, d, requires_grad=True)
        g = torch.randn(2, 5, d)
        y_ref = l2(torch.nn.functional.silu(l1(x)))
        y_ref.backward(g)
        xn = np.ascontiguousarray(x.detach().numpy())
        y = np.empty_like(xn)
        _ll.tfm_feed_forward_forward(ff, xn, y)
        close(y, y_ref)
        gx = np.empty_like(xn)
        _ll.tfm_feed_forward_backward(ff, xn, g.numpy(), gx)
        close(gx, x.grad)
        for name, t in [("linear1.weight", l1.weight),
                        ("linear2.weight", l2.weight)]:
            out = np.empty(tuple(t.shape), np.float32)
            _ll.tfm_module_get_grad(ff, name, out)
            close(out, t.grad)
    finally:
        _ll.tfm_module_free(ff)
