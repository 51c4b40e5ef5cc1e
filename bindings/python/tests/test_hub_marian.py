"""Marian (opus-mt) checkpoint directories in the Hugging Face hub layout
(tfm_model_load on a directory, hub_model.c) against MarianMTModel's
forward pass in plain torch float64 (hub_marian_reference.py): a post-norm
encoder-decoder without final norms, Marian's sinusoidal position table,
embeddings scaled by sqrt(d_model), separate q / k / v projections with
biases, SiLU, the shared table as the head and final_logits_bias."""

import copy
import json
import os
import pickle

import numpy as np
import pytest
import torch

import transformer
import hub_gpt2_reference as G
import hub_marian_reference as R
from conftest import rel_err


@pytest.mark.parametrize("dtype,shards,positions,tied_copies,tied", [
    ("F32", 1, True, False, True),   # the hub uploads: position tables
    ("BF16", 2, False, True, True),  # save_pretrained: none; tied copies
    ("F16", 1, True, False, False),  # an untied lm_head
])
def test_logits(tmp_path, dtype, shards, positions, tied_copies, tied):
    config = dict(R.CONFIG, tie_word_embeddings=tied)
    w = R.random_weights(config, seed=5, positions=positions,
                         tied_copies=tied_copies)
    if not tied:
        w["lm_head.weight"] = torch.randn(R.V, 32, generator=torch.Generator()
                                          .manual_seed(9)) * 0.2
    R.write_checkpoint(str(tmp_path), w, config, dtype=dtype, shards=shards)
    ref_w = G.rounded(w, dtype)
    model = transformer.from_pretrained(tmp_path)
    c = model.config
    assert c["architecture"] == "encoder_decoder"
    assert c["n_encoder_layers"] == 2 and c["n_decoder_layers"] == 2
    assert not c["norm_first"] and c["activation"] == "silu"
    assert c["embedding_scale"] and c["positional"] == "learned"
    assert c["final_norm"] is False and c["head_bias"] is True
    assert c["tied_embeddings"] == tied
    assert c["layer_norm_eps"] == np.float32(1e-5)
    src = [R.SOURCE, R.SOURCE[::-1]]
    tgt = [R.TARGET, R.TARGET[:1] + R.TARGET[1:][::-1]]
    ref = R.marian_logits(ref_w, config, src, tgt)
    got = model.logits(np.array(src), np.array(tgt))
    assert rel_err(got, ref) <= 1e-5
    sd = model.state_dict()
    np.testing.assert_array_equal(
        sd["transformer.decoder.layers.1.multihead_attn.in_proj_weight"]
        [32:64],
        ref_w["model.decoder.layers.1.encoder_attn.k_proj.weight"].float())
    np.testing.assert_array_equal(
        sd["transformer.encoder.layers.0.self_attn.in_proj_bias"][64:],
        ref_w["model.encoder.layers.0.self_attn.v_proj.bias"].float())
    np.testing.assert_array_equal(sd["lm_head.bias"],
                                  ref_w["final_logits_bias"][0].float())
    # Marian's table: the checkpoint's as stored, else computed (float32
    # of float64 sin / cos)
    table = ref_w.get("model.encoder.embed_positions.weight")
    if table is None:
        table = R.marian_positions(40, 32)
    np.testing.assert_allclose(sd["position_embedding.weight"],
                               table.float().numpy(), rtol=0, atol=1e-7)
    assert not any(k.endswith(".norm.weight") for k in sd)


def test_greedy_translation_equals_the_reference(tmp_path):
    """generate(num_beams=1) of an encoder-decoder model starts the target
    with decoder_start_token_id (the pad id) and stops at eos, the 12th
    token forced to eos (config.json's forced_eos_token_id): token for
    token the reference's greedy decoding."""
    w = R.random_weights(R.CONFIG, seed=2)
    R.write_checkpoint(str(tmp_path), w)
    w64 = G.rounded(w, "F32")
    model = transformer.from_pretrained(tmp_path)
    for src in (R.SOURCE, R.SOURCE[:3] + [0]):
        want = R.marian_greedy(w64, R.CONFIG, src, 12, forced_eos=0)
        got = model.generate(src, max_new_tokens=12, num_beams=1,
                             decoder_start_token_id=R.V - 1,
                             eos_token_id=0, suppress_tokens=[])
        assert got == want


