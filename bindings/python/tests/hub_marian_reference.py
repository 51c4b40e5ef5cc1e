"""A tiny random Marian MT model written in the Hugging Face hub layout, and
its encoder-decoder forward pass and greedy decoding in plain torch
float64, independent of the library.

The checkpoint is what transformers' MarianMTModel holds (names, shapes and
config.json keys of Helsinki-NLP/opus-mt-en-de, scaled down; names checked
against huggingface/transformers
src/transformers/models/marian/modeling_marian.py): "model.shared.weight"
(the one embedding of encoder, decoder and head,
share_encoder_decoder_embeddings and tie_word_embeddings), the sinusoidal
"model.{encoder,decoder}.embed_positions.weight" of the hub uploads
(save_pretrained itself leaves them out, _keys_to_ignore_on_save),
"model.encoder.layers.<i>." self_attn.{q,k,v,out}_proj,
self_attn_layer_norm, fc1, fc2, final_layer_norm, "model.decoder.layers.<i>."
the same plus encoder_attn.{q,k,v,out}_proj and encoder_attn_layer_norm
(nn.Linear weights [out, in], all with biases), the buffer
"final_logits_bias" [1, V], and optionally the tied duplicates
"model.{encoder,decoder}.embed_tokens.weight" and "lm_head.weight" (in a
pytorch_model.bin state dict; save_pretrained's safetensors drop them).

The forward pass follows modeling_marian (MarianSinusoidalPositionalEmbedding,
MarianAttention, MarianEncoderLayer, MarianDecoderLayer, MarianMTModel),
eval mode, no padding: positions p[pos, j] = sin(pos / 10000^(2i/d)) for
j = i < d/2 and cos(pos / 10000^(2i/d)) for j = d/2 + i (not interleaved);
h = shared[src] sqrt(d) + p[0..S-1]; per encoder layer (post-norm)
h = LN(h + attn(h, h)), h = LN(h + fc2(act(fc1(h)))); no final LayerNorm,
no embedding LayerNorm; y = shared[tgt] sqrt(d) + p[0..T-1]; per decoder
layer y = LN(y + attn(y, y, causal)), y = LN(y + attn(y, h)),
y = LN(y + fc2(act(fc1(y)))); logits = y shared^T + final_logits_bias.
attn(x, m) = out_proj(concat_heads(softmax(q k^T) v)) with
q = q_proj(x) head_dim^-0.5, k = k_proj(m), v = v_proj(m); LayerNorm eps
1e-5 (nn.LayerNorm's default); act is SiLU ("swish").

Run as a script: ``hub_marian_reference.py DIR`` writes a checkpoint
directory and DIR/reference.json (source ids, decoder input ids, their
logits, greedy ids); ``hub_marian_reference.py DIR --with-tokenizer`` a
whole directory with a Marian tokenizer trained on the KJV.
"""

import json
import math
import os

import torch

import hub_bert_reference as B
import hub_gpt2_reference as G

V = 263

# The config.json of a scaled-down opus-mt-en-de (its keys and values;
# pad = decoder start = the last id, eos = bos = 0, pad banned by
# bad_words_ids).
CONFIG = {
    "activation_dropout": 0.0,
    "activation_function": "swish",
    "add_bias_logits": False,
    "add_final_layer_norm": False,
    "architectures": ["MarianMTModel"],
    "attention_dropout": 0.0,
    "bad_words_ids": [[V - 1]],
    "bos_token_id": 0,
    "classif_dropout": 0.0,
    "classifier_dropout": 0.0,
    "d_model": 32,
    "decoder_attention_heads": 4,
    "decoder_ffn_dim": 56,
    "decoder_layerdrop": 0.0,
    "decoder_layers": 2,
    "decoder_start_token_id": V - 1,
    "decoder_vocab_size": V,
    "dropout": 0.1,
    "encoder_attention_heads": 4,
    "encoder_ffn_dim": 56,
    "encoder_layerdrop": 0.0,
    "encoder_layers": 2,
    "eos_token_id": 0,
    "forced_eos_token_id": 0,
    "init_std": 0.02,
    "is_encoder_decoder": True,
    "max_length": 40,
    "max_position_embeddings": 40,
    "model_type": "marian",
    "normalize_before": False,
    "normalize_embedding": False,
    "num_beams": 4,
    "num_hidden_layers": 2,
    "pad_token_id": V - 1,
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "static_position_embeddings": True,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": V,
}

