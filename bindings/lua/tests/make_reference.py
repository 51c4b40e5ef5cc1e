#!/usr/bin/python3
"""PyTorch reference values for the Lua bindings' tests.

Writes, next to this script (or into --out DIR):
  reference.lua            a Lua table: inputs, weights (PyTorch state_dict
                           names) and the outputs torch computes for them
  tiny_model.safetensors   a small random character-level model in the
                           libtransformer model format (tools/train_charlm.py's
                           CharTransformer), with its logits and greedy
                           generation in reference.lua

Run with Debian's Python, which has PyTorch 1.13 and numpy:

    /usr/bin/python3 bindings/lua/tests/make_reference.py

Inputs and weights are float32 values (so that Lua and torch start from the
same numbers); torch computes in float64, so the references carry no float32
rounding of their own.  Seeds are fixed: a rerun on the same PyTorch version
gives the same file.

When models/kjv-char.safetensors exists, the shipped model's fingerprint
(size and FNV-1a hash of the file), its logits for a prompt and the greedy
text of tools/reference_generate.py are stored too; the Lua test compares
them only while the fingerprint matches (rerun this script after the model
is retrained).
"""

import argparse
import math
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_safetensors import save_safetensors  # noqa: E402
from train_charlm import CharTransformer  # noqa: E402
import reference_generate  # noqa: E402

torch.set_num_threads(1)


# ---- Lua output ------------------------------------------------------------

def lua_number(x, exact32):
    x = float(x)
    if math.isinf(x):
        return "math.huge" if x > 0 else "-math.huge"
    if math.isnan(x):
        raise ValueError("NaN in reference data")
    if x == int(x) and abs(x) < 2 ** 53:
        return "%d.0" % int(x) if x != 0 else "0.0"
    return ("%.9g" % x) if exact32 else ("%.12g" % x)


def lua_value(v, exact32=True, indent=""):
    """Python value -> Lua source.  Tensors become nested tables."""
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().numpy()
    if isinstance(v, np.ndarray):
        if v.dtype == np.bool_:
            return lua_value(v.tolist(), exact32, indent)
        if v.dtype == np.float32:
            exact32 = True
        elif v.dtype == np.float64:
            exact32 = False
        return lua_value(v.tolist(), exact32, indent)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return lua_number(v, exact32)
    if isinstance(v, str):
        out = ['"']
        for ch in v.encode("utf-8"):
            c = chr(ch)
            if c == '"' or c == "\\":
                out.append("\\" + c)
            elif 32 <= ch < 127:
                out.append(c)
            else:
                out.append("\\%03d" % ch)
        out.append('"')
        return "".join(out)
    if v is None:
        return "nil"
    if isinstance(v, (list, tuple)):
        if v and not isinstance(v[0], (list, tuple, dict)):
            return "{" + ", ".join(lua_value(x, exact32) for x in v) + "}"
        inner = indent + "  "
        return "{\n" + "".join(inner + lua_value(x, exact32, inner) + ",\n"
                               for x in v) + indent + "}"
    if isinstance(v, dict):
        inner = indent + "  "
        items = []
        for k in sorted(v):
            key = k if k.isidentifier() else "[%s]" % lua_value(k)
            items.append("%s%s = %s,\n" % (inner, key, lua_value(v[k], exact32, inner)))
        return "{\n" + "".join(items) + indent + "}"
    raise TypeError("cannot write %r" % type(v))


# ---- Helpers ---------------------------------------------------------------

def seed(name):
    """Deterministic per-case seed."""
    import zlib
    s = zlib.crc32(name.encode())
    torch.manual_seed(s)
    return np.random.default_rng(s)


def f32(rng, *shape, scale=1.0):
    """float32 values, returned as a float64 tensor holding them exactly."""
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    return torch.from_numpy(a.astype(np.float64))


