"""MultiheadAttention against torch.nn.MultiheadAttention (float64)."""

import numpy as np
import pytest
import torch

import transformer
from conftest import assert_close, rand, randomize, ref64, t64

B, L, S, E, H = 3, 5, 7, 16, 4


def make_pair(bias=True, kdim=None, vdim=None, batch_first=True, seed=0):
    tm = randomize(torch.nn.MultiheadAttention(
        E, H, dropout=0.0, bias=bias, kdim=kdim, vdim=vdim,
        batch_first=batch_first), seed)
    ours = transformer.MultiheadAttention(E, H, bias=bias, kdim=kdim,
                                          vdim=vdim, batch_first=batch_first)
    ours.load_state_dict(tm.state_dict())
    return ours, ref64(tm)


def block_pattern(rng, *shape):
    """Random bool 'masked out' pattern that never blocks key 0."""
    m = rng.random(shape) < 0.35
    m[..., 0] = False
    return m


def additive(rng, blocked):
    """Float mask: random values, -inf where blocked."""
    f = (0.5 * rng.standard_normal(blocked.shape)).astype(np.float32)
    f[blocked] = -np.inf
    return f


def combined(kpm, attn, causal, b, h, l, s):
    """All masks as one float64 additive [b*h, l, s] tensor for torch."""
    total = np.zeros((b, h, l, s))
    if kpm is not None:
        k = np.where(kpm, -np.inf, 0.0) if kpm.dtype == np.bool_ else kpm
        total = total + k.reshape(b, 1, 1, s)
    if attn is not None:
        a = np.where(attn, -np.inf, 0.0) if attn.dtype == np.bool_ else attn
        total = total + (a.reshape(b, h, l, s) if a.ndim == 3 else a)
    if causal:
        total = total + np.triu(np.full((l, s), -np.inf), 1)
    return torch.from_numpy(total.reshape(b * h, l, s))


MASK_CASES = ["none", "kpm_bool", "kpm_float", "attn2_bool", "attn2_float",
              "attn3_bool", "attn3_float", "kpm_bool+attn2_bool",
              "kpm_float+attn3_bool", "causal", "causal+kpm_bool",
              "causal+attn2_float"]


def build_masks(case, rng):
    kpm = attn = None
    if "kpm_bool" in case:
        kpm = block_pattern(rng, B, S)
    if "kpm_float" in case:
        kpm = additive(rng, block_pattern(rng, B, S))
    if "attn2_bool" in case:
        attn = block_pattern(rng, L, S)
    if "attn2_float" in case:
        attn = additive(rng, block_pattern(rng, L, S))
    if "attn3_bool" in case:
        attn = block_pattern(rng, B * H, L, S)
    if "attn3_float" in case:
        attn = additive(rng, block_pattern(rng, B * H, L, S))
    return kpm, attn, "causal" in case


def seq_first(x, batch_first):
    return x if batch_first else np.ascontiguousarray(x.swapaxes(0, 1))


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("case", MASK_CASES)
def test_masks_and_weights(case, batch_first, average, rng):
    ours, ref = make_pair(batch_first=batch_first)
    q, k, v = rand(rng, B, L, E), rand(rng, B, S, E), rand(rng, B, S, E)
    kpm, attn, causal = build_masks(case, rng)
    qi, ki, vi = (seq_first(x, batch_first) for x in (q, k, v))
    out, w = ours(qi, ki, vi, key_padding_mask=kpm, attn_mask=attn,
                  average_attn_weights=average, is_causal=causal)
    mask = (None if case == "none"
            else combined(kpm, attn, causal, B, H, L, S))
    ref_out, ref_w = ref(t64(qi), t64(ki), t64(vi), attn_mask=mask,
                         average_attn_weights=average)
    assert out.shape == tuple(ref_out.shape)
    assert_close(out, ref_out)
    assert w.shape == tuple(ref_w.shape)
    assert_close(w, ref_w)


@pytest.mark.parametrize("case", ["kpm_bool", "attn2_bool", "attn3_bool",
                                  "kpm_bool+attn2_bool", "attn2_float",
                                  "attn3_float", "kpm_float"])
def test_torch_native_mask_handling(case, rng):
    """The same masks handed to PyTorch as they are: the conventions
    (bool True = masked out; 3-D = [N*num_heads, L, S]) agree."""
    ours, ref = make_pair()
    q, k, v = rand(rng, B, L, E), rand(rng, B, S, E), rand(rng, B, S, E)
    kpm, attn, _ = build_masks(case, rng)
    out, w = ours(q, k, v, key_padding_mask=kpm, attn_mask=attn)
    ref_out, ref_w = ref(t64(q), t64(k), t64(v), key_padding_mask=t64(kpm),
                         attn_mask=t64(attn))
    assert_close(out, ref_out)
    assert_close(w, ref_w)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kv", [(None, None), (5, 7), (E, 9)])
