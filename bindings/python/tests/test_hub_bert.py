"""BERT checkpoint directories in the Hugging Face hub layout
(tfm_model_load on a directory, hub_model.c) against BERT's masked-LM
forward pass in plain torch float64 (hub_bert_reference.py): post-norm
encoder, learned positions, the token-type table's row 0, the embedding
LayerNorm, separate query / key / value with biases, erf GELU, and
BertLMPredictionHead's transform, LayerNorm and bias over the tied
word embeddings."""

import copy
import pickle

import numpy as np
import pytest
import torch

import transformer
import hub_gpt2_reference as G
import hub_bert_reference as R
from conftest import rel_err


@pytest.mark.parametrize("dtype,prefix,shards,tied,extras", [
    ("F32", "bert.", 1, True, False),   # BertForMaskedLM.save_pretrained
    ("F16", "bert.", 2, True, True),    # BertForPreTraining: pooler, NSP
    ("BF16", "", 1, False, False),      # unprefixed, untied decoder
])
def test_logits(tmp_path, dtype, prefix, shards, tied, extras):
    config = dict(R.CONFIG, tie_word_embeddings=tied)
    w = R.random_weights(config, seed=3, pooler=extras, nsp=extras)
    extra = ({"bert.embeddings.position_ids":
              torch.arange(40, dtype=torch.int64)[None],
              "cls.predictions.decoder.bias": w["cls.predictions.bias"]}
             if extras else None)
    R.write_checkpoint(str(tmp_path), w, config, dtype=dtype, prefix=prefix,
                       shards=shards, extra=extra)
    ref_w = G.rounded(w, dtype)
    model = transformer.from_pretrained(tmp_path)
    c = model.config
    assert c["architecture"] == "encoder_only"
    assert not c["norm_first"] and c["activation"] == "gelu"
    assert c["tied_embeddings"] == tied
    assert c["type_vocab_size"] == 2 and c["embedding_norm"]
    assert c["final_norm"] is False and c["head_transform"]
    ids = [R.PROMPT, R.PROMPT[::-1]]
    ref = R.bert_logits(ref_w, config, ids)
    assert rel_err(model.logits(np.array(ids)), ref) <= 1e-5
    sd = model.state_dict()
    np.testing.assert_array_equal(
        sd["layers.1.self_attn.in_proj_weight"][32:64],
        ref_w["encoder.layer.1.attention.self.key.weight"].float())
    np.testing.assert_array_equal(
        sd["layers.0.self_attn.in_proj_bias"][64:],
        ref_w["encoder.layer.0.attention.self.value.bias"].float())
    np.testing.assert_array_equal(sd["lm_head.bias"],
                                  ref_w["cls.predictions.bias"].float())
    assert "norm.weight" not in sd


def test_old_gamma_beta_names(tmp_path):
    """Original BERT uploads (bert-base-uncased) name their LayerNorms
    ".gamma" / ".beta"; transformers reads them as ".weight" / ".bias",
    and so does the library: the same logits as the new names."""
    w = R.random_weights(R.CONFIG, seed=4)
    old = {}
    for k, v in w.items():
        if "LayerNorm" in k:
            k = k.replace(".weight", ".gamma").replace(".bias", ".beta")
        old[k] = v
    R.write_checkpoint(str(tmp_path), old)
    model = transformer.from_pretrained(tmp_path)
    ref = R.bert_logits(G.rounded(w, "F32"), R.CONFIG, [R.PROMPT])
    assert rel_err(model.logits(np.array([R.PROMPT])), ref) <= 1e-5


def test_save_load_and_copies_keep_the_architecture(tmp_path):
    """A loaded BERT saved as a model file, pickled, deep-copied or built
    from its config comes back the same model (tfm.type_vocab_size,
    tfm.embedding_norm, tfm.final_norm, tfm.head_transform metadata;
    config keys)."""
    R.write_checkpoint(str(tmp_path / "hub"), R.random_weights(R.CONFIG))
    model = transformer.from_pretrained(tmp_path / "hub")
    want = model.logits(R.PROMPT)
    model.save(tmp_path / "bert.safetensors")
    again = transformer.load_model(str(tmp_path / "bert.safetensors"))
    assert again.config == model.config
    np.testing.assert_array_equal(again.logits(R.PROMPT), want)
    for twin in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        np.testing.assert_array_equal(twin.logits(R.PROMPT), want)
    fresh = transformer.Model(model.config)
    assert sorted(fresh.state_dict()) == sorted(model.state_dict())
    fresh.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(fresh.logits(R.PROMPT), want)


