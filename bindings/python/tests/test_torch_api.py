"""What a PyTorch user reaches for: the module tree (sub-modules as views
of their parent's parameters, with torch.nn's names), nn.Linear,
from_torch for every module class, torch.Tensor results for torch.Tensor
inputs, and load_state_dict's errors.

References: the torch.nn module itself, in float64 (conftest.ref64),
relative error <= 1e-5 (conftest.REL_TOLERANCE).
"""

import copy
import gc
import pickle

import numpy as np
import pytest

from conftest import assert_close, rand, randomize, ref64, t64, torch

import transformer
import transformer._lowlevel as ll

nn = torch.nn

D, H, F = 8, 2, 16


def torch_names(module):
    """torch's named_modules() without the dropout modules, which have no
    counterpart (the library runs in evaluation mode)."""
    return [n for n, m in module.named_modules()
            if not isinstance(m, nn.Dropout)]


def our_names(module):
    return [n for n, _ in module.named_modules()]


def torch_encoder_layer(seed=0, **kw):
    kw.setdefault("batch_first", True)
    return randomize(nn.TransformerEncoderLayer(D, H, F, dropout=0.0, **kw),
                     seed)


def torch_decoder_layer(seed=0, **kw):
    kw.setdefault("batch_first", True)
    return randomize(nn.TransformerDecoderLayer(D, H, F, dropout=0.0, **kw),
                     seed)


def torch_transformer(seed=0, **kw):
    return randomize(nn.Transformer(D, H, 2, 2, F, dropout=0.0,
                                    batch_first=True, **kw), seed)


# ---- the module tree ---------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: nn.MultiheadAttention(D, H),
    lambda: nn.TransformerEncoderLayer(D, H, F),
    lambda: nn.TransformerDecoderLayer(D, H, F),
    lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, F), 3,
                                  norm=nn.LayerNorm(D)),
    lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, F), 2),
    lambda: nn.Transformer(D, H, 2, 1, F),
    lambda: nn.LayerNorm(D),
    lambda: nn.Linear(D, F),
], ids=["mha", "enc_layer", "dec_layer", "encoder", "decoder", "transformer",
        "layer_norm", "linear"])
def test_named_modules_parameters_and_state_dict_as_torch(make):
    ref = make()
    ours = getattr(transformer, type(ref).__name__).from_torch(ref)
    assert our_names(ours) == torch_names(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in ours.named_parameters()] == \
        [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in ours.named_parameters(recurse=False)] == \
        [n for n, _ in ref.named_parameters(recurse=False)]
    assert [n for n, _ in ours.named_parameters(prefix="m")] == \
        [n for n, _ in ref.named_parameters(prefix="m")]
    assert [n for n, _ in ours.named_children()] == \
        [n for n, m in ref.named_children() if not isinstance(m, nn.Dropout)]
    assert len(list(ours.parameters())) == len(list(ref.parameters()))
    assert len(list(ours.children())) == len(
        [m for m in ref.children() if not isinstance(m, nn.Dropout)])
    assert len(list(ours.modules())) == len(torch_names(ref))
    for name, p in ref.named_parameters():
        np.testing.assert_array_equal(ours.state_dict()[name],
                                      p.detach().numpy())


def test_submodules_are_views_with_torch_classes():
    layer = transformer.TransformerEncoderLayer(D, H, F, batch_first=True)
    assert isinstance(layer.self_attn, transformer.MultiheadAttention)
    assert isinstance(layer.self_attn.out_proj, transformer.Linear)
    assert isinstance(layer.linear1, transformer.Linear)
    assert isinstance(layer.norm2, transformer.LayerNorm)
    assert layer.self_attn is layer.self_attn       # one object per child
    assert (layer.linear1.in_features, layer.linear1.out_features) == (D, F)
    assert (layer.linear2.in_features, layer.linear2.out_features) == (F, D)
    assert layer.self_attn.batch_first
    assert layer.get_submodule("self_attn.out_proj") is \
        layer.self_attn.out_proj
    assert layer.get_submodule("") is layer
    with pytest.raises(AttributeError):
        layer.get_submodule("self_attn.nope")
    with pytest.raises(AttributeError):
        layer.norm3
    enc = transformer.TransformerEncoder(layer, 3)
    assert len(enc.layers) == 3
    assert isinstance(enc.layers, transformer.ModuleList)
    assert isinstance(enc.layers[2], transformer.TransformerEncoderLayer)
    assert [type(m).__name__ for m in enc.layers] == \
        ["TransformerEncoderLayer"] * 3
    assert len(enc.layers[1:]) == 2
    # views make no handles of their own
    before = transformer.live_handles()
    model = transformer.Transformer(D, H, 1, 1, F)
    assert transformer.live_handles() == before + 1
    list(model.modules())
    assert transformer.live_handles() == before + 1
    assert isinstance(model.encoder, transformer.TransformerEncoder)
    assert isinstance(model.decoder.layers[0].multihead_attn,
                      transformer.MultiheadAttention)
    assert isinstance(model.encoder.norm, transformer.LayerNorm)


