"""Embedding.backward against torch.autograd (torch 1.13) of nn.Embedding:
the weight gradient is a scatter-add of grad_output rows by id (repeated
ids accumulate; padding_idx's row gets none).  Float32 sums of a few
terms in the same order: within 1e-6 relative to the largest magnitude."""

import numpy as np
import pytest
import torch

import transformer


def torch_grad(weight, ids, g, padding_idx):
    ref = torch.nn.Embedding(weight.shape[0], weight.shape[1],
                             padding_idx=padding_idx)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(weight))
    out = ref(torch.from_numpy(ids.astype(np.int64)))
    out.backward(torch.from_numpy(g))
    return ref.weight.grad.numpy()


@pytest.mark.parametrize("padding_idx", [None, 3, -1])
@pytest.mark.parametrize("shape", [(7,), (2, 5), (2, 3, 4)])
def test_matches_torch(padding_idx, shape):
    rng = np.random.default_rng(0)
    ours = transformer.Embedding(6, 5, padding_idx=padding_idx).train()
    ids = rng.integers(0, 6, size=shape).astype(np.int64)
    ids.flat[0] = ids.flat[-1] = 3          # repeated, and the padding row
    g = rng.standard_normal(shape + (5,)).astype(np.float32)
    ours(ids)
    ours.backward(g)
    ours(ids)
    ours.backward(g)   # accumulates, as autograd into .grad
    ref = torch_grad(ours.state_dict()["weight"], ids, 2 * g, padding_idx)
    got = ours.grad("weight")
    assert np.max(np.abs(got - ref)) <= 1e-6 * np.max(np.abs(ref))
    if padding_idx is not None:
        assert not np.any(got[padding_idx % 6])
    unused = sorted(set(range(6)) - set(ids.ravel().tolist()))
    assert not np.any(got[unused])


def test_optimizer_step_on_embedding():
    # SGD on the table: only the looked-up rows move.
    emb = transformer.Embedding(4, 3).train()
    before = emb.state_dict()["weight"]
    opt = transformer.optim.SGD(emb, lr=0.5)
    emb(np.array([1, 1, 2]))
    emb.backward(np.ones((3, 3), np.float32))
    opt.step()
    after = emb.state_dict()["weight"]
    np.testing.assert_array_equal(after[[0, 3]], before[[0, 3]])
    np.testing.assert_allclose(after[1], before[1] - 0.5 * 2, rtol=1e-6)
    np.testing.assert_allclose(after[2], before[2] - 0.5 * 1, rtol=1e-6)


def test_errors_change_nothing():
    emb = transformer.Embedding(4, 3)
    with pytest.raises(transformer.InvalidArgumentError):
        emb.backward(np.ones((1, 3), np.float32))   # no training-mode call
    emb.train()
    emb(np.array([0, 2]))
    with pytest.raises(transformer.ShapeError):
        emb.backward(np.ones((3, 3), np.float32))
    g = np.ones((2, 3), np.float32)
    g[1, 1] = np.nan
    with pytest.raises(transformer.NonFiniteError):
        emb.backward(g)
    assert not np.any(emb.grad("weight"))