def randomize(module, rng, scale=0.5):
    """Every parameter random (float32 values), LayerNorm weights around 1."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            a = (rng.standard_normal(tuple(p.shape)) * scale).astype(np.float32)
            if "norm" in name and name.endswith("weight"):
                a = (1.0 + a * 0.2).astype(np.float32)
            p.copy_(torch.from_numpy(a.astype(np.float64)))


def state(module):
    return {k: v.detach().numpy().astype(np.float32)
            for k, v in module.state_dict().items()}


def causal_bool(L, S=None):
    S = L if S is None else S
    return torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)


def causal_float(L):
    return torch.triu(torch.full((L, L), float("-inf"), dtype=torch.float64), diagonal=1)


def out64(t):
    return t.detach().numpy().astype(np.float64)


# ---- Cases -------------------------------------------------------------------

def case_mha_self():
    rng = seed("mha_self")
    E, H, B, L = 8, 2, 2, 5
    m = nn.MultiheadAttention(E, H, bias=True, batch_first=True).double().eval()
    randomize(m, rng)
    x = f32(rng, B, L, E)
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[1, 3:] = True
    causal = causal_bool(L)
    add = f32(rng, L, L, scale=0.7)
    # [B*H, L, S] boolean mask, diagonal always visible
    m3 = torch.from_numpy(rng.random((B * H, L, L)) < 0.4)
    m3 = m3 & ~torch.eye(L, dtype=torch.bool)
    fkpm = torch.zeros(B, L, dtype=torch.float64)
    fkpm[0, 1] = -2.5
    fkpm[1, 4] = float("-inf")

    r = {"embed_dim": E, "num_heads": H, "state": state(m), "x": x.numpy().astype(np.float32)}
    o, w = m(x, x, x)
    r["plain"] = {"out": out64(o), "weights": out64(w)}
    o, w = m(x, x, x, key_padding_mask=kpm, attn_mask=causal)
    _, wh = m(x, x, x, key_padding_mask=kpm, attn_mask=causal, average_attn_weights=False)
    r["padding_causal"] = {"key_padding_mask": kpm.numpy(), "out": out64(o),
                           "weights": out64(w), "weights_per_head": out64(wh)}
    o, w = m(x, x, x, attn_mask=add)
    r["additive"] = {"attn_mask": add.numpy().astype(np.float32), "out": out64(o),
                     "weights": out64(w)}
    o, wh = m(x, x, x, attn_mask=m3, average_attn_weights=False)
    r["mask3d"] = {"attn_mask": m3.numpy(), "out": out64(o), "weights_per_head": out64(wh)}
    o, w = m(x, x, x, key_padding_mask=fkpm)
    r["float_padding"] = {"key_padding_mask": fkpm.numpy().astype(np.float32),
                          "out": out64(o), "weights": out64(w)}
    # unbatched input [L, E]
    o, w = m(x[0], x[0], x[0])
    r["unbatched"] = {"out": out64(o), "weights": out64(w)}
    return r


def case_mha_cross():
    rng = seed("mha_cross")
    E, H, B, L, S, kdim, vdim = 8, 4, 2, 3, 6, 5, 3
    m = nn.MultiheadAttention(E, H, bias=True, kdim=kdim, vdim=vdim,
                              batch_first=True).double().eval()
    randomize(m, rng)
    q, k, v = f32(rng, B, L, E), f32(rng, B, S, kdim), f32(rng, B, S, vdim)
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, 4:] = True
    kpm[1, 0] = True
    o, w = m(q, k, v, key_padding_mask=kpm)
    _, wh = m(q, k, v, key_padding_mask=kpm, average_attn_weights=False)
    r = {"embed_dim": E, "num_heads": H, "kdim": kdim, "vdim": vdim, "state": state(m),
         "query": q.numpy().astype(np.float32), "key": k.numpy().astype(np.float32),
         "value": v.numpy().astype(np.float32), "key_padding_mask": kpm.numpy(),
         "out": out64(o), "weights": out64(w), "weights_per_head": out64(wh)}
    # no bias, kdim = vdim = E (packed in_proj), causal over L < S
    m2 = nn.MultiheadAttention(E, 2, bias=False, batch_first=True).double().eval()
    randomize(m2, rng)
    k2, v2 = f32(rng, B, S, E), f32(rng, B, S, E)
    cm = causal_bool(L, S)
    o2, w2 = m2(q, k2, v2, attn_mask=cm)
    r["nobias"] = {"num_heads": 2, "state": state(m2), "key": k2.numpy().astype(np.float32),
                   "value": v2.numpy().astype(np.float32), "attn_mask": cm.numpy(),
                   "out": out64(o2), "weights": out64(w2)}
    return r


def case_layer_norm():
    rng = seed("layer_norm")
    m = nn.LayerNorm(8).double()
    randomize(m, rng)
    x = f32(rng, 2, 3, 8, scale=3.0) + 5.0
    x = x.float().double()
    m2 = nn.LayerNorm(6, eps=1e-3).double()
    randomize(m2, rng)
    x2 = f32(rng, 4, 6)
    return {"d": 8, "state": state(m), "x": x.numpy().astype(np.float32), "out": out64(m(x)),
            "eps_case": {"d": 6, "eps": 1e-3, "state": state(m2),
                         "x": x2.numpy().astype(np.float32), "out": out64(m2(x2))}}


def case_encoder_layer():
    rng = seed("encoder_layer")
    d, h, ff, B, L = 8, 2, 16, 2, 5
    r = {"d_model": d, "nhead": h, "dim_feedforward": ff}
    post = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True).double().eval()
    randomize(post, rng)
    x = f32(rng, B, L, d)
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[0, 4] = True
    kpm[1, 2:] = True
    # grad enabled and parameters requiring grad: torch 1.13's fast path
    # (which zeroes padded positions) stays off.
    r["post"] = {"state": state(post), "x": x.numpy().astype(np.float32),
                 "src_key_padding_mask": kpm.numpy(),
                 "out": out64(post(x, src_key_padding_mask=kpm))}
    pre = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation="gelu",
                                     batch_first=True, norm_first=True,
                                     layer_norm_eps=1e-4).double().eval()
    randomize(pre, rng)
    r["pre_gelu_causal"] = {"state": state(pre), "layer_norm_eps": 1e-4,
                            "out": out64(pre(x, src_mask=causal_float(L)))}
    return r


def case_decoder_layer():
    rng = seed("decoder_layer")
    d, h, ff, B, L, S = 8, 2, 16, 2, 4, 6
    r = {"d_model": d, "nhead": h, "dim_feedforward": ff}
    post = nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, batch_first=True).double().eval()
    randomize(post, rng)
    tgt, mem = f32(rng, B, L, d), f32(rng, B, S, d)
    mkpm = torch.zeros(B, S, dtype=torch.bool)
    mkpm[1, 3:] = True
    r["tgt"] = tgt.numpy().astype(np.float32)
    r["memory"] = mem.numpy().astype(np.float32)
    r["post"] = {"state": state(post), "memory_key_padding_mask": mkpm.numpy(),
                 "out": out64(post(tgt, mem, tgt_mask=causal_float(L),
                                   memory_key_padding_mask=mkpm))}
    pre = nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, activation="gelu",
                                     batch_first=True, norm_first=True).double().eval()
    randomize(pre, rng)
    r["pre_gelu"] = {"state": state(pre), "out": out64(pre(tgt, mem))}
    return r


def case_stacks():
    rng = seed("stacks")
    d, h, ff, B, L, S = 8, 2, 16, 2, 4, 5
    r = {"d_model": d, "nhead": h, "dim_feedforward": ff}
    el = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(el, 2, norm=nn.LayerNorm(d),
                                enable_nested_tensor=False).double().eval()
    randomize(enc, rng)
    src = f32(rng, B, S, d)
    skpm = torch.zeros(B, S, dtype=torch.bool)
    skpm[0, 3:] = True
    r["encoder"] = {"num_layers": 2, "state": state(enc), "src": src.numpy().astype(np.float32),
                    "src_key_padding_mask": skpm.numpy(),
                    "out": out64(enc(src, src_key_padding_mask=skpm))}
    dl = nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=True)
    dec = nn.TransformerDecoder(dl, 2, norm=nn.LayerNorm(d)).double().eval()
    randomize(dec, rng)
    tgt = f32(rng, B, L, d)
    r["decoder"] = {"num_layers": 2, "norm_first": True, "state": state(dec),
                    "tgt": tgt.numpy().astype(np.float32),
                    "out": out64(dec(tgt, src, tgt_mask=causal_float(L),
                                     memory_key_padding_mask=skpm))}
    t = nn.Transformer(d_model=d, nhead=h, num_encoder_layers=2, num_decoder_layers=1,
                       dim_feedforward=ff, dropout=0.0, batch_first=True).double().eval()
    randomize(t, rng)
    out = t(src, tgt, tgt_mask=causal_float(L), src_key_padding_mask=skpm,
            memory_key_padding_mask=skpm)
    r["transformer"] = {"num_encoder_layers": 2, "num_decoder_layers": 1,
                        "state": state(t), "out": out64(out),
                        "square_subsequent_mask": nn.Transformer.generate_square_subsequent_mask(4).numpy()}
    return r


def sdpa_ref(q, k, v, mask=None, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v, PyTorch 2's F.scaled_dot_product_attention
    semantics (boolean mask: True = may attend)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        L, S = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            s = s.masked_fill(~mask, float("-inf"))
        else:
            s = s + mask
    w = torch.softmax(s, dim=-1)
    return w @ v


def case_sdpa():
    rng = seed("sdpa")
    B, H, L, S, D, Dv = 2, 2, 4, 6, 4, 3
    q, k, v = f32(rng, B, H, L, D), f32(rng, B, H, S, D), f32(rng, B, H, S, Dv)
    allow = torch.from_numpy(rng.random((L, S)) < 0.6)
    allow[:, 0] = True
    add = f32(rng, B, H, L, S, scale=0.8)
    add[0, 1, 2, 3] = float("-inf")
    # rank-3 inputs and a mask that broadcasts over the batch: [1, L, S]
    q3, k3, v3 = f32(rng, B, L, D), f32(rng, B, S, D), f32(rng, B, S, Dv)
    allow3 = torch.from_numpy(rng.random((1, L, S)) < 0.6)
    allow3[..., 1] = True
    return {
        "q": q.numpy().astype(np.float32), "k": k.numpy().astype(np.float32),
        "v": v.numpy().astype(np.float32),
        "plain": out64(sdpa_ref(q, k, v)),
        "bool_mask": allow.numpy(), "bool_out": out64(sdpa_ref(q, k, v, allow)),
        "additive_mask": add.numpy().astype(np.float32),
        "additive_out": out64(sdpa_ref(q, k, v, add)),
        "causal_out": out64(sdpa_ref(q, k, v, is_causal=True)),
        "scale": 0.3, "scale_out": out64(sdpa_ref(q, k, v, scale=0.3)),
        "q3": q3.numpy().astype(np.float32), "k3": k3.numpy().astype(np.float32),
        "v3": v3.numpy().astype(np.float32), "mask3": allow3.numpy(),
        "out3": out64(sdpa_ref(q3, k3, v3, allow3)),
    }


def fnv1a32(path):
    h = 0x811C9DC5
    with open(path, "rb") as f:
        data = f.read()
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h, len(data)


TINY = {}


def tiny_model(out_dir):
    """A random model small enough to commit, in the libtransformer format."""
    vocab = "\n ,.abcdefghijklmnop"
    V, d, h, n_layers, ff, ctx = len(vocab), 16, 2, 2, 32, 12
    for attempt in range(100):
        rng = seed("tiny_model_%d" % attempt)
        model = CharTransformer(V, d, h, n_layers, ff, ctx, dropout=0.0)
        randomize(model, rng, scale=0.4)
        model = model.double().eval()
        prompt = [vocab.index(c) for c in "hello, "]
        n_new = 20  # longer than the context: the window slides
        # greedy in float64, with a margin between the two best logits
        seq, new, margin = list(prompt), [], float("inf")
        with torch.no_grad():
            for _ in range(n_new):
                last = model(torch.tensor([seq[-ctx:]]))[0, -1]
                top = torch.topk(last, 2).values
                margin = min(margin, float(top[0] - top[1]))
                nxt = int(torch.argmax(last))
                seq.append(nxt)
                new.append(nxt)
        if margin > 1e-3 and len(set(new)) > 3:
            break
    else:
        raise RuntimeError("no tiny model with decisive greedy steps")
    ids = torch.tensor([[vocab.index(c) for c in "abc, def"],
                        [vocab.index(c) for c in "ponm.\n a"]])
    with torch.no_grad():
        logits = model(ids)
    tensors = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    meta = {
        "format": "libtransformer", "tfm.architecture": "decoder_only",
        "tfm.vocab_size": str(V), "tfm.d_model": str(d), "tfm.n_heads": str(h),
        "tfm.n_layers": str(n_layers), "tfm.d_ff": str(ff), "tfm.context_length": str(ctx),
        "tfm.norm_first": "true", "tfm.activation": "gelu", "tfm.layer_norm_eps": "1e-05",
        "tfm.positional": "learned", "tfm.tied_embeddings": "true",
        "tfm.embedding_scale": "false", "tfm.tokenizer": "char", "tfm.vocab": vocab,
    }
    path = os.path.join(out_dir, "tiny_model.safetensors")
    save_safetensors(tensors, path, meta, dtype="F32")
    TINY["model"], TINY["ids"] = model, ids
    return {"file": "tiny_model.safetensors", "vocab": vocab, "context_length": ctx,
            "num_parameters": sum(int(v.size) for v in tensors.values()),
            "ids": ids.numpy().tolist(), "logits": out64(logits),
            "prompt": "hello, ", "max_new_tokens": n_new,
            "greedy_ids": new, "greedy_text": "hello, " + "".join(vocab[i] for i in new),
            "greedy_margin": margin}


def case_mha_extra():
    """PyTorch's add_bias_kv / add_zero_attn (self-attention with a key
    padding mask, weights over S + 2 keys) and F.multi_head_attention_
    forward's static_k / static_v ([B * H, S, head_dim], S != L)."""
    rng = seed("mha_extra")
    E, H, B, L, S = 8, 2, 2, 4, 3
    m = nn.MultiheadAttention(E, H, add_bias_kv=True, add_zero_attn=True,
                              batch_first=True).double().eval()
    randomize(m, rng)
    x = f32(rng, B, L, E)
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[1, 2:] = True
    o, w = m(x, x, x, key_padding_mask=kpm)
    r = {"embed_dim": E, "num_heads": H, "state": state(m),
         "x": x.numpy().astype(np.float32),
         "key_padding_mask": kpm.numpy(), "out": out64(o),
         "weights": out64(w)}
    p = nn.MultiheadAttention(E, H, batch_first=True).double().eval()
    randomize(p, rng)
    sk = f32(rng, B * H, S, E // H)
    sv = f32(rng, B * H, S, E // H)
    xt = x.transpose(0, 1)           # F.multi_head_attention_forward: [L, B, E]
    o2, w2 = nn.functional.multi_head_attention_forward(
        xt, xt, xt, E, H, p.in_proj_weight, p.in_proj_bias, None, None,
        False, 0.0, p.out_proj.weight, p.out_proj.bias, training=False,
        static_k=sk, static_v=sv)
    r["static"] = {"state": state(p), "static_k": sk.numpy().astype(np.float32),
                   "static_v": sv.numpy().astype(np.float32),
                   "out": out64(o2.transpose(0, 1)), "weights": out64(w2)}
    return r


def case_training():
    """Gradients and optimizer steps for the Lua training interface:
    Linear and the post-norm encoder layer given grad_output (loss =
    sum(g * y)), three AdamW steps of the Linear (lr 0.1, torch's other
    defaults), and the tiny model's cross-entropy (label smoothing 0.1,
    targets the ids shifted left, the last ignored), its gradients and
    the losses of three AdamW steps (lr 1e-2)."""
    rng = seed("training")
    r = {}
    lin = nn.Linear(4, 3).double()
    randomize(lin, rng)
    x = f32(rng, 2, 4)
    g = f32(rng, 2, 3)
    start = state(lin)
    xg = x.clone().requires_grad_()
    (lin(xg) * g).sum().backward()
    r["linear"] = {"state": start, "x": x.numpy().astype(np.float32),
                   "grad_output": g.numpy().astype(np.float32),
                   "grad_input": out64(xg.grad),
                   "grad_weight": out64(lin.weight.grad),
                   "grad_bias": out64(lin.bias.grad)}
    lin.load_state_dict({k: torch.from_numpy(v.astype(np.float64))
                         for k, v in start.items()})
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (lin(x) * g).sum().backward()
        opt.step()
    r["linear"]["adamw_3_steps"] = {k: out64(v) for k, v in lin.state_dict().items()}
    d, h, ff, B, L = 8, 2, 16, 2, 5
    layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0,
                                       batch_first=True).double()
    randomize(layer, rng)
    x = f32(rng, B, L, d)
    g = f32(rng, B, L, d)
    xg = x.clone().requires_grad_()
    (layer(xg) * g).sum().backward()
    r["encoder_layer"] = {"d_model": d, "nhead": h, "dim_feedforward": ff,
                          "state": state(layer),
                          "x": x.numpy().astype(np.float32),
                          "grad_output": g.numpy().astype(np.float32),
                          "grad_input": out64(xg.grad),
                          "grads": {n: out64(p.grad)
                                    for n, p in layer.named_parameters()}}
    model, ids = TINY["model"], TINY["ids"]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    targets = torch.cat([ids[:, 1:], torch.full((ids.shape[0], 1), -100)], 1)

    def loss_of():
        logits = model(ids)
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
            ignore_index=-100, label_smoothing=0.1)
    model.zero_grad()
    loss = loss_of()
    loss.backward()
    grads = {n: out64(p.grad) for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        step_loss = loss_of()
        losses.append(float(step_loss))
        step_loss.backward()
        opt.step()
    model.load_state_dict(start)
    r["model"] = {"ids": ids.numpy().tolist(),
                  "targets": targets.numpy().tolist(), "loss": float(loss),
                  "grads": grads, "adamw_losses": losses}
    return r


def kjv_model():
    path = os.path.join(ROOT, "models", "kjv-char.safetensors")
    if not os.path.exists(path):
        return None
    h, size = fnv1a32(path)
    model, vocab, _ = reference_generate.load_model(path)
    prompt = "In the beginning"
    stoi = {c: i for i, c in enumerate(vocab)}
    ids = [stoi[c] for c in prompt]
    new, _ = reference_generate.generate(model, ids, 60)  # float32, as the tool
    with torch.no_grad():
        logits = model.double()(torch.tensor([ids]))[0, -1]
    return {"fnv1a32": h, "size": size, "prompt": prompt,
            "greedy_text": prompt + "".join(vocab[i] for i in new),
            "last_logits": out64(logits)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE, help="output directory (default: this one)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ref = {
        "torch_version": torch.__version__,
        "mha_self": case_mha_self(),
        "mha_cross": case_mha_cross(),
        "layer_norm": case_layer_norm(),
        "encoder_layer": case_encoder_layer(),
        "decoder_layer": case_decoder_layer(),
        "stacks": case_stacks(),
        "sdpa": case_sdpa(),
        "tiny_model": tiny_model(args.out),
    }
    ref["training"] = case_training()
    ref["mha_extra"] = case_mha_extra()
    kjv = kjv_model()
    if kjv is not None:
        ref["kjv"] = kjv
    path = os.path.join(args.out, "reference.lua")
    with open(path, "w") as f:
        f.write("-- Generated by make_reference.py (PyTorch %s); do not edit.\n"
                % torch.__version__)
        f.write("return " + lua_value(ref) + "\n")
    print("wrote %s (%d bytes)%s" % (path, os.path.getsize(path),
                                      "" if kjv else "; no models/kjv-char.safetensors yet"))


if __name__ == "__main__":
    main()
