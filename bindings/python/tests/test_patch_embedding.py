"""PatchEmbedding (ViT's patches, layers.h: tfm_patch_embedding_create)
against torch.nn.functional.conv2d(kernel = stride = P) in float64, forward
and gradients (input, weight, bias)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import transformer as tfm


def _reference(x, w, b, P):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wt, bt, stride=P)
    return xt, wt, bt, y.flatten(2).transpose(1, 2)


@pytest.mark.parametrize("B,C,H,W,P,d", [(2, 3, 8, 12, 4, 5),
                                         (1, 1, 6, 6, 3, 2),
                                         (3, 2, 4, 8, 2, 7)])
def test_forward_and_backward_match_conv2d(B, C, H, W, P, d):
    rng = np.random.default_rng(B * 100 + P)
    x = rng.standard_normal((B, C, H, W)).astype(np.float32)
    w = rng.standard_normal((d, C, P, P)).astype(np.float32)
    b = rng.standard_normal(d).astype(np.float32)
    pe = tfm.PatchEmbedding(d, C, P)
    pe.load_state_dict({"weight": w, "bias": b})
    pe.train()
    y = pe(x)
    xt, wt, bt, ref = _reference(x, w, b, P)
    assert y.shape == (B, (H // P) * (W // P), d)
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5,
                               atol=1e-5)
    g = rng.standard_normal(y.shape).astype(np.float32)
    ref.backward(torch.tensor(g, dtype=torch.float64))
    gx = pe.backward(g)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pe.grad("weight"), wt.grad.numpy(),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(pe.grad("bias"), bt.grad.numpy(), rtol=1e-5,
                               atol=1e-4)


def test_names_shapes_init_and_errors():
    pe = tfm.PatchEmbedding(8, 3, 4, image_size=16)
    sd = pe.state_dict()
    assert list(sd) == ["weight", "bias"]
    assert sd["weight"].shape == (8, 3, 4, 4) and sd["bias"].shape == (8,)
    # Conv2d's default initialisation: U(+-1/sqrt(C P P)).
    bound = 1 / np.sqrt(3 * 4 * 4)
    assert np.abs(sd["weight"]).max() <= bound
    assert np.abs(sd["weight"]).max() > bound / 2
    assert tfm.PatchEmbedding(8, 3, 4, bias=False).state_dict().keys() == \
        {"weight"}
    with pytest.raises(tfm.ShapeError):
        pe(np.zeros((1, 3, 8, 8), np.float32))  # not image_size
    with pytest.raises(tfm.ShapeError):
        tfm.PatchEmbedding(8, 3, 4)(np.zeros((1, 3, 6, 8), np.float32))
    with pytest.raises(tfm.ShapeError):
        tfm.PatchEmbedding(8, 3, 4)(np.zeros((1, 2, 8, 8), np.float32))
    with pytest.raises(tfm.InvalidArgumentError):
        tfm.PatchEmbedding(8, 3, 4, image_size=10)
