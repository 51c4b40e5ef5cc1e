"""Dropout in training mode against torch.autograd with the same masks.

libtransformer's masks are counter-based (module.h, "Dropout"; docs/
TRAINING.md): element i of a site with key K is kept when the top 32 bits
of output i + 1 of SplitMix64 seeded with K are >= floor(p 2^32).  This
file regenerates them in numpy from that published definition (Steele, Lea
and Flood 2014; Vigna's constants) and builds the layers' forward in
torch with exactly those masks (torch.nn.functional on float64 copies of
the weights of a torch.nn layer, the kept elements scaled by 1 / (1 - p)
as nn.Dropout): outputs and every gradient (inputs and parameters, by
PyTorch's names) must equal autograd's within 1e-4 of the largest
magnitude.  The rest checks the contract: evaluation mode and p = 0 are
the evaluation forward bit for bit, the masks repeat from the same
(seed, offset), the fraction dropped is p, and bad probabilities are
refused."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import transformer
from grad_check import close, load

C0, C1, C2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
MASK64 = (1 << 64) - 1
# site numbers (src/dropout.h, docs/TRAINING.md)
ATTENTION, HIDDEN, BLOCK1, BLOCK2, BLOCK3 = 1, 2, 3, 4, 5
SELF_ATTN, CROSS_ATTN, FF = 6, 7, 8


def splitmix(key, index):
    """Output index + 1 of SplitMix64 seeded with key (numpy uint64)."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (np.asarray(index, np.uint64) + np.uint64(1)) \
            * np.uint64(C0)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(C1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(C2)
        return z ^ (z >> np.uint64(31))


def site(key, number):
    k = int(splitmix(key, number))
    return k or 1


def keep(key, p, shape):
    """The float64 mask * 1/(1-p) of a site: element i at flat index i."""
    n = int(np.prod(shape))
    bits = splitmix(key, np.arange(n, dtype=np.uint64)) >> np.uint64(32)
    kept = bits >= np.uint64(int(p * 4294967296.0))
    scale = np.float64(np.float32(1.0) / np.float32(1.0 - p))
    return torch.tensor(kept.reshape(shape) * scale, dtype=torch.float64)


def call_key(module):
    """The key the module's next training-mode call draws."""
    seed, offset = module.dropout_state
    return site(seed, offset)


def mha_ref(P, prefix, q_in, kv_in, heads, key, p, attn_mask=None,
            key_padding=None):
    """nn.MultiheadAttention (batch first) with attention-weight mask."""
    n, L, d = q_in.shape
    S = kv_in.shape[1]
    W, b = P[prefix + "in_proj_weight"], P[prefix + "in_proj_bias"]
    q = F.linear(q_in, W[:d], b[:d])
    k = F.linear(kv_in, W[d:2 * d], b[d:2 * d])
    v = F.linear(kv_in, W[2 * d:], b[2 * d:])
    dk = d // heads

    def split(t, length):
        return t.reshape(n, length, heads, dk).transpose(1, 2)

    q, k, v = split(q, L), split(k, S), split(v, S)
    s = q @ k.transpose(-1, -2) / np.sqrt(dk)
    if attn_mask is not None:
        s = s + attn_mask
    if key_padding is not None:
        s = s.masked_fill(key_padding[:, None, None, :], float("-inf"))
    w = torch.softmax(s, -1)
    w = w * keep(site(key, ATTENTION), p, (n, heads, L, S))
    ctx = (w @ v).transpose(1, 2).reshape(n, L, d)
    return F.linear(ctx, P[prefix + "out_proj.weight"],
                    P[prefix + "out_proj.bias"])


def ff_ref(P, x, act, key, p):
    h = act(F.linear(x, P["linear1.weight"], P["linear1.bias"]))
    h = h * keep(site(site(key, FF), HIDDEN), p, h.shape)
    return F.linear(h, P["linear2.weight"], P["linear2.bias"])


def ln(P, name, x, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], P[name + ".weight"],
                        P[name + ".bias"], eps)