def test_submodule_forwards_match_torch(rng):
    ref = torch_encoder_layer(seed=3)
    ours = transformer.TransformerEncoderLayer.from_torch(ref)
    r64 = ref64(ref)
    x = rand(rng, 2, 5, D)
    out, w = ours.self_attn(x, x, x)
    ref_out, ref_w = r64.self_attn(t64(x), t64(x), t64(x))
    assert_close(out, ref_out)
    assert_close(w, ref_w)
    assert_close(ours.norm1(x), r64.norm1(t64(x)))
    assert_close(ours.linear1(x), r64.linear1(t64(x)))
    assert_close(ours.self_attn.out_proj(x), r64.self_attn.out_proj(t64(x)))
    h = rand(rng, 2, 5, F)
    assert_close(ours.linear2(h), r64.linear2(t64(h)))


def test_stack_and_transformer_submodules_match_torch(rng):
    ref = torch_transformer(seed=4)
    ours = transformer.Transformer.from_torch(ref)
    r64 = ref64(ref)
    src, tgt = rand(rng, 2, 6, D), rand(rng, 2, 4, D)
    memory = ours.encoder(src)
    ref_memory = r64.encoder(t64(src))
    assert_close(memory, ref_memory)
    assert_close(ours.decoder(tgt, memory),
                 r64.decoder(t64(tgt), ref_memory))
    assert_close(ours.encoder.layers[1](src), r64.encoder.layers[1](t64(src)))
    assert_close(ours.decoder.layers[0](tgt, src),
                 r64.decoder.layers[0](t64(tgt), t64(src)))
    assert_close(ours.decoder.norm(tgt), r64.decoder.norm(t64(tgt)))
    assert_close(ours(src, tgt), r64(t64(src), t64(tgt)))
    # a copy of a stack view is a stack of its own, with its final norm
    for enc in (copy.deepcopy(ours.encoder),
                pickle.loads(pickle.dumps(ours.encoder))):
        assert_close(enc(src), ref_memory)
        assert list(enc.state_dict()) == list(ref.encoder.state_dict())
        assert isinstance(enc.norm, transformer.LayerNorm)


def test_editing_a_submodule_changes_the_parent(rng):
    ref = torch_encoder_layer(seed=5)
    other = randomize(nn.MultiheadAttention(D, H, batch_first=True), seed=6)
    ours = transformer.TransformerEncoderLayer.from_torch(ref)
    x = rand(rng, 2, 5, D)
    # load_state_dict on the view
    ours.self_attn.load_state_dict(other.state_dict())
    ref.self_attn.load_state_dict(other.state_dict())
    assert_close(ours(x), ref64(ref)(t64(x)))
    np.testing.assert_array_equal(
        ours.state_dict()["self_attn.in_proj_weight"],
        other.in_proj_weight.detach().numpy())
    # attribute assignment of in_proj_weight on the view (an nn.Parameter
    # works too), then through two levels of views
    w_in = nn.Parameter(torch.from_numpy(rand(rng, 3 * D, D)))
    ours.self_attn.in_proj_weight = w_in
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(w_in)
    assert_close(ours(x), ref64(ref)(t64(x)))
    w = rand(rng, D, D)
    ours.self_attn.out_proj.weight = w
    with torch.no_grad():
        ref.self_attn.out_proj.weight.copy_(torch.from_numpy(w))
    assert_close(ours(x), ref64(ref)(t64(x)))
    # an edit in place on the parent shows in the view
    b = rand(rng, F)
    ours.load_state_dict({"linear1.bias": b}, strict=False)
    np.testing.assert_array_equal(ours.linear1.bias, b)
    with torch.no_grad():
        ref.linear1.bias.copy_(torch.from_numpy(b))
    # parameter attributes are read-only copies: no silent no-op edit
    with pytest.raises(ValueError):
        ours.linear1.bias[0] = 1.0
    # swapping a norm copies the new norm's weights in
    norm = transformer.LayerNorm(D)
    norm.load_state_dict({"weight": rand(rng, D), "bias": rand(rng, D)})
    ours.norm2 = norm
    with torch.no_grad():
        ref.norm2.weight.copy_(torch.from_numpy(norm.state_dict()["weight"]))
        ref.norm2.bias.copy_(torch.from_numpy(norm.state_dict()["bias"]))
    assert_close(ours(x), ref64(ref)(t64(x)))
    with pytest.raises(transformer.UnsupportedError):
        ours.norm2 = transformer.LayerNorm(D, eps=1e-3)
    with pytest.raises(transformer.UnsupportedError):
        ours.norm2 = transformer.Linear(D, D)


