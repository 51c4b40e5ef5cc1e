"""Default initialisation against PyTorch's: every class starts as its
torch.nn counterpart does after construction (reset_parameters).

torch draws its module (torch.manual_seed fixed); ours draws the same
shapes from the library's generator.  Per parameter:
  * constants (zeros, ones) are equal exactly;
  * random ones have the same spread: standard deviations within
    6 / sqrt(n) relative (the sample std's relative error is about
    sqrt((kurtosis - 1) / (4 n)) for each side), and for uniform draws the
    same bound: torch's largest |x| is within 30 / n of its bound (failure
    probability (1 - 30/n)^n < e^-30), so ours must not exceed it by more
    than that and must reach it within that;
  * the same family: excess kurtosis (uniform -1.2, normal 0) within 0.5
    for n >= 4000 (its std is at most sqrt(24 / n) = 0.08 there).
tests/test_init.c checks the distributions against the formulas.
"""

import numpy as np
import pytest
import torch
from torch import nn

import transformer

D, H, F = 64, 4, 256


def stats(a):
    a = np.asarray(a, np.float64).ravel()
    std = a.std()
    kurt = ((a - a.mean()) ** 4).mean() / std ** 4 - 3 if std > 0 else 0.0
    return a.size, std, np.abs(a).max(), kurt


def compare(ours, ref):
    ref = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    ours = ours.state_dict()
    assert list(ours) == list(ref)
    for name, r in ref.items():
        o = ours[name]
        assert o.shape == r.shape, name
        if np.all(r == r.flat[0]):
            np.testing.assert_array_equal(o, r, err_msg=name)
            continue
        n, std_r, max_r, kurt_r = stats(r)
        _, std_o, max_o, kurt_o = stats(o)
        assert abs(std_o - std_r) <= 6 / np.sqrt(n) * std_r, \
            (name, std_o, std_r)
        if kurt_r < -0.6:      # uniform (kurtosis -1.2): the same bound
            assert max_o <= max_r * (1 + 30 / n), (name, max_o, max_r)
            assert max_r <= max_o * (1 + 30 / n), (name, max_o, max_r)
        if n >= 4000:
            assert abs(kurt_o - kurt_r) <= 0.5, (name, kurt_o, kurt_r)