PROMPT = G.PROMPT
# generate() masks the pad id in its input, so the sources hold none: a
# sentence ends with </s> (0) as MarianTokenizer writes it.
SOURCE = [104, 101, 108, 108, 111, 7, 50, 0]
TARGET = [V - 1, 104, 101, 7, 50, 3]


def marian_positions(n_pos, dim):
    """MarianSinusoidalPositionalEmbedding._init_weight's table [n_pos, dim]
    in float64: sines in the first half, cosines in the second."""
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    j = torch.arange(dim, dtype=torch.float64)
    enc = pos / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor")
                          / dim)
    half = dim // 2 + dim % 2
    out = torch.empty(n_pos, dim, dtype=torch.float64)
    out[:, :half] = torch.sin(enc[:, 0::2])
    out[:, half:] = torch.cos(enc[:, 1::2])
    return out


def random_weights(config, seed=0, positions=True, tied_copies=False):
    """MarianMTModel's tensors under their saved names, random float32
    (N(0, 0.2), LayerNorm scales around 1, final_logits_bias nonzero);
    `positions` adds the sinusoidal tables (float32, as the model holds
    them), `tied_copies` the duplicates of model.shared.weight."""
    g = torch.Generator().manual_seed(seed)
    d, P = config["d_model"], config["max_position_embeddings"]

    def rnd(*shape, scale=0.2, mean=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float32)
                * scale + mean)

    def norm(name):
        w[name + ".weight"] = rnd(d, scale=0.1, mean=1.0)
        w[name + ".bias"] = rnd(d, scale=0.1)

    def linear(name, out, inp):
        w[name + ".weight"] = rnd(out, inp)
        w[name + ".bias"] = rnd(out, scale=0.1)

    def attention(name):
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(f"{name}.{n}", d, d)
        norm(name + "_layer_norm")

    w = {"model.shared.weight": rnd(config["vocab_size"], d)}
    for part in ("encoder", "decoder"):
        if positions:
            w[f"model.{part}.embed_positions.weight"] = \
                marian_positions(P, d).float()
        ff = config[part + "_ffn_dim"]
        for i in range(config[part + "_layers"]):
            p = f"model.{part}.layers.{i}."
            attention(p + "self_attn")
            if part == "decoder":
                attention(p + "encoder_attn")
            linear(p + "fc1", ff, d)
            linear(p + "fc2", d, ff)
            norm(p + "final_layer_norm")
    w["final_logits_bias"] = rnd(1, config["vocab_size"])
    if tied_copies:
        for name in ("model.encoder.embed_tokens.weight",
                     "model.decoder.embed_tokens.weight", "lm_head.weight"):
            w[name] = w["model.shared.weight"].clone()
    return w


def write_checkpoint(directory, weights, config=None, dtype="F32", shards=1):
    """The directory of a save_pretrained (G.write_checkpoint's layout and
    shards), Marian's config.json, the names as given, no tokenizer."""
    return G.write_checkpoint(directory, weights,
                              CONFIG if config is None else config,
                              dtype=dtype, shards=shards, tokenizer=False)


_ACT = {"swish": torch.nn.functional.silu, "silu": torch.nn.functional.silu,
        "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
        "relu": torch.relu}


def _attention(w, name, x, memory, heads, causal):
    """MarianAttention: x [B, T, d] attends to memory [B, S, d]."""
    (Bn, T, d), S = x.shape, memory.shape[1]
    hd = d // heads

    def split(t, n):
        return t.view(Bn, n, heads, hd).transpose(1, 2)
    q = split(B._linear(x, w, name + ".q_proj") * hd ** -0.5, T)
    k = split(B._linear(memory, w, name + ".k_proj"), S)
    v = split(B._linear(memory, w, name + ".v_proj"), S)
    s = q @ k.transpose(-1, -2)
    if causal:
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(),
                          float("-inf"))
    a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(Bn, T, d)
    return B._linear(a, w, name + ".out_proj")