def test_editing_a_stack_layer_changes_the_stack(rng):
    ref = nn.TransformerEncoder(torch_encoder_layer(seed=7), 3)
    randomize(ref, 8)
    ours = transformer.TransformerEncoder.from_torch(ref)
    other = torch_encoder_layer(seed=9)
    ours.layers[1].load_state_dict(other.state_dict())
    ref.layers[1].load_state_dict(other.state_dict())
    x = rand(rng, 2, 4, D)
    assert_close(ours(x), ref64(ref)(t64(x)))
    # the other layers are untouched
    np.testing.assert_array_equal(
        ours.layers[0].linear1.weight,
        ref.layers[0].linear1.weight.detach().numpy())


def test_view_lifetime():
    layer = transformer.TransformerEncoderLayer(D, H, F, batch_first=True)
    sa = layer.self_attn
    norm = layer.norm1
    x = np.ones((1, 3, D), np.float32)
    del layer
    gc.collect()
    sa(x, x, x)                         # the view keeps its parent alive
    norm(x)
    parent = transformer.TransformerEncoderLayer(D, H, F)
    lin = parent.linear1
    out_proj = parent.self_attn.out_proj
    lin.close()                         # detaches the view only
    assert lin.closed and not parent.closed
    with pytest.raises(transformer.ClosedError):
        lin(np.ones((2, D), np.float32))
    parent(np.ones((3, D), np.float32))
    parent.close()
    assert out_proj.closed
    with pytest.raises(transformer.ClosedError):
        out_proj(np.ones((2, D), np.float32))
    with pytest.raises(transformer.ClosedError):
        out_proj.state_dict()


def test_a_copied_view_is_independent(rng):
    layer = transformer.TransformerEncoderLayer(D, H, F)
    layer.load_state_dict({"linear1.weight": rand(rng, F, D)}, strict=False)
    for copied in (copy.deepcopy(layer.linear1),
                   pickle.loads(pickle.dumps(layer.linear1))):
        np.testing.assert_array_equal(copied.weight, layer.linear1.weight)
        copied.weight = np.zeros((F, D), np.float32)
        assert np.abs(layer.linear1.weight).sum() > 0
        assert type(copied) is transformer.Linear


# ---- Linear ------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5), (2, 1, 3, 5),
                                   (2, 2, 1, 3, 5), (0, 5)])
def test_linear_matches_torch(shape, bias, rng):
    ref = randomize(nn.Linear(5, 7, bias=bias), 1)
    ours = transformer.Linear.from_torch(ref)
    x = rand(rng, *shape)
    out = ours(x)
    assert out.shape == shape[:-1] + (7,)
    assert_close(out, ref64(ref)(t64(x)))
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert repr(ours) == f"Linear(in_features=5, out_features=7, bias={bias})"


def test_linear_errors():
    with pytest.raises(transformer.InvalidArgumentError):
        transformer.Linear(0, 3)
    lin = transformer.Linear(4, 3)
    with pytest.raises(transformer.ShapeError):
        lin(np.ones((2, 5), np.float32))
    with pytest.raises(transformer.ShapeError):
        lin(np.float32(1.0))
    assert lin.num_parameters() == 15
    assert lin.forward_macs(2, 3) == 2 * 3 * 4 * 3


# ---- from_torch ----------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(batch_first=True), dict(),
                                dict(kdim=3, vdim=5, batch_first=True),
                                dict(bias=True, dropout=0.0)])