def test_generation_defaults_suppress_the_pad(tmp_path):
    """A checkpoint's decoder_start_token_id, eos_token_id and
    bad_words_ids [[pad]] (config.json, or generation_config.json when
    there is one) are generate's defaults: with the pad's logit raised so
    that plain greedy would emit it, the defaults give the reference's
    greedy decoding with the pad banned (transformers' generate for
    Marian), and suppress_tokens=[] plain greedy."""
    w = R.random_weights(R.CONFIG)
    w["final_logits_bias"][0, R.V - 1] += 4.0
    R.write_checkpoint(str(tmp_path), w)
    w64 = G.rounded(w, "F32")
    model = transformer.from_pretrained(tmp_path)
    assert model.generation_config == {"decoder_start_token_id": R.V - 1,
                                       "forced_eos_token_id": 0,
                                       "bos_token_id": 0, "num_beams": 4,
                                       "max_length": 40, "eos_token_id": 0,
                                       "bad_words_ids": [R.V - 1]}
    # what generate leaves unset comes from the config, as in
    # transformers: 4 beams, max_length 40 = the start token + 39 new
    # (the comparisons with the greedy reference below ask for 1 beam)
    assert model.generate(R.SOURCE) == model.generate(
        R.SOURCE, max_new_tokens=39, num_beams=4)
    assert model.generate(R.SOURCE, max_new_tokens=12) == model.generate(
        R.SOURCE, max_new_tokens=12, num_beams=4)
    # forced_eos_token_id 0 (opus-mt's): the last allowed token is </s>
    forced = R.marian_greedy(w64, R.CONFIG, R.SOURCE, 12, [R.V - 1],
                             forced_eos=0)
    assert forced[-1] == 0 and len(forced) == 12
    assert model.generate(R.SOURCE, max_new_tokens=12, num_beams=1) == forced
    assert model.generate(R.SOURCE, max_new_tokens=12, num_beams=3)[-1] == 0
    banned = R.marian_greedy(w64, R.CONFIG, R.SOURCE, 12, [R.V - 1])
    with open(tmp_path / "config.json") as f:
        cfg = json.load(f)
    del cfg["forced_eos_token_id"]
    with open(tmp_path / "config.json", "w") as f:
        json.dump(cfg, f)
    model = transformer.from_pretrained(tmp_path)
    plain = R.marian_greedy(w64, R.CONFIG, R.SOURCE, 12)
    assert R.V - 1 in plain and R.V - 1 not in banned
    assert model.generate(R.SOURCE, max_new_tokens=12, num_beams=1) == banned
    # suppress_tokens adds to bad_words_ids, as in transformers
    assert model.generate(R.SOURCE, max_new_tokens=12, num_beams=1,
                          suppress_tokens=[]) == banned
    also = R.marian_greedy(w64, R.CONFIG, R.SOURCE, 12, [R.V - 1, banned[0]])
    assert model.generate(R.SOURCE, max_new_tokens=12, num_beams=1,
                          suppress_tokens=[banned[0]]) == also
    # an eos list of one is that id; the class's dict is not shared
    with pytest.raises(TypeError):
        transformer.Model.generation_config["eos_token_id"] = 7
    # generation_config.json alone, when present (here: no ban)
    with open(tmp_path / "generation_config.json", "w") as f:
        json.dump({"decoder_start_token_id": R.V - 1, "eos_token_id": 0}, f)
    model = transformer.from_pretrained(tmp_path)
    assert model.generate(R.SOURCE, max_new_tokens=12) == plain   # 1 beam
    with open(tmp_path / "generation_config.json", "w") as f:
        json.dump({"decoder_start_token_id": R.V - 1, "eos_token_id": [0],
                   "bad_words_ids": [[R.V - 1]]}, f)
    model = transformer.from_pretrained(tmp_path)
    assert model.generation_config["eos_token_id"] == 0
    assert model.generate(R.SOURCE, max_new_tokens=12) == banned  # 1 beam
    with pytest.raises(transformer.InvalidArgumentError, match="suppress"):
        model.generate(R.SOURCE, max_new_tokens=3, suppress_tokens=[R.V])