def _embed(w, config, part, ids):
    d = config["d_model"]
    scale = math.sqrt(d) if config["scale_embedding"] else 1.0
    pos = w.get(f"model.{part}.embed_positions.weight")
    if pos is None:
        pos = marian_positions(config["max_position_embeddings"], d)
    return w["model.shared.weight"][ids] * scale + pos[:ids.shape[1]]


def marian_logits(w, config, src_ids, tgt_ids):
    """Logits [B, T, V] in float64 of the decoder inputs tgt_ids [B, T]
    given the sources src_ids [B, S] (1-D: one sequence, logits [T, V])
    (MarianMTModel.forward, eval mode, no padding) from the float64 weights
    w (random_weights' names; the positions computed when absent; the head
    w["lm_head.weight"] when config's tie_word_embeddings is false)."""
    src = torch.as_tensor(src_ids, dtype=torch.long)
    tgt = torch.as_tensor(tgt_ids, dtype=torch.long)
    single = src.dim() == 1
    if single:
        src, tgt = src[None], tgt[None]
    act, eps = _ACT[config["activation_function"]], 1e-5
    h = _embed(w, config, "encoder", src)
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        h = B._ln(h + _attention(w, p + "self_attn", h, h,
                                 config["encoder_attention_heads"], False),
                  w, p + "self_attn_layer_norm", eps)
        x = B._linear(act(B._linear(h, w, p + "fc1")), w, p + "fc2")
        h = B._ln(h + x, w, p + "final_layer_norm", eps)
    y = _embed(w, config, "decoder", tgt)
    H = config["decoder_attention_heads"]
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        y = B._ln(y + _attention(w, p + "self_attn", y, y, H, True),
                  w, p + "self_attn_layer_norm", eps)
        y = B._ln(y + _attention(w, p + "encoder_attn", y, h, H, False),
                  w, p + "encoder_attn_layer_norm", eps)
        x = B._linear(act(B._linear(y, w, p + "fc1")), w, p + "fc2")
        y = B._ln(y + x, w, p + "final_layer_norm", eps)
    head = (w["model.shared.weight"] if config.get("tie_word_embeddings", True)
            else w["lm_head.weight"])
    logits = y @ head.T + w["final_logits_bias"]
    return logits[0] if single else logits


def marian_greedy(w, config, src_ids, max_new_tokens, suppress=(),
                  forced_eos=None):
    """The new ids of generate(num_beams=1, do_sample=False,
    max_new_tokens=n) for one source (1-D ids): the target starts with
    decoder_start_token_id; each step takes the first argmax of the last
    position's logits with the ids in `suppress` (bad_words_ids'
    singletons) at -inf, and stops after eos_token_id or n ids (the eos
    included). `forced_eos` (config's forced_eos_token_id, which generate
    applies) makes the n-th id that id. The whole forward each step."""
    tgt = [config["decoder_start_token_id"]]
    eos = config["eos_token_id"]
    for step in range(max_new_tokens):
        logits = marian_logits(w, config, src_ids, tgt)[-1]
        logits[list(suppress)] = float("-inf")
        if forced_eos is not None and step == max_new_tokens - 1:
            tgt.append(forced_eos)
        else:
            tgt.append(int(torch.argmax(logits)))
        if tgt[-1] == eos:
            break
    return tgt[1:]