def test_mha_from_torch(kw, rng):
    ref = randomize(nn.MultiheadAttention(D, H, **kw), 2)
    ours = transformer.MultiheadAttention.from_torch(ref)
    assert ours.batch_first == ref.batch_first
    shape = (2, 4) if ref.batch_first else (4, 2)
    q = rand(rng, *shape, D)
    k = rand(rng, *shape, kw.get("kdim", D))
    v = rand(rng, *shape, kw.get("vdim", D))
    out, w = ours(q, k, v)
    ref_out, ref_w = ref64(ref)(t64(q), t64(k), t64(v))
    assert_close(out, ref_out)
    assert_close(w, ref_w)


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True),
                                dict(activation="gelu", batch_first=False),
                                dict(activation=nn.GELU())])
def test_layers_from_torch(kw, rng):
    enc = torch_encoder_layer(seed=10, **kw)
    dec = torch_decoder_layer(seed=11, **kw)
    ours_enc = transformer.TransformerEncoderLayer.from_torch(enc)
    ours_dec = transformer.TransformerDecoderLayer.from_torch(dec)
    assert ours_enc.norm_first == enc.norm_first
    bf = kw.get("batch_first", True)
    x = rand(rng, *((2, 5) if bf else (5, 2)), D)
    mem = rand(rng, *((2, 3) if bf else (3, 2)), D)
    # float64 references built afresh, not deep-copied: torch 1.13's
    # TransformerDecoderLayer.__setstate__ turns an activation *module*
    # into F.relu on copy.
    kw = dict(kw, batch_first=bf)
    enc64 = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, **kw).double()
    dec64 = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, **kw).double()
    enc64.load_state_dict(enc.state_dict())
    dec64.load_state_dict(dec.state_dict())
    assert_close(ours_enc(x), enc64.train()(t64(x)))
    assert_close(ours_dec(x, mem), dec64.train()(t64(x), t64(mem)))


@pytest.mark.parametrize("with_norm", [False, True])
def test_stacks_from_torch(with_norm, rng):
    enc = nn.TransformerEncoder(torch_encoder_layer(), 2,
                                norm=nn.LayerNorm(D) if with_norm else None)
    dec = nn.TransformerDecoder(torch_decoder_layer(), 3,
                                norm=nn.LayerNorm(D) if with_norm else None)
    randomize(enc, 12)
    randomize(dec, 13)
    ours_enc = transformer.TransformerEncoder.from_torch(enc)
    ours_dec = transformer.TransformerDecoder.from_torch(dec)
    assert ours_enc.num_layers == 2 and ours_dec.num_layers == 3
    assert (ours_enc.norm is None) == (not with_norm)
    x, mem = rand(rng, 2, 5, D), rand(rng, 2, 3, D)
    assert_close(ours_enc(x), ref64(enc)(t64(x)))
    assert_close(ours_dec(x, mem), ref64(dec)(t64(x), t64(mem)))


def test_transformer_layer_norm_embedding_from_torch(rng):
    ref = torch_transformer(seed=14, norm_first=True)
    ours = transformer.Transformer.from_torch(ref)
    assert ours.norm_first and ours.num_encoder_layers == 2
    src, tgt = rand(rng, 2, 6, D), rand(rng, 2, 4, D)
    assert_close(ours(src, tgt), ref64(ref)(t64(src), t64(tgt)))
    norm = randomize(nn.LayerNorm((3, D), eps=1e-3), 15)
    ours_norm = transformer.LayerNorm.from_torch(norm)
    assert ours_norm.normalized_shape == (3, D) and ours_norm.eps == 1e-3
    x = rand(rng, 2, 3, D)
    assert_close(ours_norm(x), ref64(norm)(t64(x)))
    plain = transformer.LayerNorm.from_torch(
        nn.LayerNorm(D, elementwise_affine=False))
    assert plain.state_dict() == {}
    emb = randomize(nn.Embedding(11, D, padding_idx=0), 16)
    ours_emb = transformer.Embedding.from_torch(emb)
    ids = np.array([[1, 0, 10]])
    assert_close(ours_emb(ids), ref64(emb)(torch.from_numpy(ids)))


def test_from_torch_refuses_other_modules():
    with pytest.raises(TypeError, match="needs a torch.nn.LayerNorm, not "
                       "torch.nn.Linear"):
        transformer.LayerNorm.from_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="needs a torch.nn.Linear"):
        transformer.Linear.from_torch(np.zeros(3))
    with pytest.raises(TypeError, match="no torch.nn counterpart"):
        transformer.Attention.from_torch(nn.Linear(2, 2))