def block(P, x, f, norm, key, number, p, norm_first):
    """post-norm: norm(x + drop(f(x))); pre-norm: x + drop(f(norm(x)))."""
    m = keep(site(key, number), p, x.shape)
    if norm_first:
        return x + f(ln(P, norm, x)) * m
    return ln(P, norm, x + f(x) * m)


def params64(ref):
    return {name: t.detach().double().requires_grad_(True)
            for name, t in ref.named_parameters()}


ACTS = {"relu": F.relu, "gelu": F.gelu}


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("mask", ["none", "causal_padding"])
def test_encoder_layer_dropout_matches_autograd(norm_first, activation, p,
                                                mask):
    n, L, d, heads, d_ff = 2, 7, 12, 3, 20
    torch.manual_seed(3)
    ref = torch.nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0.0,
                                           activation=activation,
                                           batch_first=True,
                                           norm_first=norm_first)
    ours = transformer.TransformerEncoderLayer(
        d, heads, d_ff, dropout=p, activation=activation, batch_first=True,
        norm_first=norm_first)
    load(ours, ref)
    ours.train()
    ours.dropout_state = (12345, 7)
    key = call_key(ours)
    x = torch.randn(n, L, d, dtype=torch.float64)
    g = torch.randn(n, L, d, dtype=torch.float64)
    attn_mask = pad = None
    if mask == "causal_padding":
        attn_mask = torch.triu(torch.full((L, L), float("-inf"),
                                          dtype=torch.float64), diagonal=1)
        pad = torch.zeros(n, L, dtype=torch.bool)
        pad[1, -2:] = True
    P = params64(ref)
    xr = x.clone().requires_grad_(True)
    sa_key = site(key, SELF_ATTN)
    y = block(P, xr, lambda t: mha_ref(P, "self_attn.", t, t, heads, sa_key,
                                       p, attn_mask, pad),
              "norm1", key, BLOCK1, p, norm_first)
    y = block(P, y, lambda t: ff_ref(P, t, ACTS[activation], key, p),
              "norm2", key, BLOCK2, p, norm_first)
    y.backward(g)
    out = ours(x.float().numpy(),
               src_mask=None if attn_mask is None else attn_mask.float().numpy(),
               src_key_padding_mask=None if pad is None else pad.numpy())
    close(out, y, 1e-4)
    close(ours.backward(g.float().numpy()), xr.grad, 1e-4)
    for name, t in P.items():
        close(ours.grad(name), t.grad, 1e-4)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_dropout_matches_autograd(norm_first):
    n, L, S, d, heads, d_ff, p = 2, 5, 6, 8, 2, 16, 0.3
    torch.manual_seed(4)
    ref = torch.nn.TransformerDecoderLayer(d, heads, d_ff, dropout=0.0,
                                           batch_first=True,
                                           norm_first=norm_first)
    ours = transformer.TransformerDecoderLayer(
        d, heads, d_ff, dropout=p, batch_first=True, norm_first=norm_first)
    load(ours, ref)
    ours.train()
    key = call_key(ours)
    x = torch.randn(n, L, d, dtype=torch.float64)
    mem = torch.randn(n, S, d, dtype=torch.float64)
    g = torch.randn(n, L, d, dtype=torch.float64)
    causal = torch.triu(torch.full((L, L), float("-inf"),
                                   dtype=torch.float64), diagonal=1)
    P = params64(ref)
    xr = x.clone().requires_grad_(True)
    mr = mem.clone().requires_grad_(True)
    y = block(P, xr, lambda t: mha_ref(P, "self_attn.", t, t, heads,
                                       site(key, SELF_ATTN), p, causal),
              "norm1", key, BLOCK1, p, norm_first)
    y = block(P, y, lambda t: mha_ref(P, "multihead_attn.", t, mr, heads,
                                      site(key, CROSS_ATTN), p),
              "norm2", key, BLOCK2, p, norm_first)
    y = block(P, y, lambda t: ff_ref(P, t, F.relu, key, p), "norm3", key,
              BLOCK3, p, norm_first)
    y.backward(g)
    out = ours(x.float().numpy(), mem.float().numpy(),
               tgt_mask=causal.float().numpy())
    close(out, y, 1e-4)
    grad_tgt, grad_memory = ours.backward(g.float().numpy())
    close(grad_tgt, xr.grad, 1e-4)
    close(grad_memory, mr.grad, 1e-4)
    for name, t in P.items():
        close(ours.grad(name), t.grad, 1e-4)


