"""TransformerDecoderLayer.backward against torch.autograd (torch 1.13):
nn.TransformerDecoderLayer(dropout=0.0, batch_first=True) with the same
weights, inputs and grad_output; the gradients of tgt, of memory and of
every parameter by name must equal torch's within 1e-4 of the largest
magnitude."""

import numpy as np
import pytest
import torch

import transformer
from grad_check import close, load

# (batch, target length, memory length, d_model, heads, d_ff)
SHAPES = [(2, 5, 3, 8, 2, 16), (1, 4, 7, 12, 3, 20), (3, 6, 6, 16, 4, 8)]


def _masks(kind, n, length, src_length):
    """(tgt_mask, memory_mask, tgt_key_padding_mask,
    memory_key_padding_mask) as torch takes them."""
    none = (None, None, None, None)
    if kind == "none":
        return none
    if kind == "causal":
        causal = torch.triu(torch.full((length, length), float("-inf")),
                            diagonal=1)
        return causal, None, None, None
    if kind == "padding":
        tpad = torch.zeros(n, length, dtype=torch.bool)
        tpad[0, -1] = True
        mpad = torch.zeros(n, src_length, dtype=torch.bool)
        mpad[-1, -2:] = True
        return None, None, tpad, mpad
    # an additive memory mask with one fully masked key column per row
    # pattern, and a causal self-attention mask
    mm = torch.zeros(length, src_length)
    mm[:, 0] = float("-inf") if src_length > 1 else 0.0
    mm[1, 1:] = -2.5
    causal = torch.triu(torch.full((length, length), float("-inf")),
                        diagonal=1)
    return causal, mm, None, None


def _np(t):
    return None if t is None else t.numpy()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "memory_mask"])
def test_decoder_layer_matches_autograd(shape, norm_first, activation, mask):
    n, length, src_length, d, heads, d_ff = shape
    torch.manual_seed(5)
    ref = torch.nn.TransformerDecoderLayer(
        d, heads, d_ff, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first)
    ours = transformer.TransformerDecoderLayer(
        d, heads, d_ff, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first)
    load(ours, ref)
    ours.train()
    x = torch.randn(n, length, d, requires_grad=True)
    mem = torch.randn(n, src_length, d, requires_grad=True)
    g = torch.randn(n, length, d)
    tm, mm, tpad, mpad = _masks(mask, n, length, src_length)
    y_ref = ref(x, mem, tgt_mask=tm, memory_mask=mm,
                tgt_key_padding_mask=tpad, memory_key_padding_mask=mpad)
    y_ref.backward(g)
    y = ours(x.detach().numpy(), mem.detach().numpy(), tgt_mask=_np(tm),
             memory_mask=_np(mm), tgt_key_padding_mask=_np(tpad),
             memory_key_padding_mask=_np(mpad))
    close(y, y_ref, 1e-4)
    grad_tgt, grad_memory = ours.backward(g.numpy())
    close(grad_tgt, x.grad, 1e-4)
    close(grad_memory, mem.grad, 1e-4)
    for name, p in ref.named_parameters():
        close(ours.grad(name), p.grad, 1e-4)


def test_decoder_layer_backward_layout_and_errors():
    """Sequence-first layout (batch_first=False) as torch's default, the
    gradients accumulating over two backward calls, and a wrong
    grad_output shape refused with the gradients untouched."""
    torch.manual_seed(6)
    ref = torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    ours = transformer.TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    load(ours, ref)
    ours.train()
    x = torch.randn(4, 2, 8, requires_grad=True)    # [L, N, E]
    mem = torch.randn(3, 2, 8, requires_grad=True)  # [S, N, E]
    g = torch.randn(4, 2, 8)
    ref(x, mem).backward(g)
    ours(x.detach().numpy(), mem.detach().numpy())
    gt, gm = ours.backward(g.numpy())
    close(gt, x.grad, 1e-4)
    close(gm, mem.grad, 1e-4)
    ours.backward(g.numpy())
    close(ours.grad("multihead_attn.in_proj_weight"),
          2 * ref.multihead_attn.in_proj_weight.grad, 1e-4)
    close(ours.grad("norm3.weight"), 2 * ref.norm3.weight.grad, 1e-4)
    before = ours.grad("linear1.weight").copy()
    with pytest.raises(transformer.ShapeError):
        ours.backward(np.zeros((5, 2, 8), np.float32))
    np.testing.assert_array_equal(ours.grad("linear1.weight"), before)
