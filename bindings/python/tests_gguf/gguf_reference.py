"""GGUF files of tiny random GPT-2 and Llama models, written by llama.cpp's
own gguf-py (GGUFWriter, gguf.quants), with the names, keys and layouts of
llama.cpp's convert_hf_to_gguf.py, next to the same weights as a Hugging
Face hub directory (../tests/hub_gpt2_reference.py,
../tests/hub_llama_reference.py) and the float64 forward passes there.

gguf-py is not vendored: it is the gguf-py/ folder of a llama.cpp checkout,
$TFM_LLAMA_CPP when set, else $TFM_LLAMA_CPP_FETCHED (ctest sets it to the
copy tools/fetch-llama-cpp.sh fetches from npm node-llama-cpp into the
build tree).  Without either the tests are skipped.

What convert_hf_to_gguf.py does that is reproduced here (from its
documented semantics, not its code):
  * GPT-2's Conv1D weights [in, out] are transposed to [out, in];
    wte -> token_embd, wpe -> position_embd, h.N.ln_1 -> blk.N.attn_norm,
    attn.c_attn -> attn_qkv, attn.c_proj -> attn_output, ln_2 -> ffn_norm,
    mlp.c_fc -> ffn_up, mlp.c_proj -> ffn_down, ln_f -> output_norm; no
    "output" (tied to token_embd).
  * Llama's q_proj / k_proj rows are permuted within each head from the
    half-split rotary layout (pair j = rows j and j + hd/2) to the
    adjacent one (pair j = rows 2j and 2j + 1): new row h*hd + 2j + s is
    old row h*hd + s*hd/2 + j (s in {0, 1}); names embed_tokens ->
    token_embd, input_layernorm -> attn_norm, q/k/v/o_proj -> attn_q/k/v/
    output, post_attention_layernorm -> ffn_norm, gate/up/down_proj ->
    ffn_gate/up/down, norm -> output_norm, lm_head -> output.
  * 1-D tensors (norms, biases) stay F32; 2-D weights take the file type.
"""

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests"))

import hub_gpt2_reference as G  # noqa: E402
import hub_llama_reference as R  # noqa: E402


def llama_cpp_dir():
    """The llama.cpp checkout holding gguf-py, or None."""
    for d in (os.environ.get("TFM_LLAMA_CPP"),
              os.environ.get("TFM_LLAMA_CPP_FETCHED")):
        if d and os.path.isfile(os.path.join(d, "gguf-py", "gguf",
                                             "__init__.py")):
            return d
    return None


def import_gguf():
    d = llama_cpp_dir()
    if d is None:
        return None
    sys.path.insert(0, os.path.join(d, "gguf-py"))
    import gguf  # noqa: E402
    return gguf


gguf = import_gguf()

# A GPT-2 of width 64 (Q8_0 / Q4_0 rows are blocks of 32), 2 layers.
GPT2_CONFIG = dict(G.CONFIG, n_embd=64, n_head=4, n_layer=2)
# A Llama of width 64 with grouped-query attention (4 heads, 2 kv heads).
LLAMA_CONFIG = dict(R.CONFIG, hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128,
                    num_hidden_layers=2)


def gpt2_tokens():
    """GPT-2's tokenizer of hub_gpt2_reference.write_tokenizer: tokens by
    id, token types (<|endoftext|> control), merges."""
    vocab = {}
    for _, ch in G.bytes_to_unicode():
        vocab[ch] = len(vocab)
    for a, b in G.MERGES:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    tokens = sorted(vocab, key=vocab.get)
    types = [1] * (len(tokens) - 1) + [3]
    return tokens, types, [f"{a} {b}" for a, b in G.MERGES]


def add_gpt2_tokenizer(w, pre="gpt-2"):
    tokens, types, merges = gpt2_tokens()
    w.add_tokenizer_model("gpt2")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)


