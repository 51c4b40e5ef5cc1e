"""Backward passes at 1, 2 and 3 threads: every gradient of
MultiheadAttention (plain and with the additive score, Shaw and T5), an
encoder layer and the three model architectures (with variants).
The backward's own splits are fixed by the shapes (the weight and input
gradients' products in blocks of 64 rows, the attention backward's key
chunks), so what remains is tfm_set_num_threads's documented exception:
the forward's products are split into rows per thread, which OpenBLAS may
round differently.  The gradients must agree within 1e-5 of their largest
magnitude (a race or a lost block would be far off), and the layers'
here, whose forward splits give the same bits, exactly."""

import numpy as np
import pytest

import transformer


def _grads(make, call, threads):
    old = transformer.get_num_threads()
    try:
        transformer.set_num_threads(threads)
        transformer.manual_seed(1)
        m = make().train()
        out = call(m)
        return m.named_grads(), out
    finally:
        transformer.set_num_threads(old)


def _same(make, call, exact=True):
    ref, ref_out = _grads(make, call, 1)
    for t in (2, 3):
        got, out = _grads(make, call, t)
        assert set(got) == set(ref)
        for name in ref:
            if exact:
                assert np.array_equal(got[name], ref[name]), (t, name)
            else:
                scale = max(1e-30, float(np.abs(ref[name]).max()))
                np.testing.assert_allclose(got[name], ref[name], rtol=0,
                                           atol=1e-5 * scale,
                                           err_msg=f"{t} threads: {name}")
        for a, b in zip(out, ref_out):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)


def _x(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_mha_and_layer_gradients_do_not_depend_on_threads():
    x, g = _x((3, 48, 64), 1), _x((3, 48, 64), 2)

    def mha_call(m):
        m(x, x, x, need_weights=False)
        return m.backward(g)
    _same(lambda: transformer.MultiheadAttention(64, 4, batch_first=True),
          mha_call)

    def layer_call(m):
        m(x, src_mask=None)
        return (m.backward(g),)
    _same(lambda: transformer.TransformerEncoderLayer(
        64, 4, 160, dropout=0.0, batch_first=True), layer_call)


# The learned variants whose backward is the attention kernel's own
# (the additive score's tanh loop, Shaw's table sums, T5's bias sums).
LEARNED = [dict(score="additive", additive_dim=24, n_kv_heads=2),
           dict(relative="shaw", max_distance=5, relative_values=True),
           dict(relative="t5", num_buckets=16, max_distance=32)]


@pytest.mark.parametrize("attention", LEARNED,
                         ids=["additive", "shaw", "t5"])
def test_mha_variant_gradients_do_not_depend_on_threads(attention):
    x, g = _x((3, 48, 64), 1), _x((3, 48, 64), 2)

    def mha_call(m):
        m(x, x, x, need_weights=False, is_causal=True)
        return m.backward(g)
    _same(lambda: transformer.MultiheadAttention(64, 4, batch_first=True,
                                                 **attention), mha_call)


@pytest.mark.parametrize("arch,attention", [
    ("decoder_only", dict(rope="half", n_kv_heads=2)),
    ("encoder_only", dict(rope="half", n_kv_heads=2)),
    ("encoder_decoder", None)] + [("decoder_only", a) for a in LEARNED] +
    [("encoder_only", LEARNED[0])],
    ids=lambda p: p if isinstance(p, str) else
    "-".join(str(v) for v in (p or {}).values()))
def test_model_gradients_do_not_depend_on_threads(arch, attention):
    cfg = dict(architecture=arch, vocab_size=300, d_model=64, n_heads=4,
               d_ff=160, context_length=40)
    if arch == "encoder_decoder":
        cfg.update(n_encoder_layers=2, n_decoder_layers=2)
    else:
        cfg.update(n_layers=2, attention=attention)
    ids = np.random.default_rng(3).integers(0, 300, (3, 37)).astype(np.int32)
    targets = np.roll(ids, -1, 1)

    def call(m):
        if arch == "encoder_decoder":
            loss = m.loss(ids, targets, tgt_ids=ids)
        else:
            loss = m.loss(ids, targets)
        m.backward()
        return (np.float32(loss),)
    _same(lambda: transformer.Model(cfg), call, exact=False)
