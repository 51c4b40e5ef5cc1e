"""Training mode and gradient memory from Python: Module.train / eval /
training / zero_grad / grad / named_grads, as torch.nn.Module's
(module.training, train(mode), eval(), zero_grad(), p.grad).

What torch does and these tests expect of ours:
  * a new module is in evaluation mode here (torch starts in training
    mode, but ours has no dropout yet in forward, so evaluation mode is the
    default that keeps today's forward);
  * train() returns the module, sets every sub-module's mode;
  * after train() every gradient exists, has the parameter's shape and is
    zero (torch's p.grad after zero_grad(set_to_none=False));
  * the gradient of a sub-module is its parent's memory, as its
    parameters are (layer.linear1.grad("weight") is
    layer.grad("linear1.weight")).
"""

import numpy as np
import pytest
import torch

import transformer


def test_modes_and_zero_gradients():
    layer = transformer.TransformerEncoderLayer(8, 2, dim_feedforward=16,
                                                batch_first=True)
    assert layer.training is False
    with pytest.raises(transformer.InvalidArgumentError):
        layer.grad("linear1.weight")
    assert layer.train() is layer
    assert layer.training is True
    assert layer.linear1.training is True
    ref = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16,
                                           batch_first=True)
    grads = layer.named_grads()
    assert list(grads) == [n for n, _ in ref.named_parameters()]
    for name, p in ref.named_parameters():
        assert grads[name].shape == tuple(p.shape), name
        assert grads[name].dtype == np.float32
        assert not grads[name].any(), name
    assert layer.eval() is layer
    assert layer.training is False
    assert layer.self_attn.training is False


def test_unknown_name_and_backward_before_a_call():
    lin = transformer.Linear(3, 2).train()
    assert lin.grad("weight").shape == (2, 3)
    with pytest.raises(transformer.NotFoundError):
        lin.grad("nope")
    with pytest.raises(transformer.InvalidArgumentError):
        lin.backward(np.zeros((1, 2), np.float32))   # no call to differentiate


def test_sub_module_mode_follows_parent_and_child_alone():
    model = transformer.TransformerEncoderLayer(8, 2, dim_feedforward=16,
                                                batch_first=True)
    model.linear1.train()
    assert model.linear1.training is True
    assert model.training is False          # not every part is training
    assert not model.grad("linear1.weight").any()
    with pytest.raises(transformer.InvalidArgumentError):
        model.grad("norm1.weight")
    model.train()
    assert model.grad("norm1.weight").shape == (8,)
