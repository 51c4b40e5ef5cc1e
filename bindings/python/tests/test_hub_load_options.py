"""Hub checkpoint directories loaded with tfm_model_load_v2's options
(weights.h; formats/hub/hub_plan.c): dtype="auto" keeps a bfloat16 or
float16 checkpoint's weights 16-bit (a tensor that fills its parameter as
it lies is bound to the shard's bytes, the others converted as soon as they
are read), mmap=True uses a float32 tensor where it lies in the shard; a
dtype converts while loading.  The logits are those of the torch float64
reference on the values the files hold (hub_*_reference.py)."""

import numpy as np
import pytest

import transformer
import hub_gpt2_reference as G
import hub_llama_reference as R
from conftest import rel_err

CONFIG = dict(R.CONFIG, hidden_size=64, num_attention_heads=4,
              num_key_value_heads=2, intermediate_size=128)


@pytest.mark.parametrize("dtype,shards", [("BF16", 1), ("F16", 3)])
def test_llama_16_bit_kept(tmp_path, dtype, shards):
    w = R.random_weights(CONFIG, seed=3)
    R.write_checkpoint(str(tmp_path), w, CONFIG, dtype=dtype, shards=shards)
    ref_w = G.rounded(w, dtype)
    ids = [R.PROMPT]
    ref = R.llama_logits(ref_w, CONFIG, ids)
    model = transformer.from_pretrained(tmp_path, dtype="auto")
    # Every matrix stays in the file's type; norms are float32.
    assert model.parameter_dtype("layers.0.linear1.weight") == dtype
    assert model.parameter_dtype("layers.1.self_attn.out_proj.weight") == dtype
    assert model.parameter_dtype("token_embedding.weight") == dtype
    assert model.parameter_dtype("layers.0.norm1.weight") == "F32"
    assert rel_err(model.logits(np.array(ids)), ref) <= 1e-5
    full = transformer.from_pretrained(tmp_path)
    assert full.parameter_dtype("layers.0.linear1.weight") == "F32"
    assert model.get_memory_footprint() < 0.6 * full.get_memory_footprint()


def test_gpt2_transposed_16_bit_kept(tmp_path):
    # GPT-2's Conv1D weights are stored transposed: read as float32, then
    # converted back to bfloat16 (exactly: the values came from bfloat16).
    w = G.random_weights(G.CONFIG, seed=4)
    G.write_checkpoint(str(tmp_path), w, G.CONFIG, dtype="BF16")
    ref_w = G.rounded(w, "BF16")
    model = transformer.from_pretrained(tmp_path, dtype="auto")
    assert model.parameter_dtype("layers.0.linear2.weight") == "BF16"
    assert model.parameter_dtype("layers.0.self_attn.in_proj_weight") == \
        "BF16"
    ref = G.gpt2_logits(ref_w, G.CONFIG, [G.PROMPT])
    assert rel_err(model.logits(np.array([G.PROMPT])), ref) <= 1e-5


def test_llama_float32_mapped_and_converted(tmp_path):
    w = R.random_weights(CONFIG, seed=5)
    R.write_checkpoint(str(tmp_path), w, CONFIG, dtype="F32")
    ids = [R.PROMPT]
    ref = R.llama_logits(G.rounded(w, "F32"), CONFIG, ids)
    mapped = transformer.from_pretrained(tmp_path, dtype="float32", mmap=True)
    assert rel_err(mapped.logits(np.array(ids)), ref) <= 1e-5
    with pytest.raises(Exception, match="file mapping"):
        mapped.train()
    q = transformer.from_pretrained(tmp_path, dtype="q8_0")
    assert q.parameter_dtype("layers.0.linear1.weight") == "Q8_0"
    after = transformer.from_pretrained(tmp_path).quantize("q8_0")
    np.testing.assert_array_equal(q.logits(np.array(ids)),
                                  after.logits(np.array(ids)))
