"""A tiny random GPT-2 written in the Hugging Face hub layout, and GPT-2's
forward pass in plain torch float64, independent of the library.

The checkpoint is what transformers' GPT2LMHeadModel.save_pretrained
writes (names, shapes and config.json keys of openai-community/gpt2,
scaled down): Conv1D weights stored [in, out], c_attn fused q | k | v,
learned positions wpe, the head tied to wte; with or without the
"transformer." prefix, with the causal-mask buffers "h.<i>.attn.bias" of
the original gpt2 upload, in F32, F16 or BF16, in one model.safetensors or
in shards listed by model.safetensors.index.json.  The tokenizer files are
GPT-2's vocab.json + merges.txt (byte-level BPE over bytes_to_unicode) for
the 256 bytes, a few merges and <|endoftext|>.

The forward pass follows transformers' modeling_gpt2 (GPT2Model,
GPT2Attention, GPT2MLP with NewGELUActivation): h = wte[ids] + wpe[pos];
per block h += c_proj(attn(ln_1(h))), h += mlp(ln_2(h)); attention
softmax(q k^T / sqrt(head_dim), causal) v; gelu_new(x) = 0.5 x (1 +
tanh(sqrt(2/pi) (x + 0.044715 x^3))); logits = ln_f(h) wte^T.

Run as a script: ``hub_gpt2_reference.py DIR`` writes a checkpoint
directory and DIR/reference.json (prompt ids, logits, greedy ids) for the
C and Lua tests.
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, os.pardir, os.pardir, "tools"))
import export_safetensors as tool  # noqa: E402

# The config.json of a scaled-down GPT-2 (keys of openai-community/gpt2).
CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 262,
    "embd_pdrop": 0.1,
    "eos_token_id": 262,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 32,
    "n_embd": 32,
    "n_head": 4,
    "n_inner": None,
    "n_layer": 3,
    "n_positions": 32,
    "resid_pdrop": 0.1,
    "torch_dtype": "float32",
    "vocab_size": 263,
}

MERGES = [("h", "e"), ("l", "l"), ("Ġ", "t"), ("o", "r"), ("Ġt", "he"),
          ("e", "r")]

_DTYPES = {"F32": torch.float32, "F16": torch.float16,
           "BF16": torch.bfloat16}


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (encoder.py), in its
    order: the printable bytes first, then the rest mapped to 256+n."""
    bs = (list(range(ord("!"), ord("~") + 1))
          + list(range(ord("\xa1"), ord("\xac") + 1))
          + list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return list(zip(bs, (chr(c) for c in cs)))


def random_weights(config, seed=0, tied=True):
    """GPT2LMHeadModel's tensors under GPT2Model's names (no prefix), random
    N(0, 0.2) weights (LayerNorm scales around 1), float32."""
    g = torch.Generator().manual_seed(seed)
    d, ff = config["n_embd"], config["n_inner"] or 4 * config["n_embd"]
    V, P = config["vocab_size"], config["n_positions"]

    def rnd(*shape, scale=0.2, mean=0.0):
        return torch.randn(*shape, generator=g) * scale + mean

    w = {"wte.weight": rnd(V, d), "wpe.weight": rnd(P, d, scale=0.1)}
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = rnd(d, scale=0.1, mean=1.0)
        w[p + "ln_1.bias"] = rnd(d, scale=0.1)
        w[p + "attn.c_attn.weight"] = rnd(d, 3 * d)   # Conv1D [in, out]
        w[p + "attn.c_attn.bias"] = rnd(3 * d, scale=0.1)
        w[p + "attn.c_proj.weight"] = rnd(d, d)
        w[p + "attn.c_proj.bias"] = rnd(d, scale=0.1)
        w[p + "ln_2.weight"] = rnd(d, scale=0.1, mean=1.0)
        w[p + "ln_2.bias"] = rnd(d, scale=0.1)
        w[p + "mlp.c_fc.weight"] = rnd(d, ff)
        w[p + "mlp.c_fc.bias"] = rnd(ff, scale=0.1)
        w[p + "mlp.c_proj.weight"] = rnd(ff, d)
        w[p + "mlp.c_proj.bias"] = rnd(d, scale=0.1)
    w["ln_f.weight"] = rnd(d, scale=0.1, mean=1.0)
    w["ln_f.bias"] = rnd(d, scale=0.1)
    if not tied:
        w["lm_head.weight"] = rnd(V, d)
    return w


def rounded(weights, dtype):
    """The weights as the file stores them in dtype, back in float64."""
    return {k: v.to(_DTYPES[dtype]).to(torch.float64)
            for k, v in weights.items()}


def write_safetensors(path, tensors, dtype):
    """A safetensors file as the safetensors library writes it (metadata
    {"format": "pt"}), by tools/export_safetensors.py: numpy's and torch's
    conversions, not the library's writer."""
    tool.save_safetensors(tensors, path, {"format": "pt"}, dtype)


def write_tokenizer(directory):
    """vocab.json (the 256 byte symbols in GPT-2's order, then the merges'
    results, then <|endoftext|>) and merges.txt."""
    vocab = {}
    for _, ch in bytes_to_unicode():
        vocab[ch] = len(vocab)
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(directory, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
        for a, b in MERGES:
            f.write(f"{a} {b}\n")
    return vocab


def cli_text(vocab, prompt, ids):
    """What transformer-generate prints for prompt and the new ids under
    the tokenizer of write_tokenizer (vocab): the prompt's bytes, then each
    token's bytes (GPT-2's byte symbols mapped back by bytes_to_unicode
    inverted; <|endoftext|> as its text), and a newline."""
    byte_of = {ch: b for b, ch in bytes_to_unicode()}
    token_of = {i: t for t, i in vocab.items()}
    eos = vocab["<|endoftext|>"]
    return prompt.encode() + b"".join(
        token_of[i].encode() if i == eos else
        bytes(byte_of[ch] for ch in token_of[i]) for i in ids) + b"\n"


def write_checkpoint(directory, weights, config=None, dtype="F32",
                     prefix="", shards=1, mask_buffers=False, tokenizer=True,
                     extra=None):
    """The directory of a save_pretrained: config.json, the weights (names
    prefixed, e.g. "transformer."; "lm_head.weight" never is) in one file
    or `shards` files with model.safetensors.index.json."""
    config = dict(CONFIG if config is None else config)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    named = {}
    for k, v in weights.items():
        named[k if k == "lm_head.weight" else prefix + k] = v
    if mask_buffers:  # the causal-mask buffers of the original upload
        P = config["n_positions"]
        for i in range(config["n_layer"]):
            named[f"{prefix}h.{i}.attn.bias"] = torch.tril(
                torch.ones(P, P)).view(1, 1, P, P)
    named.update(extra or {})
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"),
                          named, dtype)
    else:
        names = sorted(named)
        per = math.ceil(len(names) / shards)
        weight_map, total = {}, 0
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: named[n] for n in names[s * per:(s + 1) * per]}
            write_safetensors(os.path.join(directory, file), part, dtype)
            for n, t in part.items():
                weight_map[n] = file
                total += t.numel() * (4 if dtype == "F32" else 2)
        with open(os.path.join(directory, "model.safetensors.index.json"),
                  "w") as f:
            json.dump({"metadata": {"total_size": total},
                       "weight_map": weight_map}, f, indent=2)
    if tokenizer:
        write_tokenizer(directory)
    return directory