def test_bias_kdim_vdim(bias, kv, batch_first, rng):
    kdim, vdim = kv
    ours, ref = make_pair(bias=bias, kdim=kdim, vdim=vdim,
                          batch_first=batch_first)
    kd = kdim or E
    vd = vdim or E
    q, k, v = rand(rng, B, L, E), rand(rng, B, S, kd), rand(rng, B, S, vd)
    kpm = block_pattern(rng, B, S)
    qi, ki, vi = (seq_first(x, batch_first) for x in (q, k, v))
    out, w = ours(qi, ki, vi, key_padding_mask=kpm)
    ref_out, ref_w = ref(t64(qi), t64(ki), t64(vi), key_padding_mask=t64(kpm))
    assert_close(out, ref_out)
    assert_close(w, ref_w)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("batch_first", [True, False])
def test_self_attention_same_array(batch_first, rng):
    ours, ref = make_pair(batch_first=batch_first)
    x = seq_first(rand(rng, B, L, E), batch_first)
    out, _ = ours(x, x, x, need_weights=False)
    ref_out, _ = ref(t64(x), t64(x), t64(x), need_weights=False)
    assert_close(out, ref_out)


def test_need_weights_false_returns_none(rng):
    ours, _ = make_pair()
    q = rand(rng, B, L, E)
    out, w = ours(q, q, q, need_weights=False)
    assert w is None and out.shape == (B, L, E)


@pytest.mark.parametrize("average", [True, False])
def test_unbatched(average, rng):
    ours, ref = make_pair(batch_first=False)
    q, k, v = rand(rng, L, E), rand(rng, S, E), rand(rng, S, E)
    kpm = block_pattern(rng, S)
    attn = block_pattern(rng, H, L, S)
    out, w = ours(q, k, v, key_padding_mask=kpm, attn_mask=attn,
                  average_attn_weights=average)
    ref_out, ref_w = ref(t64(q), t64(k), t64(v), key_padding_mask=t64(kpm),
                         attn_mask=t64(attn), average_attn_weights=average)
    assert out.shape == (L, E)
    assert_close(out, ref_out)
    assert_close(w, ref_w)


def test_fully_masked_rows_are_zero(rng):
    """PyTorch gives NaN for a query that sees no key; we give zeros."""
    ours, _ = make_pair()
    q, k = rand(rng, B, L, E), rand(rng, B, S, E)
    attn = np.zeros((L, S), bool)
    attn[2] = True                      # query 2 sees nothing
    out, w = ours(q, k, k, attn_mask=attn, average_attn_weights=False)
    assert np.isfinite(out).all()
    assert (w[:, :, 2] == 0).all()
    # its output is out_proj's bias alone (zero attention vector)
    bias = ours.state_dict()["out_proj.bias"]
    np.testing.assert_allclose(out[:, 2], np.broadcast_to(bias, (B, E)),
                               atol=1e-6)
    # the other rows of the weights still sum to 1
    np.testing.assert_allclose(w[:, :, [0, 1, 3, 4]].sum(-1), 1, atol=1e-6)


def test_inputs_converted(rng):
    """float64, float16, int and non-contiguous inputs and torch tensors are
    accepted and give the float32 result."""
    ours, _ = make_pair()
    q = rand(rng, B, L, E)
    ref_out, _ = ours(q, q, q)
    for x in (q.astype(np.float64), q.astype(">f4"),
              np.asfortranarray(q), torch.from_numpy(q)):
        out, _ = ours(x, x, x)
        np.testing.assert_allclose(out, ref_out, rtol=1e-6, atol=1e-6)
    big = np.zeros((B, L, 2 * E), np.float32)
    big[:, :, ::2] = q                           # strided view
    out, _ = ours(big[:, :, ::2], q, q)
    np.testing.assert_allclose(out, ref_out, rtol=1e-6, atol=1e-6)
    ints = np.arange(B * L * E).reshape(B, L, E) % 3
    out, _ = ours(ints, ints, ints)
    assert out.dtype == np.float32


def test_input_arrays_are_not_modified(rng):
    ours, _ = make_pair()
    q = rand(rng, B, L, E)
    saved = q.copy()
    ours(q, q, q, is_causal=True)
    assert (q == saved).all()


def test_repr_and_help():
    m = transformer.MultiheadAttention(8, 2, batch_first=True)
    assert repr(m) == ("MultiheadAttention(embed_dim=8, num_heads=2, "
                       "batch_first=True)")
    doc = transformer.MultiheadAttention.__doc__
    for word in ("key_padding_mask", "attn_mask", "batch_first",
                 "need_weights", "average_attn_weights", "[L, N, E]"):
        assert word in doc
    assert transformer.MultiheadAttention.forward.__doc__


def test_forward_macs_formula():
    d, l, s, kd, vd = 16, 5, 7, 5, 9
    m = transformer.MultiheadAttention(d, 4, kdim=kd, vdim=vd)
    expected = l * d * d + s * kd * d + s * vd * d + 2 * l * s * d + l * d * d
    assert m.forward_macs(1, l, s) == expected
    assert m.forward_macs(3, l, s) == 3 * expected
    sa = transformer.MultiheadAttention(d, 4)
    assert sa.forward_macs(2, l) == 2 * (4 * d * d * l + 2 * l * l * d)
