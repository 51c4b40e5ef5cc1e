"""Issue 44: objects that refer to others (kind 1), strings with a NUL
(kind 7, the bindings' part) and state_dict keys that are not str
(kind 11).

Kind 1, every pair of the Python layer: optimizer -> module (a model, a
module, a sub-module view), LR scheduler -> optimizer, KV cache -> model, generation stream ->
model, the tokenizer of its stop strings and its past_key_values cache,
sub-module view -> parent.  Used after the owner was closed, each raises
ClosedError (never reads freed memory); dropped owners stay alive while a
dependent lives.  The Lua counterpart is bindings/lua/tests/
test_lifetime.lua; tools/reliability.sh (step "bindings") runs both under
valgrind."""

import gc
import pathlib

import numpy as np
import pytest

import transformer

# Without conftest (and so without torch), for the valgrind run:
#   pytest --noconftest test_lifetime_owners.py
REPO = pathlib.Path(__file__).resolve().parents[3]
TEST_MODELS = REPO / "tests" / "models"
DECODER = TEST_MODELS / "decoder_learned_prenorm_gelu.safetensors"
KJV = REPO / "models" / "kjv-char.safetensors"


def trained_layer():
    lay = transformer.TransformerEncoderLayer(8, 2, 16)
    lay.train()
    x = np.arange(24, dtype=np.float32).reshape(1, 3, 8) / 24
    y = lay(x)
    lay.backward(np.ones_like(y))
    return lay


# ---- kind 1: optimizers ------------------------------------------------------

@pytest.mark.parametrize("make", ["model", "module", "view"])
def test_optimizer_after_its_module_was_closed(make):
    if make == "model":
        owner = transformer.Model.load(DECODER)
        owner.train()
        target = owner
    else:
        owner = trained_layer()
        target = owner if make == "module" else owner.get_submodule("linear1")
    opt = transformer.optim.AdamW(target, lr=1e-3)
    opt.zero_grad()
    owner.close()
    calls = [opt.step, opt.zero_grad, opt.state_dict,
             lambda: opt.param_groups[0].__setitem__("lr", 0.5),
             lambda: opt.param_groups[0]["lr"]]
    for call in calls:
        with pytest.raises(transformer.ClosedError, match="is closed"):
            call()


def test_lr_scheduler_after_its_optimizer_or_module_was_closed():
    from transformer.optim import lr_scheduler
    for close in ("module", "optimizer"):
        lay = trained_layer()
        opt = transformer.optim.SGD(lay, lr=0.1)
        sched = lr_scheduler.LambdaLR(opt, lambda epoch: 0.5)
        (lay if close == "module" else opt).close()
        with pytest.raises(transformer.ClosedError, match="is closed"):
            sched.step()


def test_optimizer_keeps_its_module_alive():
    gc.collect()
    base = transformer.live_handles("module")
    lay = trained_layer()
    opt = transformer.optim.SGD(lay, lr=0.1)
    bias = lay.state_dict()["linear1.bias"].copy()
    grad = lay.grad("linear1.bias").copy()
    del lay
    gc.collect()
    assert transformer.live_handles("module") == base + 1
    opt.step()
    # SGD without momentum: p - lr g (torch.optim.SGD)
    np.testing.assert_allclose(opt._module.state_dict()["linear1.bias"],
                               bias - 0.1 * grad, rtol=1e-6, atol=1e-7)
    del opt
    gc.collect()
    assert transformer.live_handles("module") == base
    assert transformer.live_handles("optimizer") == 0


# ---- kind 1: KV caches, streams, views --------------------------------------

def test_stream_after_its_model_was_closed():
    model = transformer.Model.load(KJV)
    it = model.stream("And", max_new_tokens=5)
    next(it)
    model.close()
    with pytest.raises(transformer.ClosedError):
        next(it)


def test_stream_after_the_tokenizer_of_its_stop_strings_was_closed():
    model = transformer.Model.load(KJV)
    it = model.stream(model.tokenizer.encode("And"), max_new_tokens=5,
                      stop_strings=["zzz"])
    next(it)
    model.tokenizer.close()
    with pytest.raises(transformer.ClosedError, match="Tokenizer is closed"):
        next(it)