def _layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_logits(w, config, ids, attention_mask=None):
    """Logits [B, T, V] in float64 of ids [B, T] (GPT2LMHeadModel.forward,
    eval mode, position_ids 0 .. T-1) from the float64 weights w (GPT2Model
    names); attention_mask [B, T] (None: ones) adds (1 - mask) *
    finfo(float64).min to the scores of the padding keys, as GPT2Model
    does."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    B, T = ids.shape
    d, H = config["n_embd"], config["n_head"]
    hd = d // H
    eps = config["layer_norm_epsilon"]
    h = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(T)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        x = _layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = x @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(d, dim=-1)
        q, k, v = (t.view(B, T, H, hd).permute(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (v.size(-1) ** 0.5)
        scores = torch.where(causal, scores,
                             torch.tensor(torch.finfo(scores.dtype).min,
                                          dtype=scores.dtype))
        if attention_mask is not None:
            pad = 1.0 - torch.as_tensor(attention_mask, dtype=scores.dtype)
            scores = scores + (pad * torch.finfo(scores.dtype).min)[
                :, None, None, :]
        a = torch.softmax(scores, dim=-1) @ v
        a = a.permute(0, 2, 1, 3).reshape(B, T, d)
        h = h + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        x = _layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(x @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = _layer_norm(h, w["ln_f.weight"], w["ln_f.bias"], eps)
    head = w.get("lm_head.weight", w["wte.weight"])
    return h @ head.T


def greedy(w, config, prompt, n):
    """n greedy ids after prompt (generate(do_sample=False), no cache:
    the whole sequence each step)."""
    ids = list(prompt)
    for _ in range(n):
        logits = gpt2_logits(w, config, [ids])[0, -1]
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):]


PROMPT = [104, 101, 108, 108, 111, 0, 262, 7, 50]


def main(directory):
    """Writes the checkpoint of the C and Lua tests and its reference."""
    w = random_weights(CONFIG)
    write_checkpoint(directory, w, mask_buffers=True)
    w64 = rounded(w, "F32")
    logits = gpt2_logits(w64, CONFIG, [PROMPT])[0]
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump({"prompt": PROMPT,
                   "logits": logits.numpy().ravel().tolist(),
                   "greedy": greedy(w64, CONFIG, PROMPT, 12)}, f)


if __name__ == "__main__":
    main(sys.argv[1])