def test_training_gradients_match_autograd(tmp_path):
    """Model.backward of a loaded BERT against torch.autograd through the
    float64 reference: every parameter's gradient, the model parts' too
    (token type row 0 only, the embedding norm, the head transform, its
    norm and the logits' bias), within 1e-4 of the largest magnitude."""
    w = R.random_weights(R.CONFIG, seed=5)
    R.write_checkpoint(str(tmp_path), w)
    ours = transformer.from_pretrained(tmp_path)
    ref_w = {k: v.double().requires_grad_(True) for k, v in w.items()}
    ids = [R.PROMPT, R.PROMPT[::-1]]
    V = R.CONFIG["vocab_size"]
    targets = torch.randint(0, V, (2, len(R.PROMPT)),
                            generator=torch.Generator().manual_seed(7))
    logits = R.bert_logits(ref_w, R.CONFIG, ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                             targets.reshape(-1))
    (dlogits,) = torch.autograd.grad(loss, logits, retain_graph=True)
    loss.backward()
    ours.train()
    assert rel_err(ours.logits(np.array(ids)), logits.detach()) <= 1e-5
    ours.backward(dlogits.float().numpy())

    def close(name, want):
        got = ours.grad(name)
        want = want.numpy()
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= 1e-4, (name, err)

    emb = "embeddings."
    close("token_embedding.weight", ref_w[emb + "word_embeddings.weight"].grad)
    close("position_embedding.weight",
          ref_w[emb + "position_embeddings.weight"].grad)
    close("token_type_embedding.weight",
          ref_w[emb + "token_type_embeddings.weight"].grad)
    for ours_name, hf in [("embedding_norm", emb + "LayerNorm"),
                          ("head_transform",
                           "cls.predictions.transform.dense"),
                          ("head_norm", "cls.predictions.transform.LayerNorm")]:
        close(ours_name + ".weight", ref_w[hf + ".weight"].grad)
        close(ours_name + ".bias", ref_w[hf + ".bias"].grad)
    close("lm_head.bias", ref_w["cls.predictions.bias"].grad)
    for i in range(R.CONFIG["num_hidden_layers"]):
        p, q = f"layers.{i}.", f"encoder.layer.{i}."
        for part in ("weight", "bias"):
            close(p + "self_attn.in_proj_" + part, torch.cat(
                [ref_w[q + f"attention.self.{n}.{part}"].grad
                 for n in ("query", "key", "value")]))
            for ours_name, hf in [("self_attn.out_proj",
                                   "attention.output.dense"),
                                  ("norm1", "attention.output.LayerNorm"),
                                  ("linear1", "intermediate.dense"),
                                  ("linear2", "output.dense"),
                                  ("norm2", "output.LayerNorm")]:
                close(f"{p}{ours_name}.{part}", ref_w[q + hf + "." + part].grad)


def _edit(tmp_path, config=None, drop=None, extra=None, reshape=None):
    w = R.random_weights(R.CONFIG)
    if drop:
        del w[drop]
    if reshape:
        w[reshape] = w[reshape][:-1]
    R.write_checkpoint(str(tmp_path), w, config, extra=extra)
    return str(tmp_path)


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(config=dict(R.CONFIG, num_attention_heads=5)),
     transformer.FormatError, "num_attention_heads"),
    (dict(config=dict(R.CONFIG, position_embedding_type="relative_key")),
     transformer.UnsupportedError, "position_embedding_type"),
    (dict(config=dict(R.CONFIG, is_decoder=True)),
     transformer.UnsupportedError, "is_decoder"),
    (dict(config=dict(R.CONFIG, hidden_act="gelu_quick")),
     transformer.UnsupportedError, "hidden_act"),
    (dict(config=dict(R.CONFIG, layer_norm_eps=1e300)),
     transformer.FormatError, "layer_norm_eps"),
    (dict(config=dict(R.CONFIG, type_vocab_size=3)),
     transformer.FormatError, "bert.embeddings.token_type_embeddings.weight"),
    (dict(drop="cls.predictions.transform.dense.weight"),
     transformer.FormatError, "cls.predictions.transform.dense.weight"),
    (dict(drop="encoder.layer.1.output.LayerNorm.bias"),
     transformer.FormatError, "bert.encoder.layer.1.output.LayerNorm.bias"),
    (dict(reshape="encoder.layer.0.attention.self.key.bias"),
     transformer.FormatError, "bert.encoder.layer.0.attention.self.key.bias"),
    (dict(extra={"bert.encoder.layer.2.output.dense.bias": torch.ones(32)}),
     transformer.FormatError, "bert.encoder.layer.2.output.dense.bias"),
    (dict(config=dict(R.CONFIG, tie_word_embeddings=False)),
     transformer.FormatError, "cls.predictions.decoder.weight"),
])
def test_refused_with_the_name(tmp_path, kwargs, error, words):
    path = _edit(tmp_path, **kwargs)
    with pytest.raises(error, match=words.replace(".", r"\.")):
        transformer.from_pretrained(path)


