"""TransformerEncoderLayer.backward against torch.autograd (torch 1.13):
nn.TransformerEncoderLayer(dropout=0.0, batch_first=True) with the same
weights, input and grad_output; the gradient of src and of every parameter
by name must equal torch's within 1e-4 of the largest magnitude."""

import numpy as np
import pytest
import torch

import transformer
from grad_check import close, load

SHAPES = [(2, 5, 8, 2, 16), (1, 7, 12, 3, 20), (3, 4, 16, 4, 8)]


def _masks(kind, n, length):
    if kind == "none":
        return None, None
    if kind == "causal":
        return torch.triu(torch.full((length, length), float("-inf")),
                          diagonal=1), None
    pad = torch.zeros(n, length, dtype=torch.bool)
    pad[0, -2:] = True
    return None, pad


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask", ["none", "causal", "padding"])
def test_encoder_layer_matches_autograd(shape, norm_first, activation, mask):
    n, length, d, heads, d_ff = shape
    torch.manual_seed(3)
    ref = torch.nn.TransformerEncoderLayer(
        d, heads, d_ff, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first)
    ours = transformer.TransformerEncoderLayer(
        d, heads, d_ff, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first)
    load(ours, ref)
    ours.train()
    x = torch.randn(n, length, d, requires_grad=True)
    g = torch.randn(n, length, d)
    attn_mask, pad = _masks(mask, n, length)
    y_ref = ref(x, src_mask=attn_mask, src_key_padding_mask=pad)
    y_ref.backward(g)
    y = ours(x.detach().numpy(),
             src_mask=None if attn_mask is None else attn_mask.numpy(),
             src_key_padding_mask=None if pad is None else pad.numpy())
    close(y, y_ref, 1e-4)
    close(ours.backward(g.numpy()), x.grad, 1e-4)
    for name, p in ref.named_parameters():
        close(ours.grad(name), p.grad, 1e-4)


def test_encoder_layer_backward_accumulates():
    torch.manual_seed(4)
    ref = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                           batch_first=True)
    ours = transformer.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                               batch_first=True)
    load(ours, ref)
    ours.train()
    x = torch.randn(2, 3, 8, requires_grad=True)
    g = torch.randn(2, 3, 8)
    ref(x).backward(g)
    ours(x.detach().numpy())
    ours.backward(g.numpy())
    ours.backward(g.numpy())
    close(ours.grad("linear1.weight"), 2 * ref.linear1.weight.grad, 1e-4)
    close(ours.grad("self_attn.in_proj_weight"),
          2 * ref.self_attn.in_proj_weight.grad, 1e-4)
    with pytest.raises(transformer.ShapeError):
        ours.backward(np.zeros((2, 4, 8), np.float32))