def write_tokenizer(directory, codes=(), target_only=()):
    """A Marian tokenizer in directory, as the opus-mt uploads hold it:
    source.spm and target.spm, two unigram SentencePiece models (nmt_nfkc,
    Marian's settings) trained by Debian's python3-sentencepiece on the
    odd and the even KJV verses (tests/tokenizers/spm_reference.py's
    trainer; `target_only` lines added to the target's text), vocab.json
    as transformers' convert_marian_to_pytorch writes it ("</s>" 0,
    "<unk>" 1, the language `codes`, the pieces of both models, "<pad>"
    last) and tokenizer_config.json.  Returns the vocab dict.  OSError or
    ValueError when the KJV text is not installed."""
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "..", "..")
    sys.path.insert(0, os.path.join(root, "tests", "tokenizers"))
    import sentencepiece as spm
    import spm_reference
    verses = spm_reference.kjv_text.kjv_verses()
    d = str(directory)
    os.makedirs(d, exist_ok=True)
    src_txt, tgt_txt = os.path.join(d, "src.txt"), os.path.join(d, "tgt.txt")
    with open(src_txt, "w", encoding="utf-8") as f:
        f.write("\n".join(verses[0::2]) + "\n")
    with open(tgt_txt, "w", encoding="utf-8") as f:
        f.write("\n".join(verses[1::2] + list(target_only) * 20) + "\n")
    # Marian's models: unigram, nmt_nfkc, <unk> 0, <s> 1, </s> 2.
    opts = dict(model_type="unigram", normalization_rule_name="nmt_nfkc",
                character_coverage=1.0)
    for name, text, size in (("source", src_txt, 2000),
                             ("target", tgt_txt, 1500)):
        model = spm_reference.train(name, dict(opts, vocab_size=size), text,
                                    d)
        os.rename(model, os.path.join(d, name + ".spm"))
        os.unlink(os.path.join(d, name + ".vocab"))
        os.unlink(text)
    vocab = {"</s>": 0, "<unk>": 1}
    for code in codes:
        vocab[code] = len(vocab)
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(
            model_file=os.path.join(d, name + ".spm"))
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and p not in vocab:
                vocab[p] = len(vocab)
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"source_lang": "en", "target_lang": "de",
                   "separate_vocabs": False, "eos_token": "</s>",
                   "unk_token": "<unk>", "pad_token": "<pad>",
                   "model_max_length": 512,
                   "tokenizer_class": "MarianTokenizer"}, f)
    return vocab


def tokenizer_config(vocab, **changes):
    """CONFIG for a tokenizer's vocab (write_tokenizer's): its size, the
    pad (its last id) as decoder start and banned word."""
    V = len(vocab)
    return dict(CONFIG, vocab_size=V, decoder_vocab_size=V,
                pad_token_id=V - 1, decoder_start_token_id=V - 1,
                bad_words_ids=[[V - 1]], **changes)


def main(directory, with_tokenizer=False):
    """Writes a tiny MarianMTModel checkpoint and reference.json: the
    source ("prompt"), the decoder input, its float64 logits, 12 greedy
    ids with the pad id banned (bad_words_ids), no forced eos ("greedy"),
    and the same with forced_eos_token_id 0 ("greedy_forced").  The pad's
    final_logits_bias is raised by 4, enough that without the ban greedy
    would emit the pad.  with_tokenizer: a whole opus-mt-like directory
    instead, write_tokenizer's files and random weights of its vocabulary
    (num_beams 4, as opus-mt's config.json), no reference.json."""
    if with_tokenizer:
        config = tokenizer_config(write_tokenizer(directory), num_beams=4)
        write_checkpoint(directory, random_weights(config), config)
        return
    w = random_weights(CONFIG)
    w["final_logits_bias"][0, CONFIG["pad_token_id"]] += 4.0
    write_checkpoint(directory, w)
    w64 = G.rounded(w, "F32")
    logits = marian_logits(w64, CONFIG, SOURCE, TARGET)
    banned = [ids[0] for ids in CONFIG["bad_words_ids"]]
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump({"prompt": SOURCE, "decoder_input": TARGET,
                   "logits": logits.numpy().ravel().tolist(),
                   "greedy": marian_greedy(w64, CONFIG, SOURCE, 12,
                                           banned),
                   "greedy_forced": marian_greedy(w64, CONFIG, SOURCE, 12,
                                                  banned, forced_eos=0)}, f)


if __name__ == "__main__":
    import sys
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([],
                                                           ["--with-tokenizer"]):
        sys.exit("usage: hub_marian_reference.py DIR [--with-tokenizer]")
    main(sys.argv[1], with_tokenizer=len(sys.argv) == 3)