def test_save_load_and_copies_keep_the_architecture(tmp_path):
    R.write_checkpoint(str(tmp_path / "hub"), R.random_weights(R.CONFIG))
    model = transformer.from_pretrained(tmp_path / "hub")
    src, tgt = np.array([R.SOURCE]), np.array([R.TARGET])
    want = model.logits(src, tgt)
    model.save(str(tmp_path / "m.safetensors"))
    again = transformer.load_model(str(tmp_path / "m.safetensors"))
    assert again.config == model.config
    np.testing.assert_array_equal(again.logits(src, tgt), want)
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model)),
                 transformer.Model(model.config)):
        assert twin.config == model.config
    np.testing.assert_array_equal(copy.deepcopy(model).logits(src, tgt), want)


def test_training_gradients_match_autograd(tmp_path):
    """seq2seq backward reaches final_logits_bias (lm_head.bias), the shared
    table, every layer and the position table: torch autograd of the
    float64 reference."""
    config = dict(R.CONFIG)
    w = R.random_weights(config, seed=4)
    R.write_checkpoint(str(tmp_path), w)
    model = transformer.from_pretrained(tmp_path)
    model.train()
    src, tgt = np.array([R.SOURCE]), np.array([R.TARGET])
    w64 = {k: v.double().requires_grad_(True) for k, v in w.items()}
    ref = R.marian_logits(w64, config, src, tgt)
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64)
    (ref * g).sum().backward()
    assert rel_err(model.logits(src, tgt), ref.detach()) <= 1e-5
    model.backward(g.float().numpy())

    def close(name, want):
        got, want = model.grad(name), want.numpy()
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= 1e-4, (name, err)

    close("lm_head.bias", w64["final_logits_bias"].grad[0])
    close("token_embedding.weight", w64["model.shared.weight"].grad)
    qkv = torch.cat([w64[f"model.encoder.layers.0.self_attn.{n}_proj.weight"]
                     .grad for n in "qkv"])
    close("transformer.encoder.layers.0.self_attn.in_proj_weight", qkv)
    close("transformer.decoder.layers.1.norm3.weight",
          w64["model.decoder.layers.1.final_layer_norm.weight"].grad)
    close("transformer.decoder.layers.0.multihead_attn.out_proj.bias",
          w64["model.decoder.layers.0.encoder_attn.out_proj.bias"].grad)
    # the table is a buffer in transformers; ours learns it: both decoder
    # and encoder rows
    pos = (w64["model.encoder.embed_positions.weight"].grad
           + w64["model.decoder.embed_positions.weight"].grad)
    close("position_embedding.weight", pos)


def _edit(tmp_path, config=None, drop=None, extra=None, reshape=None,
          copies=False):
    w = R.random_weights(R.CONFIG, tied_copies=copies)
    if drop:
        del w[drop]
    if extra:
        w[extra] = torch.zeros(3)
    if reshape:
        w[reshape] = w[reshape][:-1]
    R.write_checkpoint(str(tmp_path), w, dict(R.CONFIG, **(config or {})))
    return str(tmp_path)


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(config={"share_encoder_decoder_embeddings": False}),
     transformer.UnsupportedError, "share_encoder_decoder_embeddings"),
    (dict(config={"decoder_vocab_size": 100}), transformer.UnsupportedError,
     "decoder_vocab_size"),
    (dict(config={"decoder_ffn_dim": 64}), transformer.UnsupportedError,
     "decoder_ffn_dim"),
    (dict(config={"activation_function": "mish"}),
     transformer.UnsupportedError, "mish"),
    (dict(config={"encoder_layers": 3}), transformer.FormatError,
     "model.encoder.layers.2.self_attn.q_proj.weight"),
    (dict(drop="final_logits_bias"), transformer.FormatError,
     "final_logits_bias"),
    (dict(drop="model.decoder.layers.1.encoder_attn.v_proj.bias"),
     transformer.FormatError, "encoder_attn.v_proj.bias"),
    (dict(extra="model.encoder.layernorm_embedding.weight"),
     transformer.FormatError, "layernorm_embedding"),
    (dict(reshape="model.encoder.embed_positions.weight"),
     transformer.FormatError, "embed_positions"),
    # the copies transformers ties or recomputes are checked too
    (dict(reshape="model.decoder.embed_positions.weight"),
     transformer.FormatError, "model.decoder.embed_positions.weight"),
    (dict(copies=True, reshape="model.decoder.embed_tokens.weight"),
     transformer.FormatError, "model.decoder.embed_tokens.weight"),
    (dict(copies=True, reshape="lm_head.weight"),
     transformer.FormatError, "lm_head.weight"),
])
def test_refused_with_the_name(tmp_path, kwargs, error, words):
    with pytest.raises(error, match=words.replace(".", r"\.")):
        transformer.from_pretrained(_edit(tmp_path, **kwargs))