def test_long_rows_cross_the_kernels_tiles():
    """L = S = 300 spans several key tiles of the forward (online
    softmax) and of the backward (128 x 128 tiles): the masks of every
    tile are the ones of their (b, h, i, j) index."""
    n, L, d, heads, p = 1, 300, 16, 2, 0.25
    torch.manual_seed(6)
    ref = torch.nn.MultiheadAttention(d, heads, dropout=0.0,
                                      batch_first=True)
    ours = transformer.MultiheadAttention(d, heads, dropout=p,
                                          batch_first=True)
    load(ours, ref)
    ours.train()
    key = call_key(ours)
    x = torch.randn(n, L, d, dtype=torch.float64)
    g = torch.randn(n, L, d, dtype=torch.float64)
    P = {name: t.detach().double().requires_grad_(True)
         for name, t in ref.named_parameters()}
    xr = x.clone().requires_grad_(True)
    y = mha_ref(P, "", xr, xr, heads, key, p)
    y.backward(g)
    xs = x.float().numpy()
    out, _ = ours(xs, xs, xs, need_weights=False)
    close(out, y, 1e-4)
    gq, gk, gv = ours.backward(g.float().numpy())
    close(gq + gk + gv, xr.grad, 1e-4)
    for name, t in P.items():
        close(ours.grad(name), t.grad, 1e-4)


def test_evaluation_mode_and_zero_probability_are_the_plain_forward():
    x = np.random.default_rng(0).standard_normal((2, 9, 16)).astype(np.float32)
    plain = transformer.TransformerEncoderLayer(16, 4, 32, dropout=0.0,
                                                batch_first=True)
    dropped = transformer.TransformerEncoderLayer(16, 4, 32, dropout=0.5,
                                                  batch_first=True)
    dropped.load_state_dict(plain.state_dict())
    ref = plain(x)
    assert np.array_equal(dropped(x), ref)           # evaluation mode
    plain.train()
    assert np.array_equal(plain(x), ref)             # training, p = 0
    dropped.train()
    assert not np.array_equal(dropped(x), ref)
    dropped.set_dropout(0.0)
    assert np.array_equal(dropped(x), ref)
    dropped.eval()
    assert np.array_equal(dropped(x), ref)


def test_masks_repeat_from_the_same_state_and_drop_p():
    model = transformer.Model(dict(architecture="decoder_only", vocab_size=40,
                                   d_model=32, n_heads=4, d_ff=64, n_layers=2,
                                   context_length=64), dropout=0.4)
    ids = np.random.default_rng(1).integers(0, 40, (3, 64)).astype(np.int32)
    ref = model.logits(ids)
    model.train()
    model.dropout_state = (99, 5)
    a = model.logits(ids)
    assert model.dropout_state == (99, 6)
    b = model.logits(ids)
    model.dropout_state = (99, 5)
    assert np.array_equal(model.logits(ids), a)
    assert not np.array_equal(a, b) and not np.array_equal(a, ref)
    model.eval()
    assert np.array_equal(model.logits(ids), ref)
    # the published mask: the fraction kept is 1 - p
    kept = keep(12345, 0.4, (1 << 16,)).numpy() > 0
    assert abs(kept.mean() - 0.6) < 0.01


def test_bad_probabilities_are_refused_and_change_nothing():
    layer = transformer.TransformerEncoderLayer(8, 2, 16, dropout=0.2)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(transformer.InvalidArgumentError):
            layer.set_dropout(bad)
    assert layer.dropout == 0.2