CASES = {
    "mha": (lambda: nn.MultiheadAttention(D, H),
            lambda: transformer.MultiheadAttention(D, H)),
    "mha_kdim_vdim": (
        lambda: nn.MultiheadAttention(D, H, kdim=32, vdim=48),
        lambda: transformer.MultiheadAttention(D, H, kdim=32, vdim=48)),
    "mha_no_bias": (lambda: nn.MultiheadAttention(D, H, bias=False),
                    lambda: transformer.MultiheadAttention(D, H, bias=False)),
    "encoder_layer": (
        lambda: nn.TransformerEncoderLayer(D, H, F),
        lambda: transformer.TransformerEncoderLayer(D, H, F)),
    "decoder_layer": (
        lambda: nn.TransformerDecoderLayer(D, H, F),
        lambda: transformer.TransformerDecoderLayer(D, H, F)),
    "transformer": (
        lambda: nn.Transformer(D, H, 1, 1, F),
        lambda: transformer.Transformer(D, H, 1, 1, F)),
    "layer_norm": (lambda: nn.LayerNorm(D), lambda: transformer.LayerNorm(D)),
    "linear": (lambda: nn.Linear(100, 300), lambda: transformer.Linear(100, 300)),
    "embedding": (lambda: nn.Embedding(1000, D),
                  lambda: transformer.Embedding(1000, D)),
    "embedding_padding": (
        lambda: nn.Embedding(1000, D, padding_idx=-2),
        lambda: transformer.Embedding(1000, D, padding_idx=-2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_torch_default_init(case):
    make_ref, make_ours = CASES[case]
    torch.manual_seed(0)
    transformer.manual_seed(0)
    compare(make_ours(), make_ref())


def test_padding_row_is_zero():
    emb = transformer.Embedding(10, 4, padding_idx=-1)
    assert emb.padding_idx == 9
    w = emb.state_dict()["weight"]
    assert not w[9].any() and w[:9].all()
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.Embedding(10, 4, padding_idx=10)


def test_reproducible_by_seed():
    def draw():
        return transformer.TransformerEncoderLayer(16, 2, 32).state_dict()
    transformer.manual_seed(7)
    a, b = draw(), draw()            # the generator advances
    transformer.manual_seed(7)
    c = draw()
    for k in a:
        np.testing.assert_array_equal(a[k], c[k])
    assert not np.array_equal(a["linear1.weight"], b["linear1.weight"])
    layer = transformer.TransformerEncoderLayer(16, 2, 32)
    x = layer.reset_parameters(seed=3).state_dict()
    y = layer.reset_parameters(seed=3).state_dict()
    z = layer.reset_parameters(seed=4).state_dict()
    for k in x:
        np.testing.assert_array_equal(x[k], y[k])
    assert not np.array_equal(x["self_attn.in_proj_weight"],
                              z["self_attn.in_proj_weight"])
    with pytest.raises(TypeError):
        transformer.manual_seed(1.5)
    with pytest.raises(TypeError):
        layer.reset_parameters(seed="1")


def test_stack_layers_start_as_the_template():
    # torch deep-copies the template layer: every layer starts equal
    layer = transformer.TransformerEncoderLayer(16, 2, 32)
    enc = transformer.TransformerEncoder(layer, 2)
    sd, ref = enc.state_dict(), layer.state_dict()
    for k in ref:
        np.testing.assert_array_equal(sd["layers.0." + k], ref[k])
        np.testing.assert_array_equal(sd["layers.1." + k], ref[k])
    # reset_parameters draws each layer on its own
    enc.reset_parameters(seed=1)
    sd = enc.state_dict()
    assert not np.array_equal(sd["layers.0.linear1.weight"],
                              sd["layers.1.linear1.weight"])


def test_views_do_not_reset_their_parent():
    layer = transformer.TransformerEncoderLayer(16, 2, 32)
    before = layer.state_dict()
    views = (layer.self_attn, layer.linear1, layer.norm1,
             layer.self_attn.out_proj)
    after = layer.state_dict()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)
    # resetting a view redraws that part only, as its own torch.nn class:
    # out_proj as an nn.Linear (bias no longer zero)
    views[3].reset_parameters(seed=2)
    after = layer.state_dict()
    assert np.abs(after["self_attn.out_proj.bias"]).max() > 0
    assert np.abs(after["self_attn.out_proj.bias"]).max() <= 0.25
    for k in before:
        if not k.startswith("self_attn.out_proj."):
            np.testing.assert_array_equal(before[k], after[k], err_msg=k)


def test_forward_of_a_new_module_is_not_zero():
    mha = transformer.MultiheadAttention(8, 2, batch_first=True)
    x = np.random.default_rng(0).standard_normal((1, 5, 8))
    out, _ = mha(x, x, x)
    assert np.abs(out).max() > 1e-3


def test_model_initialised():
    m = transformer.Model(architecture="decoder_only", vocab_size=50,
                          d_model=16, n_heads=2, d_ff=32, n_layers=1,
                          context_length=8)
    sd = m.state_dict()
    emb = sd["token_embedding.weight"]
    assert 0.7 < emb.std() < 1.3
    assert np.all(sd["layers.0.self_attn.in_proj_bias"] == 0)
    assert np.all(sd["norm.weight"] == 1) and np.all(sd["norm.bias"] == 0)
    w = sd["layers.0.linear1.weight"]          # nn.Linear(16, 32)
    assert np.abs(w).max() <= 0.25 and np.abs(w).max() > 0.2