def test_command_line_translate(tmp_path):
    """transformer-generate --model DIR --translate TEXT on an opus-mt-like
    directory (a Marian tokenizer trained on the KJV, random weights of its
    vocabulary): the source encoded as MarianTokenizer does
    (sentencepiece's pieces through vocab.json, </s> appended), greedy
    decoding with config.json's decoder start, eos and banned pad (the
    reference's marian_greedy), printed as target.spm decodes the pieces
    with the special tokens skipped; config.json's num_beams is the
    default beam count, --num-beams overrides it; an encoder-only model is
    refused."""
    import subprocess
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    spm = pytest.importorskip("sentencepiece")
    try:
        vocab = R.write_tokenizer(tmp_path)
    except (OSError, ValueError) as e:  # no bible-kjv
        pytest.skip(f"KJV text not available: {e}")
    config = R.tokenizer_config(vocab, num_beams=1)
    w = R.random_weights(config, seed=8)
    R.write_checkpoint(str(tmp_path), w, config)
    sp_src = spm.SentencePieceProcessor(model_file=str(tmp_path / "source.spm"))
    sp_tgt = spm.SentencePieceProcessor(model_file=str(tmp_path / "target.spm"))
    inv = {i: p for p, i in vocab.items()}
    text = "And God said, Let there be light."
    src = [vocab.get(p, 1) for p in sp_src.encode(text, out_type=str)] + [0]
    pad = len(vocab) - 1
    want = R.marian_greedy(G.rounded(w, "F32"), config, src, 10, [pad],
                           forced_eos=0)
    pieces = [inv[i] for i in want if i not in (0, 1, pad)]
    want_text = sp_tgt.decode_pieces(pieces).replace("\u2581", " ").strip()
    r = subprocess.run([cli, "--model", str(tmp_path), "--translate", text,
                        "--max-tokens", "10"], capture_output=True,
                       check=True, text=True)
    assert r.stdout == want_text + "\n"
    assert f"{len(src)} source tokens, {len(want)} target tokens, 1 beams" \
        in r.stderr
    # the checkpoint's num_beams, and --num-beams, reach the beam search
    model = transformer.from_pretrained(tmp_path)
    beams = model.generate(src, max_new_tokens=10, num_beams=3)
    r = subprocess.run([cli, "--model", str(tmp_path), "--translate", text,
                        "--max-tokens", "10", "--num-beams", "3"],
                       capture_output=True, check=True, text=True)
    assert r.stdout == model.tokenizer.decode(
        beams, skip_special_tokens=True) + "\n"
    assert "3 beams" in r.stderr
    R.write_checkpoint(str(tmp_path), w, dict(config, num_beams=3))
    r = subprocess.run([cli, "--model", str(tmp_path), "--translate", text,
                        "--max-tokens", "10"], capture_output=True,
                       check=True, text=True)
    assert "3 beams" in r.stderr
    # max_length 1 leaves nothing to generate; sampling options refused
    R.write_checkpoint(str(tmp_path), w, dict(config, max_length=1))
    r = subprocess.run([cli, "--model", str(tmp_path), "--translate", text],
                       capture_output=True, check=True, text=True)
    assert r.stdout == "\n"
    r = subprocess.run([cli, "--model", str(tmp_path), "--translate", text,
                        "--sample"], capture_output=True, text=True)
    assert r.returncode == 1 and "beam search" in r.stderr
    import hub_bert_reference as BR
    BR.write_checkpoint(str(tmp_path / "bert"), BR.random_weights(BR.CONFIG))
    BR.write_vocab(str(tmp_path / "bert"))
    r = subprocess.run([cli, "--model", str(tmp_path / "bert"),
                        "--translate", text], capture_output=True, text=True)
    assert r.returncode == 1 and "encoder-decoder" in r.stderr
    # generation_config.json read as strictly as the library reads JSON: a
    # key twice (cJSON would take the first num_beams, Python's json the
    # last) and a number past the double range (cJSON: infinity) refused
    R.write_checkpoint(str(tmp_path), w, config)
    for body, words in (('{"num_beams": 1, "num_beams": 4}',
                         'the key "num_beams" appears twice'),
                        ('{"length_penalty": 1e400}',
                         "out of the range of a double"),
                        # bytes that are not UTF-8, NUL escaped (cJSON
                        # cut the string there) or raw: refused, as the
                        # library refuses them (they were taken)
                        (b'{"num_beams": 1, "x": "\xff"}',
                         "holds bytes that are not UTF-8 at byte 23"),
                        (b'{"num_beams": 1, "x": "\xc0\x80"}',
                         "holds bytes that are not UTF-8 at byte 23"),
                        ('{"num_beams": 1, "x": "a\\u0000b"}',
                         'holds "\\u0000" (NUL) in a string at byte 24'),
                        (b'{"num_beams": 1, "x": "a\0"}',
                         "holds a NUL byte at byte 24")):
        f = tmp_path / "generation_config.json"
        if isinstance(body, bytes):
            f.write_bytes(body)
        else:
            f.write_text(body)
        r = subprocess.run([cli, "--model", str(tmp_path), "--translate",
                            text], capture_output=True, text=True)
        assert r.returncode == 1 and words in r.stderr, r.stderr
    (tmp_path / "generation_config.json").unlink()