# ---- messages --------------------------------------------------------------------

def test_torch_template_layer_says_how_to_convert():
    layer = nn.TransformerEncoderLayer(D, H, F)
    with pytest.raises(TypeError) as e:
        transformer.TransformerEncoder(layer, 2)
    msg = str(e.value)
    assert "transformer.TransformerEncoderLayer" in msg
    assert "torch.nn.TransformerEncoderLayer (PyTorch's class)" in msg
    assert "transformer.TransformerEncoderLayer.from_torch(layer)" in msg
    with pytest.raises(TypeError, match=r"TransformerDecoderLayer.from_torch"):
        transformer.TransformerDecoder(nn.TransformerDecoderLayer(D, H, F), 2)
    ours = transformer.TransformerEncoderLayer(D, H, F)
    with pytest.raises(TypeError, match=r"LayerNorm.from_torch\(norm\)"):
        transformer.TransformerEncoder(ours, 2, norm=nn.LayerNorm(D))
    with pytest.raises(TypeError, match="not transformer.TransformerDecoder"
                       "Layer$"):
        transformer.TransformerEncoder(transformer.TransformerDecoderLayer(
            D, H, F), 2)


def test_load_state_dict_of_a_torch_module_says_state_dict():
    ours = transformer.LayerNorm(D)
    with pytest.raises(TypeError, match=r"torch.nn.LayerNorm.*\.state_dict"
                       r"\(\)"):
        ours.load_state_dict(nn.LayerNorm(D))


# ---- load_state_dict errors ------------------------------------------------

def test_load_state_dict_errors_are_runtime_errors_as_torch(rng):
    ref = nn.LayerNorm(D)
    ours = transformer.LayerNorm(D)
    weight = rand(rng, D)
    # strict: missing and unexpected keys
    for bad in ({"weight": weight}, {"weight": weight, "bias": weight,
                                     "extra": weight}):
        with pytest.raises(RuntimeError):
            ref.load_state_dict({k: torch.from_numpy(v)
                                 for k, v in bad.items()})
        with pytest.raises(RuntimeError) as e:
            ours.load_state_dict(bad)
        assert isinstance(e.value, transformer.StateDictError)
        assert isinstance(e.value, transformer.NotFoundError)
        assert isinstance(e.value, KeyError)
    np.testing.assert_array_equal(ours.weight, np.ones(D))  # unchanged
    # strict=False: the same keys reported as torch's, the rest loaded
    bad = {"weight": weight, "extra": weight}
    keys = ref.load_state_dict({k: torch.from_numpy(v)
                                for k, v in bad.items()}, strict=False)
    got = ours.load_state_dict(bad, strict=False)
    assert got.missing_keys == keys.missing_keys == ["bias"]
    assert got.unexpected_keys == keys.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(ours.weight, weight)
    # a wrong shape is an error even with strict=False, in both
    wrong = {"weight": np.ones(D + 1, np.float32)}
    with pytest.raises(RuntimeError):
        ref.load_state_dict({"weight": torch.ones(D + 1)}, strict=False)
    with pytest.raises(RuntimeError) as e:
        ours.load_state_dict(wrong, strict=False)
    assert isinstance(e.value, transformer.ShapeError)
    assert "size mismatch for weight" in str(e.value)
    np.testing.assert_array_equal(ours.weight, weight)


# ---- torch in, torch out -----------------------------------------------------