def test_stream_after_its_cache_was_closed():
    model = transformer.Model.load(KJV)
    cache = model.kv_cache()
    it = model.stream(model.tokenizer.encode("And"), max_new_tokens=5,
                      past_key_values=cache)
    next(it)
    cache.close()
    with pytest.raises(transformer.ClosedError):
        next(it)
    with pytest.raises(transformer.ClosedError):
        cache.decode([1])


def test_cache_after_its_model_was_closed():
    model = transformer.Model.load(KJV)
    cache = model.kv_cache(4)
    model.close()
    with pytest.raises(transformer.ClosedError):
        cache.decode([1])


def test_views_after_their_parent_was_closed():
    lay = transformer.TransformerEncoderLayer(8, 2, 16)
    attn = lay.get_submodule("self_attn")
    out_proj = attn.get_submodule("out_proj")
    lay.close()
    for view in (attn, out_proj):
        for call in (view.state_dict, view.num_parameters,
                     lambda: view.load_state_dict({}, strict=False)):
            with pytest.raises(transformer.ClosedError):
                call()


def test_a_view_keeps_its_parent_alive():
    gc.collect()
    base = transformer.live_handles("module")
    lin = transformer.TransformerEncoderLayer(8, 2, 16).get_submodule(
        "linear1")
    gc.collect()
    assert transformer.live_handles("module") == base + 1
    assert lin.num_parameters() == 16 * 8 + 16
    del lin
    gc.collect()
    assert transformer.live_handles("module") == base


def test_owners_and_dependents_dropped_together():
    gc.collect()
    base = transformer.live_handles()
    for _ in range(3):
        m = transformer.Model.load(KJV)
        m.train()
        keep = [transformer.optim.SGD(m, lr=0.1), m.kv_cache(4),
                m.stream("And", max_new_tokens=3, stop_strings=["q"])]
        next(keep[2])
        keep.append(m)
        del m, keep
        gc.collect()
    assert transformer.live_handles() == base


# ---- kind 7: strings with a NUL ---------------------------------------------

def test_strings_with_a_nul_are_refused_or_taken_whole(tmp_path):
    model = transformer.Model.load(KJV)
    with pytest.raises(transformer.InvalidArgumentError,
                       match="a stop string holds a NUL character"):
        model.generate("And", max_new_tokens=2, stop_strings=["a\0b"])
    with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
        next(model.stream("And", max_new_tokens=2, stop_strings=["\0"]))
    with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
        model.generate(["And", "Go"], max_new_tokens=2,
                       stop_strings=["x\0"])
    with pytest.raises(transformer.InvalidArgumentError,
                       match=r"argument 1 \(a path\) holds a NUL character"):
        transformer.Model.load(str(KJV) + "\0.txt")
    with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
        model.save(str(tmp_path / "m.safetensors") + "\0x")
    assert not list(tmp_path.iterdir())
    # prompts and texts travel with their length: the NUL is a character,
    # U+0000, which this model's vocabulary does not hold (at byte 2)
    with pytest.raises(transformer.InvalidArgumentError,
                       match="U\\+0000 at byte offset 2"):
        model.generate("An\0d", max_new_tokens=2)
    with pytest.raises(transformer.InvalidArgumentError,
                       match="U\\+0000 at byte offset 1"):
        model.tokenizer.encode("a\0b")


# ---- kind 11: state_dict keys that are not str ------------------------------

@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("key", [1, b"weight", ("weight",), None])
def test_state_dict_keys_that_are_not_str(strict, key):
    """torch 1.13 fails on such a key with strict=True and strict=False
    alike (AttributeError / TypeError from key.startswith); here a
    TypeError naming the key, in both modes, nothing loaded."""
    lin = transformer.Linear(2, 2)
    before = lin.state_dict()
    sd = {k: np.zeros_like(v) for k, v in before.items()}
    sd[key] = np.zeros(2, np.float32)
    with pytest.raises(TypeError, match="state_dict keys must be parameter "
                                        "names \\(str\\), not " +
                                        type(key).__name__):
        lin.load_state_dict(sd, strict=strict)
    for k, v in lin.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