def test_parts_on_a_decoder_only_model_generate_as_its_logits():
    """The model parts on a GPT-style model: generation through the KV
    cache (tfm__model_embed / tfm__model_head step by step) picks the
    argmax of the full forward pass's last logits at every step, and a
    fresh model's logits' bias starts at zero (nn.Linear's init for the
    transform, BertLMPredictionHead's zero bias)."""
    transformer.manual_seed(11)
    model = transformer.Model(dict(
        architecture="decoder_only", vocab_size=37, d_model=16, n_heads=2,
        d_ff=24, n_layers=2, context_length=32, activation="gelu",
        type_vocab_size=2, embedding_norm=True, final_norm=False,
        head_transform=True))
    sd = model.state_dict()
    assert not sd["lm_head.bias"].any()
    assert "norm.weight" not in sd
    sd["lm_head.bias"] = np.linspace(-1, 1, 37, dtype=np.float32)
    model.load_state_dict(sd)
    prompt = [3, 14, 15, 9, 2]
    ids = list(prompt)
    for _ in range(8):
        ids.append(int(np.argmax(model.logits(np.array(ids))[-1])))
    assert model.generate(prompt, max_new_tokens=8) == ids[len(prompt):]


def test_fill_mask_with_its_vocab_txt(tmp_path):
    """A BERT directory with its vocab.txt loads with the WordPiece
    tokenizer: "[CLS] the cat [MASK] on the mat . [SEP]" by vocab.txt's
    line numbers, and the logits at the [MASK] position are the float64
    reference's."""
    w = R.random_weights(R.CONFIG, seed=9)
    R.write_checkpoint(str(tmp_path), w)
    vocab = R.write_vocab(str(tmp_path))
    model = transformer.from_pretrained(tmp_path)
    assert model.tokenizer is not None
    ids = model.tokenizer.encode("the cat [MASK] on the mat.")
    words = ["[CLS]", "the", "cat", "[MASK]", "on", "the", "mat", ".",
             "[SEP]"]
    assert list(ids) == [vocab.index(t) for t in words]
    at = words.index("[MASK]")
    ref = R.bert_logits(G.rounded(w, "F32"), R.CONFIG, [ids])[0, at]
    got = model.logits(np.array(ids))[at]
    assert rel_err(got, ref) <= 1e-5
    assert int(np.argmax(got)) == int(torch.argmax(ref))


def test_auto_model_for_masked_lm(tmp_path):
    """AutoModelForMaskedLM loads a BERT directory and refuses a
    decoder-only one; AutoModelForCausalLM refuses BERT."""
    R.write_checkpoint(str(tmp_path / "bert"), R.random_weights(R.CONFIG))
    model = transformer.AutoModelForMaskedLM.from_pretrained(tmp_path / "bert")
    assert model.config["architecture"] == "encoder_only"
    with pytest.raises(transformer.UnsupportedError, match="decoder-only"):
        transformer.AutoModelForCausalLM.from_pretrained(tmp_path / "bert")
    gpt = transformer.Model(vocab_size=11, d_model=8, n_heads=2, n_layers=1,
                            context_length=8)
    gpt.save(tmp_path / "gpt.safetensors")
    with pytest.raises(transformer.UnsupportedError, match="encoder-only"):
        transformer.AutoModelForMaskedLM.from_pretrained(
            tmp_path / "gpt.safetensors")
    with pytest.raises(TypeError, match="AutoModelForMaskedLM"):
        transformer.AutoModelForMaskedLM()


def test_command_line_fill_mask(tmp_path):
    """transformer-generate --model DIR --fill-mask TEXT on a BERT
    directory: one line per prediction, the float64 reference's top 5 at
    the [MASK] (softmax probabilities to 4 decimals, the token, the text
    with it in place), as Hugging Face's fill-mask pipeline; --top-k 3
    gives three; a decoder-only model and a text without a mask are
    refused with exit status 1."""
    import os
    import subprocess
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    w = R.random_weights(R.CONFIG, seed=12)
    R.write_checkpoint(str(tmp_path), w)
    vocab = R.write_vocab(str(tmp_path))
    text = "paris is the [MASK] of france."
    ids = [vocab.index(t) for t in
           ["[CLS]", "paris", "is", "the", "[MASK]", "of", "france", ".",
            "[SEP]"]]
    ref = R.bert_logits(G.rounded(w, "F32"), R.CONFIG, [ids])[0, 4]
    p = torch.softmax(ref, dim=-1)
    top = torch.argsort(p, descending=True)[:5]
    r = subprocess.run([cli, "--model", str(tmp_path), "--fill-mask", text],
                       capture_output=True, check=True, text=True)
    lines = r.stdout.splitlines()
    assert len(lines) == 5
    for line, t in zip(lines, top.tolist()):
        score, token, filled = line.split("\t")
        assert abs(float(score) - float(p[t])) <= 1e-4
        assert token == vocab[t]
        assert filled == f"paris is the {vocab[t]} of france."
    r = subprocess.run([cli, "--model", str(tmp_path), "--fill-mask", text,
                        "--top-k", "3"], capture_output=True, check=True,
                       text=True)
    assert len(r.stdout.splitlines()) == 3
    r = subprocess.run([cli, "--model", str(tmp_path), "--fill-mask",
                        "no mask here"], capture_output=True, text=True)
    assert r.returncode == 1 and "mask" in r.stderr
    G.write_checkpoint(str(tmp_path / "gpt2"), G.random_weights(G.CONFIG),
                       tokenizer=True)
    r = subprocess.run([cli, "--model", str(tmp_path / "gpt2"),
                        "--fill-mask", text], capture_output=True, text=True)
    assert r.returncode == 1 and "encoder-only" in r.stderr


