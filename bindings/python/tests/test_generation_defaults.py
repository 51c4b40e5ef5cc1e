"""One decoding default everywhere: generate, Sampler, the Lua module and
transformer-generate decode greedily unless sampling is asked for
(do_sample=True, or temperature / top_k / top_p / seed given), and sample
with temperature 1, top_k 0, top_p 1 and seed 42 by default."""

import os
import subprocess

import numpy as np
import pytest

import transformer
from conftest import TEST_MODELS, model_path_or_skip

SMALL = TEST_MODELS / "decoder_learned_prenorm_gelu.safetensors"


def argmax_continuation(model, prompt, n):
    """Greedy decoding written out from the logits (no generate, no
    Sampler): argmax of the last position, appended, n times."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(model.logits(seq)[-1])))
    return seq[len(prompt):]


def test_default_is_greedy():
    model = transformer.load_model(SMALL)
    want = argmax_continuation(model, [1, 2, 3], 8)
    assert model.generate([1, 2, 3], max_new_tokens=8) == want
    assert model.generate([1, 2, 3], 8, greedy=True) == want
    assert model.generate([1, 2, 3], 8, do_sample=False) == want
    assert model.generate([1, 2, 3], 8, temperature=0) == want
    # do_sample=False / greedy=True win over the sampling options.
    assert model.generate([1, 2, 3], 8, do_sample=False, temperature=1.5,
                          top_k=3, seed=9) == want
    assert model.generate([1, 2, 3], 8, greedy=True, top_p=0.5) == want


def test_sampling_options_imply_sampling_with_the_defaults():
    model = transformer.load_model(SMALL)
    sampled = model.generate([1, 2], 10, do_sample=True)
    # The defaults, spelled out: temperature 1, top_k 0, top_p 1, seed 42.
    explicit = model.generate([1, 2], 10, temperature=1.0, top_k=0,
                              top_p=1.0, seed=42)
    assert sampled == explicit
    for kw in (dict(seed=42), dict(temperature=1.0), dict(top_k=0),
               dict(top_p=1.0), dict(greedy=False),
               dict(do_sample=True, seed=transformer.DEFAULT_SEED)):
        assert model.generate([1, 2], 10, **kw) == sampled, kw
    assert transformer.DEFAULT_SEED == 42
    # Sampling really happens: some seed gives another continuation than
    # the greedy one (the logits of this model are not one-hot).
    greedy = model.generate([1, 2], 10)
    assert any(model.generate([1, 2], 10, seed=s) != greedy
               for s in range(8))


def test_generate_draws_as_sampler_does():
    """generate's sampling is Sampler's, step by step, with the same
    defaults (independently of how generate is written)."""
    model = transformer.load_model(SMALL)
    for kw in ({}, dict(do_sample=True), dict(temperature=0.7, seed=5),
               dict(top_k=4, top_p=0.9)):
        sampler = transformer.Sampler(**kw)
        seq = [1, 2]
        for _ in range(9):          # 11 positions: within the context (12)
            seq.append(sampler(model.logits(seq)[-1]))
        assert model.generate([1, 2], 9, **kw) == seq[2:], kw


def test_sampler_defaults():
    logits = np.array([0.1, 3.0, -1.0, 2.9], np.float32)
    assert all(transformer.Sampler()(logits) == 1 for _ in range(20))
    assert repr(transformer.Sampler()) == "Sampler(greedy=True)"
    a, b = transformer.Sampler(do_sample=True), transformer.Sampler(seed=42)
    assert [a(logits) for _ in range(50)] == [b(logits) for _ in range(50)]
    # Old positional form: (temperature, top_k, top_p, greedy, seed).
    assert transformer.Sampler(1.0, 0, 1.0, True)(logits) == 1


def test_contradictions_are_refused():
    model = transformer.load_model(SMALL)
    for kw in (dict(greedy=True, do_sample=True),
               dict(greedy=False, do_sample=False)):
        with pytest.raises(transformer.InvalidArgumentError,
                           match="contradict"):
            model.generate([1], 2, **kw)
        with pytest.raises(transformer.InvalidArgumentError):
            transformer.Sampler(**kw)
    # Sampling at temperature 0 is not defined (the C library refuses it).
    with pytest.raises(transformer.InvalidArgumentError):
        model.generate([1], 2, temperature=0, do_sample=True)


CLI = os.environ.get("TRANSFORMER_GENERATE")


def cli(*args):
    if not CLI:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    r = subprocess.run([CLI, "--model", model_path_or_skip(), "--prompt",
                        "And God", "--max-tokens", "40", *args],
                       capture_output=True, check=True,
                       env=dict(os.environ, LC_ALL="C.UTF-8"))
    out = r.stdout.decode("utf-8")
    assert out.startswith("And God") and out.endswith("\n")
    return out[len("And God"):-1]


@pytest.mark.parametrize("args, kw", [
    ((), {}),
    (("--greedy", "--temperature", "0.5"), dict(greedy=True,
                                                temperature=0.5)),
    (("--sample",), dict(do_sample=True)),
    (("--seed", "7"), dict(seed=7)),
    (("--temperature", "0.8", "--top-p", "0.9"), dict(temperature=0.8,
                                                     top_p=0.9)),
    (("--top-k", "5", "--seed", "3"), dict(top_k=5, seed=3)),
])
def test_command_line_and_python_agree(args, kw):
    model = transformer.load_model(model_path_or_skip())
    assert cli(*args) == model.generate("And God", 40, **kw)


def test_command_line_refuses_greedy_and_sample():
    if not CLI:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    r = subprocess.run([CLI, "--greedy", "--sample"], capture_output=True)
    assert r.returncode == 1
    assert b"contradict" in r.stderr
