"""A tiny random Llama written in the Hugging Face hub layout, and Llama's
forward pass in plain torch float64, independent of the library.

The checkpoint is what transformers' LlamaForCausalLM.save_pretrained
writes (names, shapes and config.json keys of a Llama with grouped-query
attention, e.g. meta-llama/Llama-2-70b-hf or TinyLlama-1.1B, scaled
down): "model." + LlamaModel's tensors, bias-free nn.Linear weights
[out, in], separate q_proj / k_proj / v_proj with num_key_value_heads <
num_attention_heads, RMSNorm weights, gate_proj / up_proj / down_proj,
and an untied "lm_head.weight"; in F32, F16 or BF16, in one
model.safetensors or in shards listed by model.safetensors.index.json.

The forward pass follows transformers' modeling_llama (LlamaModel,
LlamaAttention with LlamaRotaryEmbedding and rotate_half, LlamaMLP,
LlamaRMSNorm): h = embed_tokens[ids]; per layer
h += o_proj(attn(rms(h))), h += down_proj(silu(gate_proj(x)) *
up_proj(x)) with x = rms(h); rms(x) = x / sqrt(mean(x^2) + eps) * w; q
and k rotated by cos/sin of pos * theta^(-2i/head_dim) on the halves
(rotate_half(x) = cat(-x2, x1)); key/value head j serves query heads
j * n_rep .. (j+1) n_rep - 1 (repeat_kv); softmax(q k^T / sqrt(head_dim),
causal) v; logits = rms(h) lm_head^T.
"""

import json
import math
import os

import torch

import hub_gpt2_reference as G

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 48,
    "initializer_range": 0.02,
    "intermediate_size": 80,
    "max_position_embeddings": 64,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 6,
    "num_hidden_layers": 3,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 263,
}


def random_weights(config, seed=0):
    """LlamaForCausalLM's tensors under LlamaModel's names (no "model."
    prefix; "lm_head.weight" when untied), random float32."""
    g = torch.Generator().manual_seed(seed)
    d, ff = config["hidden_size"], config["intermediate_size"]
    H = config["num_attention_heads"]
    kv = config["num_key_value_heads"] * (d // H)
    V = config["vocab_size"]

    def rnd(*shape, scale=0.2, mean=0.0):
        return torch.randn(*shape, generator=g) * scale + mean

    w = {"embed_tokens.weight": rnd(V, d, scale=1.0)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = rnd(d, scale=0.1, mean=1.0)
        w[p + "self_attn.q_proj.weight"] = rnd(d, d)
        w[p + "self_attn.k_proj.weight"] = rnd(kv, d)
        w[p + "self_attn.v_proj.weight"] = rnd(kv, d)
        w[p + "self_attn.o_proj.weight"] = rnd(d, d)
        w[p + "post_attention_layernorm.weight"] = rnd(d, scale=0.1,
                                                       mean=1.0)
        w[p + "mlp.gate_proj.weight"] = rnd(ff, d)
        w[p + "mlp.up_proj.weight"] = rnd(ff, d)
        w[p + "mlp.down_proj.weight"] = rnd(d, ff)
    w["norm.weight"] = rnd(d, scale=0.1, mean=1.0)
    if not config.get("tie_word_embeddings", False):
        w["lm_head.weight"] = rnd(V, d)
    return w


def write_checkpoint(directory, weights, config=None, dtype="F32",
                     prefix="model.", shards=1, tokenizer=True, extra=None):
    """The directory of a save_pretrained (G.write_checkpoint's layout and
    shards), with Llama's config.json."""
    return G.write_checkpoint(directory, weights,
                              CONFIG if config is None else config,
                              dtype=dtype, prefix=prefix, shards=shards,
                              tokenizer=tokenizer, extra=extra)


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_layer(w, config, i, h):
    """Decoder layer i (LlamaDecoderLayer.forward, eval mode, causal) of
    the hidden states h [B, T, d] in float64; weights w as llama_logits."""
    B, T, d = h.shape
    H = config["num_attention_heads"]
    Hkv = config["num_key_value_heads"]
    hd, rep = d // H, H // Hkv
    eps = config["rms_norm_eps"]
    inv_freq = 1.0 / (config["rope_theta"] ** (
        torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    p = f"layers.{i}."
    x = _rms(h, w[p + "input_layernorm.weight"], eps)
    q = (x @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd)
    k = (x @ w[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, hd)
    v = (x @ w[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, hd)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    s = s.masked_fill(~causal, float("-inf"))
    a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
    h = h + a @ w[p + "self_attn.o_proj.weight"].T
    x = _rms(h, w[p + "post_attention_layernorm.weight"], eps)
    gate = torch.nn.functional.silu(x @ w[p + "mlp.gate_proj.weight"].T)
    up = x @ w[p + "mlp.up_proj.weight"].T
    return h + (gate * up) @ w[p + "mlp.down_proj.weight"].T


def llama_logits(w, config, ids):
    """Logits [B, T, V] in float64 of ids [B, T] (LlamaForCausalLM.forward,
    eval mode) from the float64 weights w (LlamaModel names)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    h = w["embed_tokens.weight"][ids]
    for i in range(config["num_hidden_layers"]):
        h = llama_layer(w, config, i, h)
    h = _rms(h, w["norm.weight"], config["rms_norm_eps"])
    head = w.get("lm_head.weight", w["embed_tokens.weight"])
    return h @ head.T


def greedy(w, config, prompt, n):
    """n greedy ids after prompt (no cache: the whole sequence a step)."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(torch.argmax(llama_logits(w, config, [ids])[0, -1])))
    return ids[len(prompt):]


PROMPT = G.PROMPT


def main(directory):
    """Writes the checkpoint of the C and Lua tests and its reference."""
    w = random_weights(CONFIG)
    write_checkpoint(directory, w)
    w64 = G.rounded(w, "F32")
    logits = llama_logits(w64, CONFIG, [PROMPT])[0]
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump({"prompt": PROMPT,
                   "logits": logits.numpy().ravel().tolist(),
                   "greedy": greedy(w64, CONFIG, PROMPT, 12)}, f)


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
