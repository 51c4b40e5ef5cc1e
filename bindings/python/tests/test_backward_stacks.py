"""TransformerEncoder.backward and TransformerDecoder.backward against
torch.autograd (torch 1.13): nn.TransformerEncoder / nn.TransformerDecoder
of 2 and 3 layers (dropout 0), with and without the final LayerNorm,
post-norm and pre-norm, with masks; the same weights, inputs and
grad_output.  The inputs' gradients (memory's summed over the decoder's
layers) and every parameter's by name must equal torch's within 1e-4 of
the largest magnitude."""

import numpy as np
import pytest
import torch

import transformer
from grad_check import close, load


def _pair(kind, d, heads, d_ff, norm_first, layers, final_norm):
    torch_layer = getattr(torch.nn, f"Transformer{kind}Layer")(
        d, heads, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first,
        activation="gelu")
    our_layer = getattr(transformer, f"Transformer{kind}Layer")(
        d, heads, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first,
        activation="gelu")
    ref = getattr(torch.nn, f"Transformer{kind}")(
        torch_layer, layers,
        norm=torch.nn.LayerNorm(d) if final_norm else None)
    ours = getattr(transformer, f"Transformer{kind}")(
        our_layer, layers,
        norm=transformer.LayerNorm(d) if final_norm else None)
    with torch.no_grad():   # distinct layers and a non-trivial final norm
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    load(ours, ref)
    ours.train()
    return ref, ours


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal_padding"])
def test_encoder_matches_autograd(layers, norm_first, final_norm, mask):
    torch.manual_seed(7)
    n, length, d, heads, d_ff = 2, 5, 8, 2, 12
    ref, ours = _pair("Encoder", d, heads, d_ff, norm_first, layers,
                      final_norm)
    x = torch.randn(n, length, d, requires_grad=True)
    g = torch.randn(n, length, d)
    attn, pad = None, None
    if mask != "none":
        attn = torch.triu(torch.full((length, length), float("-inf")), 1)
        pad = torch.zeros(n, length, dtype=torch.bool)
        pad[1, -2:] = True
    ref(x, mask=attn, src_key_padding_mask=pad).backward(g)
    y = ours(x.detach().numpy(),
             mask=None if attn is None else attn.numpy(),
             src_key_padding_mask=None if pad is None else pad.numpy())
    close(ours.backward(g.numpy()), x.grad, 1e-4)
    for name, p in ref.named_parameters():
        close(ours.grad(name), p.grad, 1e-4)
    del y


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal_padding"])
def test_decoder_matches_autograd(layers, norm_first, final_norm, mask):
    torch.manual_seed(8)
    n, length, src_length, d, heads, d_ff = 2, 4, 6, 8, 2, 12
    ref, ours = _pair("Decoder", d, heads, d_ff, norm_first, layers,
                      final_norm)
    x = torch.randn(n, length, d, requires_grad=True)
    mem = torch.randn(n, src_length, d, requires_grad=True)
    g = torch.randn(n, length, d)
    tm, mpad = None, None
    if mask != "none":
        tm = torch.triu(torch.full((length, length), float("-inf")), 1)
        mpad = torch.zeros(n, src_length, dtype=torch.bool)
        mpad[0, -3:] = True
    ref(x, mem, tgt_mask=tm, memory_key_padding_mask=mpad).backward(g)
    ours(x.detach().numpy(), mem.detach().numpy(),
         tgt_mask=None if tm is None else tm.numpy(),
         memory_key_padding_mask=None if mpad is None else mpad.numpy())
    grad_tgt, grad_memory = ours.backward(g.numpy())
    close(grad_tgt, x.grad, 1e-4)
    close(grad_memory, mem.grad, 1e-4)
    for name, p in ref.named_parameters():
        close(ours.grad(name), p.grad, 1e-4)


def test_stack_backward_sequence_first_and_errors():
    """torch's default layout ([L, N, E]), and a wrong grad_output shape
    refused with the gradients untouched."""
    torch.manual_seed(9)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    ref = torch.nn.TransformerEncoder(layer, 2)
    ours = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2)
    load(ours, ref)
    ours.train()
    x = torch.randn(5, 3, 8, requires_grad=True)
    g = torch.randn(5, 3, 8)
    ref(x).backward(g)
    ours(x.detach().numpy())
    close(ours.backward(g.numpy()), x.grad, 1e-4)
    before = ours.grad("layers.1.linear2.weight").copy()
    with pytest.raises(transformer.ShapeError):
        ours.backward(np.zeros((5, 4, 8), np.float32))
    np.testing.assert_array_equal(ours.grad("layers.1.linear2.weight"),
                                  before)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masks", [False, True])
def test_transformer_matches_autograd(norm_first, masks):
    """nn.Transformer (2 encoder and 3 decoder layers, each stack ending in
    its LayerNorm, which here is the C stack's own)."""
    torch.manual_seed(10)
    n, src_len, tgt_len, d, heads, d_ff = 2, 6, 4, 8, 2, 12
    kw = dict(d_model=d, nhead=heads, num_encoder_layers=2,
              num_decoder_layers=3, dim_feedforward=d_ff, dropout=0.0,
              batch_first=True, norm_first=norm_first)
    ref = torch.nn.Transformer(**kw)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = transformer.Transformer(**kw)
    load(ours, ref)
    ours.train()
    src = torch.randn(n, src_len, d, requires_grad=True)
    tgt = torch.randn(n, tgt_len, d, requires_grad=True)
    g = torch.randn(n, tgt_len, d)
    kwargs = {}
    if masks:
        kwargs["tgt_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(tgt_len)
        pad = torch.zeros(n, src_len, dtype=torch.bool)
        pad[1, -2:] = True
        kwargs["src_key_padding_mask"] = pad
        kwargs["memory_key_padding_mask"] = pad
    ref(src, tgt, **kwargs).backward(g)
    y = ours(src.detach().numpy(), tgt.detach().numpy(),
             **{k: v.numpy() for k, v in kwargs.items()})
    del y
    grad_src, grad_tgt = ours.backward(g.numpy())
    close(grad_src, src.grad, 1e-4)
    close(grad_tgt, tgt.grad, 1e-4)
    for name, p in ref.named_parameters():
        close(ours.grad(name), p.grad, 1e-4)