def test_generation_config_in_python_and_on_the_command_line(tmp_path):
    """A generation_config.json with what transformers' generate applies --
    num_beams, max_length, min_length (counting the decoder start),
    length_penalty, early_stopping, renormalize_logits, bos_token_id in
    place of an absent decoder_start_token_id, forced_eos_token_id and
    bad_words_ids -- gives the same translation from generate() with no
    arguments and from transformer-generate --translate, equal to
    generate with those arguments spelled out; what the beam search cannot
    apply (no_repeat_ngram_size) is said on stderr, not dropped
    silently."""
    import subprocess
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    pytest.importorskip("sentencepiece")
    try:
        vocab = R.write_tokenizer(tmp_path)
    except (OSError, ValueError) as e:  # no bible-kjv
        pytest.skip(f"KJV text not available: {e}")
    config = R.tokenizer_config(vocab, num_beams=1)
    w = R.random_weights(config, seed=9)
    pad = len(vocab) - 1
    w["final_logits_bias"][0, pad] += 3.0       # the ban matters
    w["final_logits_bias"][0, 0] += 1.0         # eos comes up early
    R.write_checkpoint(str(tmp_path), w, config)
    gen = {"bos_token_id": pad, "eos_token_id": 0, "forced_eos_token_id": 0,
           "bad_words_ids": [[pad]], "num_beams": 3, "max_length": 9,
           "min_length": 4, "length_penalty": 0.5, "early_stopping": True,
           "renormalize_logits": True, "no_repeat_ngram_size": 3}
    with open(tmp_path / "generation_config.json", "w") as f:
        json.dump(gen, f)
    model = transformer.from_pretrained(tmp_path)
    text = "And God said, Let there be light."
    src = model.tokenizer.encode(text)
    spelled = model.generate(src, max_new_tokens=8, num_beams=3,
                             min_new_tokens=3, length_penalty=0.5,
                             early_stopping=True, renormalize_logits=True,
                             decoder_start_token_id=pad, eos_token_id=0,
                             forced_eos_token_id=0, suppress_tokens=[pad])
    assert model.generate(src) == spelled
    assert len(spelled) >= 3
    r = subprocess.run([cli, "--model", str(tmp_path), "--translate", text],
                       capture_output=True, check=True, text=True)
    assert r.stdout == model.tokenizer.decode(
        spelled, skip_special_tokens=True) + "\n"
    assert "3 beams" in r.stderr
    assert "no_repeat_ngram_size is not applied" in r.stderr
    # each setting matters here (else the comparison above proves little)
    args = dict(max_new_tokens=8, num_beams=3, min_new_tokens=3,
                length_penalty=0.5, early_stopping=True,
                renormalize_logits=True, decoder_start_token_id=pad,
                eos_token_id=0, forced_eos_token_id=0, suppress_tokens=[pad],
                return_scores=True)
    full = model.generate(src, **args)
    for change in (dict(renormalize_logits=False), dict(length_penalty=2.0),
                   dict(min_new_tokens=0), dict(num_beams=1)):
        assert model.generate(src, **dict(args, **change)) != full, change
