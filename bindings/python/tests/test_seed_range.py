"""Seeds in torch's range or an error, never wrapped (issue 44, kind 9).

torch.manual_seed takes -2**63 .. 2**64 - 1 (a negative seed is taken
modulo 2**64) and raises past it; the bindings took any int modulo 2**64,
so seed=2**64 silently became seed 0.  Every entry point that takes a seed
(manual_seed, generate / stream / Sampler, the attention variant's seed,
a module's dropout_state) now refuses one outside that range, and a
negative one in range equals its value modulo 2**64."""
import numpy as np
import pytest

import transformer

BAD = [2**64, 2**70, -2**63 - 1]


def small():
    return transformer.Model(dict(architecture="decoder_only", vocab_size=20,
                                  d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                  context_length=16))


def test_manual_seed_range():
    for seed in BAD:
        with pytest.raises(transformer.TransformerOverflowError,
                           match=r"outside -2\*\*63 \.\. 2\*\*64 - 1"):
            transformer.manual_seed(seed)
    # in range: -1 is 2**64 - 1, as torch takes it
    transformer.manual_seed(-1)
    a = small().state_dict()
    transformer.manual_seed(2**64 - 1)
    b = small().state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    transformer.manual_seed(0)
    c = small().state_dict()
    assert not all(np.array_equal(a[k], c[k]) for k in a)


def test_generation_seed_range():
    m = small()
    for seed in BAD:
        with pytest.raises(transformer.TransformerOverflowError):
            m.generate([1, 2], 5, temperature=1.0, seed=seed)
        with pytest.raises(transformer.TransformerOverflowError):
            transformer.Sampler(temperature=1.0, seed=seed)
    # 2**64 was seed 0 before: the same draws as seed=0 are no longer given
    # for it, and -1 draws as 2**64 - 1
    assert m.generate([1, 2], 8, temperature=1.0, seed=-1) == \
        m.generate([1, 2], 8, temperature=1.0, seed=2**64 - 1)


def test_dropout_state_range():
    m = small()
    for seed in BAD:
        with pytest.raises(transformer.TransformerOverflowError):
            m.dropout_state = (seed, 0)
        with pytest.raises(transformer.TransformerOverflowError):
            m.dropout_state = (0, seed)
    m.dropout_state = (2**64 - 1, 3)
    assert m.dropout_state == (2**64 - 1, 3)
