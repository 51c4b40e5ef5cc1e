"""A tiny random BERT written in the Hugging Face hub layout, and BERT's
masked-LM forward pass in plain torch float64, independent of the library.

The checkpoint is what transformers' BertForMaskedLM.save_pretrained
writes (names, shapes and config.json keys of bert-base-uncased, scaled
down): "bert." + BertModel's tensors (embeddings.word_embeddings /
position_embeddings / token_type_embeddings, embeddings.LayerNorm,
encoder.layer.<i>.attention.self.query / key / value,
attention.output.dense and .LayerNorm, intermediate.dense, output.dense
and .LayerNorm) and the unprefixed head "cls.predictions.transform.dense",
"cls.predictions.transform.LayerNorm", "cls.predictions.bias" (the
decoder tied to the word embeddings).

The forward pass follows transformers' modeling_bert (BertEmbeddings,
BertSelfAttention, BertSelfOutput, BertIntermediate, BertOutput,
BertLMPredictionHead), eval mode, token_type_ids zeros and no padding:
h = LN(word[ids] + position[0..T-1] + token_type[0]); per layer
h = LN(h + dense(attn(h))), h = LN(h + out(act(inter(h)))) with attn
softmax(q k^T / sqrt(d / H)) v over every position (no mask); logits =
LN(act(transform(h))) word^T + bias.  act is erf GELU ("gelu").
"""

import json
import math
import os

import torch

import hub_gpt2_reference as G

CONFIG = {
    "architectures": ["BertForMaskedLM"],
    "attention_probs_dropout_prob": 0.1,
    "classifier_dropout": None,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 56,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 40,
    "model_type": "bert",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
    "type_vocab_size": 2,
    "use_cache": True,
    "vocab_size": 263,
}

PROMPT = G.PROMPT


def random_weights(config, seed=0, pooler=False, nsp=False):
    """BertForMaskedLM's tensors (BertModel's without the "bert." prefix,
    the cls.* head as saved), random float32; `pooler` and `nsp` add
    BertForPreTraining's pooler and next-sentence head."""
    g = torch.Generator().manual_seed(seed)
    d, ff = config["hidden_size"], config["intermediate_size"]
    V = config["vocab_size"]

    def rnd(*shape, scale=0.2, mean=0.0):
        return torch.randn(*shape, generator=g) * scale + mean

    def norm(name):
        w[name + ".weight"] = rnd(d, scale=0.1, mean=1.0)
        w[name + ".bias"] = rnd(d, scale=0.1)

    def linear(name, out, inp):
        w[name + ".weight"] = rnd(out, inp)
        w[name + ".bias"] = rnd(out, scale=0.1)

    w = {"embeddings.word_embeddings.weight": rnd(V, d, scale=1.0),
         "embeddings.position_embeddings.weight": rnd(
             config["max_position_embeddings"], d, scale=0.5),
         "embeddings.token_type_embeddings.weight": rnd(
             config["type_vocab_size"], d, scale=0.5)}
    norm("embeddings.LayerNorm")
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            linear(p + "attention.self." + n, d, d)
        linear(p + "attention.output.dense", d, d)
        norm(p + "attention.output.LayerNorm")
        linear(p + "intermediate.dense", ff, d)
        linear(p + "output.dense", d, ff)
        norm(p + "output.LayerNorm")
    if pooler:
        linear("pooler.dense", d, d)
    linear("cls.predictions.transform.dense", d, d)
    norm("cls.predictions.transform.LayerNorm")
    w["cls.predictions.bias"] = rnd(V, scale=0.1)
    if not config.get("tie_word_embeddings", True):
        w["cls.predictions.decoder.weight"] = rnd(V, d)
    if nsp:
        linear("cls.seq_relationship", 2, d)
    return w