def test_token_type_ids_and_attention_mask(tmp_path):
    """logits(ids, attention_mask=, token_type_ids=) (tfm_model_logits_v2)
    against BertModel's forward in float64: sentence-pair segment ids pick
    their token-type rows, and padding keys are masked out of every
    softmax, so a padded sequence's real positions give the logits of the
    unpadded one; bad values are refused, the output untouched."""
    w = R.random_weights(R.CONFIG, seed=6)
    R.write_checkpoint(str(tmp_path), w)
    ref_w = G.rounded(w, "F32")
    model = transformer.from_pretrained(tmp_path)
    ids = np.array([R.PROMPT, R.PROMPT[::-1]])
    T = ids.shape[1]
    types = np.array([[0] * 4 + [1] * (T - 4), [1] * T])
    mask = np.ones_like(ids)
    mask[1, T - 3:] = 0                          # three padding positions
    ref = R.bert_logits(ref_w, R.CONFIG, ids, types, mask)
    got = model.logits(ids, attention_mask=mask, token_type_ids=types)
    assert rel_err(got, ref) <= 1e-5
    # the real positions of the padded row are the short sequence's
    short = R.bert_logits(ref_w, R.CONFIG, ids[1:, :T - 3], types[1:, :T - 3])
    assert rel_err(got[1, :T - 3], short[0]) <= 1e-5
    # one sequence, [L]
    one = model.logits(ids[0], token_type_ids=types[0])
    assert rel_err(one, R.bert_logits(ref_w, R.CONFIG, ids[:1],
                                      types[:1])[0]) <= 1e-5
    # masks as transformers takes them too: bool, float, torch tensors
    for m in (mask.astype(bool), mask.astype(np.float32),
              torch.tensor(mask, dtype=torch.bool)):
        assert np.array_equal(model.logits(ids, attention_mask=m,
                                           token_type_ids=types), got)
    for kwargs, words in [
            (dict(token_type_ids=np.full_like(ids, 2)), "token_type_ids"),
            (dict(attention_mask=np.full_like(ids, 2)), "attention_mask"),
            (dict(attention_mask=mask * 0.5), "attention_mask"),
            (dict(attention_mask=mask[:, :-1]), "shape"),
            # empty arrays were taken as "not given" (unmasked logits)
            (dict(attention_mask=np.zeros((2, 0))), "shape"),
            (dict(token_type_ids=np.zeros((2, 0), np.int64)), "shape"),
            (dict(attention_mask=[]), "dimension")]:
        with pytest.raises((transformer.InvalidArgumentError,
                            transformer.ShapeError), match=words):
            model.logits(ids, **kwargs)
    with pytest.raises(transformer.ShapeError, match="shape"):
        model.logits(ids[0], attention_mask=[])
    gpt2 = tmp_path / "gpt2"
    G.write_checkpoint(str(gpt2), G.random_weights(G.CONFIG))
    gmodel = transformer.from_pretrained(gpt2)
    with pytest.raises(transformer.InvalidArgumentError,
                       match="token-type table"):
        gmodel.logits(ids, token_type_ids=types)
    # a decoder-only model: the causal mask and the padding mask together
    # (left padding: a real position's logits see no padding key; the
    # padding positions' first row sees only padding, where transformers'
    # finite mask and ours differ, so it is left out)
    gw = G.rounded(G.random_weights(G.CONFIG), "F32")
    gmask = np.ones_like(ids)
    gmask[0, :2] = 0
    got = gmodel.logits(ids, attention_mask=gmask)
    want = G.gpt2_logits(gw, G.CONFIG, ids, gmask)
    assert rel_err(got[:, 2:], want[:, 2:]) <= 1e-5
    assert rel_err(got[0, 2:], G.gpt2_logits(gw, G.CONFIG, ids[:1])[0, 2:]) \
        > 1e-3                                    # the mask mattered