def test_torch_in_torch_out(rng):
    mha = transformer.MultiheadAttention(D, H, batch_first=True)
    x = rand(rng, 2, 3, D)
    xt = torch.from_numpy(x)
    out, w = mha(xt, xt, xt)
    assert type(out) is torch.Tensor and type(w) is torch.Tensor
    assert out.dtype == torch.float32 and out.shape == (2, 3, D)
    np_out, np_w = mha(x, x, x)
    assert type(np_out) is np.ndarray and type(np_w) is np.ndarray
    np.testing.assert_array_equal(out.numpy(), np_out)
    out, w = mha(xt, xt, xt, need_weights=False)
    assert type(out) is torch.Tensor and w is None
    # a torch mask alone is enough, float64 tensors are computed in float32
    out, _ = mha(x, x, x, key_padding_mask=torch.zeros(2, 3, dtype=bool))
    assert type(out) is torch.Tensor
    assert type(mha(xt.double(), xt.double(), xt.double())[0]) is torch.Tensor

    layer = transformer.TransformerEncoderLayer(D, H, F)   # [L, N, E]
    y = layer(xt)
    assert type(y) is torch.Tensor and y.shape == xt.shape
    np.testing.assert_array_equal(y.numpy(), layer(x))
    assert type(layer(x)) is np.ndarray
    assert type(layer.linear1(xt)) is torch.Tensor
    assert type(layer.norm1(xt)) is torch.Tensor
    model = transformer.Transformer(D, H, 1, 1, F)
    assert type(model(xt, xt)) is torch.Tensor
    emb = transformer.Embedding(5, D)
    assert type(emb(torch.tensor([[1, 2]]))) is torch.Tensor
    assert type(emb(np.array([[1, 2]]))) is np.ndarray
    q = torch.randn(2, H, 3, 4)
    assert type(transformer.scaled_dot_product_attention(q, q, q)) is \
        torch.Tensor
    out, w = transformer.scaled_dot_product_attention(q, q, q,
                                                      need_weights=True)
    assert type(out) is torch.Tensor and type(w) is torch.Tensor
    assert type(transformer.scaled_dot_product_attention(
        q.numpy(), q.numpy(), q.numpy())) is np.ndarray
    att = transformer.Attention(4, H)
    assert type(att(q, q, q)) is torch.Tensor
    lm = transformer.Model(vocab_size=11, d_model=D, n_heads=H, n_layers=1,
                           d_ff=F, context_length=8)
    logits = lm.logits(torch.tensor([[1, 2, 3]]))
    assert type(logits) is torch.Tensor and logits.shape == (1, 3, 11)
    np.testing.assert_array_equal(logits.numpy(),
                                  lm.logits(np.array([[1, 2, 3]])))
    cache = lm.kv_cache()
    assert type(cache.decode(torch.tensor([1, 2]))) is torch.Tensor
    assert type(cache.decode([3])) is np.ndarray


def test_torch_out_shares_the_result_memory(rng):
    norm = transformer.LayerNorm(D)
    x = torch.from_numpy(rand(rng, 3, D))
    y = norm(x)
    arr = y.numpy()                     # the same memory, no copy
    arr[0, 0] = 123.0
    assert y[0, 0].item() == 123.0


def test_low_level_children():
    layer = ll.tfm_encoder_layer_create(ll.tfm_layer_config_default(D, H))
    names = [ll.tfm_module_child_name(layer, i)
             for i in range(ll.tfm_module_child_count(layer))]
    assert names == ["self_attn", "linear1", "linear2", "norm1", "norm2"]
    child = ll.tfm_module_child(layer, "self_attn.out_proj")
    assert ll.tfm_module_kind_of(child) == ll.TFM_MODULE_LINEAR == 15
    with pytest.raises(transformer.NotFoundError):
        ll.tfm_module_child(layer, "self_attn.in_proj")
    ll.tfm_module_free(layer)


def test_model_submodules_recompose_the_logits(rng):
    """A decoder-only model's views (embeddings, causal layers, final
    norm, tied output) give its logits; editing a layer through its view
    changes them."""
    lm = transformer.Model(vocab_size=13, d_model=D, n_heads=H, n_layers=2,
                           d_ff=F, context_length=8, norm_first=True)
    lm.load_state_dict({k: rand(rng, *v.shape) * 0.5
                        for k, v in lm.state_dict().items()})
    assert our_names(lm)[:5] == ["", "token_embedding", "position_embedding",
                                 "layers", "layers.0"]
    assert our_names(lm)[-1] == "norm"
    ids = np.array([[1, 5, 2, 7]])
    x = lm.token_embedding(ids) + lm.position_embedding(np.arange(4)[None])
    for layer in lm.layers:
        x = layer(x, is_causal=True)
    logits = lm.norm(x) @ lm.token_embedding.weight.T
    assert_close(logits, lm.logits(ids))
    before = lm.logits(ids)
    lm.layers[1].linear2.bias = np.ones(D, np.float32)
    assert np.abs(lm.logits(ids) - before).max() > 1e-3
    s2s = transformer.Model(architecture="encoder_decoder", vocab_size=13,
                            d_model=D, n_heads=H, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=F, context_length=8)
    assert [n for n, _ in s2s.named_children()] == ["token_embedding",
                                                    "position_embedding"]