def write_checkpoint(directory, weights, config=None, dtype="F32",
                     prefix="bert.", shards=1, extra=None):
    """The directory of a save_pretrained (G.write_checkpoint's layout and
    shards), BERT's config.json, "cls.*" never prefixed, no tokenizer."""
    named = {(k if k.startswith("cls.") else prefix + k): v
             for k, v in weights.items()}
    return G.write_checkpoint(directory, named,
                              CONFIG if config is None else config,
                              dtype=dtype, prefix="", shards=shards,
                              tokenizer=False, extra=extra)


def _ln(x, w, name, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],),
                                          w[name + ".weight"],
                                          w[name + ".bias"], eps)


def _linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _act(config):
    name = config.get("hidden_act", "gelu")
    if name == "gelu":  # erf GELU, transformers' GELUActivation
        return lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name == "gelu_new":
        return G.gelu_new
    if name == "relu":
        return torch.relu
    raise ValueError(name)


def bert_logits(w, config, ids, token_type_ids=None, attention_mask=None):
    """Masked-LM logits [B, T, V] in float64 of ids [B, T]
    (BertForMaskedLM.forward, eval mode) from the float64 weights w
    (random_weights' names); token_type_ids [B, T] (None: zeros) pick the
    token-type rows, attention_mask [B, T] (None: ones) adds
    (1 - mask) * finfo(float64).min to every query's scores of the
    padding keys (BertModel's get_extended_attention_mask)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    B, T = ids.shape
    d, H = config["hidden_size"], config["num_attention_heads"]
    hd, eps, act = d // H, config["layer_norm_eps"], _act(config)
    types = (torch.zeros_like(ids) if token_type_ids is None
             else torch.as_tensor(token_type_ids, dtype=torch.long))
    bias = 0.0
    if attention_mask is not None:
        m = torch.as_tensor(attention_mask, dtype=torch.float64)
        bias = ((1.0 - m) * torch.finfo(torch.float64).min)[:, None, None, :]
    h = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:T]
         + w["embeddings.token_type_embeddings.weight"][types])
    h = _ln(h, w, "embeddings.LayerNorm", eps)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def heads(n):
            return _linear(h, w, p + "attention.self." + n).view(
                B, T, H, hd).transpose(1, 2)
        q, k, v = heads("query"), heads("key"), heads("value")
        s = q @ k.transpose(-1, -2) / math.sqrt(hd) + bias
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        h = _ln(h + _linear(a, w, p + "attention.output.dense"), w,
                p + "attention.output.LayerNorm", eps)
        x = act(_linear(h, w, p + "intermediate.dense"))
        h = _ln(h + _linear(x, w, p + "output.dense"), w,
                p + "output.LayerNorm", eps)
    t = act(_linear(h, w, "cls.predictions.transform.dense"))
    t = _ln(t, w, "cls.predictions.transform.LayerNorm", eps)
    head = w.get("cls.predictions.decoder.weight",
                 w["embeddings.word_embeddings.weight"])
    return t @ head.T + w["cls.predictions.bias"]


WORDS = ["the", "cat", "sat", "on", "mat", "hello", "world", "paris", "is",
         "capital", "of", "france", "##s", "##ing", "a", "."]


def write_vocab(directory, config=None):
    """BERT's vocab.txt (one token a line, the id its line number):
    [PAD] [UNK] [CLS] [SEP] [MASK], WORDS, then filler tokens up to
    vocab_size; returns the list."""
    V = (CONFIG if config is None else config)["vocab_size"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    vocab += [f"tok{i}" for i in range(V - len(vocab))]
    with open(f"{directory}/vocab.txt", "w") as f:
        f.write("\n".join(vocab) + "\n")
    return vocab


def main(directory):
    """Writes a tiny BertForMaskedLM checkpoint with its vocab.txt (the
    README's example) and reference.json (the C test's): the prompt and
    its float64 logits; no greedy ids (an encoder does not generate)."""
    w = random_weights(CONFIG)
    write_checkpoint(directory, w)
    write_vocab(directory)
    logits = bert_logits(G.rounded(w, "F32"), CONFIG, [PROMPT])[0]
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump({"prompt": PROMPT,
                   "logits": logits.numpy().ravel().tolist(),
                   "greedy": []}, f)


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