def stored(a, qtype):
    """(what add_tensor takes, the values the file holds as float64) of the
    float32 array a stored as qtype ("F32", "F16", "Q8_0", "Q4_0"); 1-D
    arrays stay F32."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim == 1 or qtype == "F32":
        return (a, None), a.astype(np.float64)
    if qtype == "F16":
        h = a.astype(np.float16)
        return (h, None), h.astype(np.float64)
    t = getattr(gguf.GGMLQuantizationType, qtype)
    q = gguf.quants.quantize(a, t)
    back = gguf.quants.dequantize(q, t).reshape(a.shape)
    return (q, t), back.astype(np.float64)


def _put(writer, name, a, qtype):
    (data, raw), values = stored(a, qtype)
    if raw is None:
        writer.add_tensor(name, data)
    else:
        writer.add_tensor(name, data, raw_dtype=raw)
    return values


def _finish(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_gpt2(path, weights, config=GPT2_CONFIG, qtype="F32",
               tokenizer=True, drop=None, reshape=None, extra=None,
               arch="gpt2", pre="gpt-2"):
    """A GPT-2 GGUF of weights (GPT2Model names); returns the weights the
    file holds, float64, back in GPT2Model's names and layouts."""
    d, H, L = config["n_embd"], config["n_head"], config["n_layer"]
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(L)
    w.add_context_length(config["n_positions"])
    w.add_embedding_length(d)
    w.add_feed_forward_length(4 * d)
    w.add_head_count(H)
    w.add_layer_norm_eps(config["layer_norm_epsilon"])
    if tokenizer:
        add_gpt2_tokenizer(w, pre)
    names = {"wte.weight": "token_embd.weight",
             "wpe.weight": "position_embd.weight",
             "ln_f.weight": "output_norm.weight",
             "ln_f.bias": "output_norm.bias"}
    per = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv",
           "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
           "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    back = {}
    for k, v in weights.items():
        a = v.numpy()
        conv = k.endswith((".c_attn.weight", ".c_proj.weight",
                           ".c_fc.weight"))
        if conv:
            a = a.T
        if k in names:
            name = names[k]
        else:
            _, i, rest = k.split(".", 2)
            mod, _, leaf = rest.rpartition(".")
            name = f"blk.{i}.{per[mod]}.{leaf}"
        if name == drop:
            continue
        if name == reshape:
            a = a[:-1]
        vals = _put(w, name, a, qtype)
        back[k] = torch.from_numpy(vals.T.copy() if conv else vals)
    for name, a in (extra or {}).items():
        w.add_tensor(name, a)
    _finish(w)
    return back


def permute(a, n_head):
    """Half-split rotary rows -> adjacent pairs, per head (see above)."""
    rows, cols = a.shape
    hd = rows // n_head
    return (a.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2)
            .reshape(rows, cols))


def unpermute(a, n_head):
    rows, cols = a.shape
    hd = rows // n_head
    return (a.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2)
            .reshape(rows, cols))


def write_llama(path, weights, config=LLAMA_CONFIG, qtype="F32",
                tokenizer=True, drop=None, extra=None, keys=None):
    """A Llama GGUF of weights (LlamaModel names); returns the weights the
    file holds, float64, in LlamaModel's names and Hugging Face's layout
    (q and k un-permuted)."""
    d, H = config["hidden_size"], config["num_attention_heads"]
    Hkv = config["num_key_value_heads"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(d)
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_rope_dimension_count(d // H)
    for k, v in (keys or {}).items():
        getattr(w, k)(v)
    if tokenizer:
        add_gpt2_tokenizer(w)
    names = {"embed_tokens.weight": "token_embd.weight",
             "norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
           "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output",
           "post_attention_layernorm": "ffn_norm",
           "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}
    back = {}
    for k, v in weights.items():
        a = v.numpy()
        heads = (H if k.endswith("q_proj.weight") else
                 Hkv if k.endswith("k_proj.weight") else 0)
        if heads:
            a = permute(a, heads)
        if k in names:
            name = names[k]
        else:
            _, i, rest = k.split(".", 2)
            mod, _, leaf = rest.rpartition(".")
            name = f"blk.{i}.{per[mod]}.{leaf}"
        if name == drop:
            continue
        vals = _put(w, name, a, qtype)
        back[k] = torch.from_numpy(unpermute(vals, heads) if heads else vals)
    for name, a in (extra or {}).items():
        w.add_tensor(name, a)
    _finish(w)
    return back


if __name__ == "__main__":
    # A tiny random GGUF model to try a GGUF file with (README.md):
    #   gguf_reference.py OUT.gguf [F32|F16|Q8_0|Q4_0] [gpt2|llama]
    if len(sys.argv) < 2 or gguf is None:
        sys.exit("usage: TFM_LLAMA_CPP=<llama.cpp checkout> gguf_reference.py "
                 "OUT.gguf [F32|F16|Q8_0|Q4_0] [gpt2|llama]")
    qtype = sys.argv[2] if len(sys.argv) > 2 else "Q8_0"
    if (sys.argv[3] if len(sys.argv) > 3 else "gpt2") == "llama":
        write_llama(sys.argv[1], R.random_weights(LLAMA_CONFIG), qtype=qtype)
    else:
        write_gpt2(sys.argv[1], G.random_weights(GPT2_CONFIG), qtype=qtype)
    print(sys.argv[1])
