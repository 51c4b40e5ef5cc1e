#!/usr/bin/env python3
"""Reference cases for attention variants in whole models: small
decoder-only models with random weights whose logits are computed in
float64 by a forward pass written here from the papers' equations
(include/transformer/variants.h gives them with their references).

For each case NAME this writes into --out (default tests/models/variants):
  NAME.safetensors      a libtransformer model file whose "tfm.attention.*",
                        "tfm.positional" and "tfm.positional_base" metadata
                        select the variant (model.h), with a character
                        tokenizer (tokenizer.h) for transformer-generate
  NAME.ref.safetensors  "ids" [B, L] as F32 values and the expected "logits"
                        [B, L, vocab_size]

The blocks are those of tools/make_model_fixtures.py (post- or pre-norm
encoder layers under a causal mask, final LayerNorm, tied or untied head;
its LM class, metadata() and randomize() are reused), with the
self-attention replaced by VariantAttention below.  Nothing here calls
libtransformer: the C test (tests/test_model_variants.c) compares the
library's full pass and KV-cache decoding with these numbers.

    /usr/bin/python3 tools/make_variant_models.py --out tests/models/variants
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_safetensors import save_safetensors  # noqa: E402
from make_model_fixtures import LM, metadata, randomize, sinusoidal  # noqa: E402

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- positional encodings ---------------------------------------------------

def sinusoidal_concat(L, d, base):
    """fairseq / tensor2tensor layout: with h = d // 2 frequencies
    w_i = base^(-i / (h - 1)), PE(p, i) = sin(p w_i), PE(p, h + i) =
    cos(p w_i); an odd d leaves the last column 0."""
    h = d // 2
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    freq = torch.pow(torch.tensor(float(base), dtype=torch.float64),
                     -torch.arange(h, dtype=torch.float64) / (h - 1))
    pe = torch.zeros(L, d, dtype=torch.float64)
    pe[:, :h] = torch.sin(pos * freq)
    pe[:, h:2 * h] = torch.cos(pos * freq)
    return pe


# ---- the variants' position terms -------------------------------------------

def rope(x, pos, layout, base, dims):
    """RoFormer eq. (34) on the first `dims` columns of x [..., L, d_k]:
    pair i (i < dims/2) turns by theta = p * base^(-2i/dims).  Pairs are
    columns (2i, 2i+1) ("adjacent") or (i, i + dims/2) ("half")."""
    half = dims // 2
    i = torch.arange(half, dtype=torch.float64)
    theta = pos[:, None] * torch.pow(torch.tensor(float(base),
                                                  dtype=torch.float64),
                                     -2.0 * i / dims)
    cos, sin = torch.cos(theta), torch.sin(theta)          # [L, dims/2]
    y = x.clone()
    if layout == "adjacent":
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = a * cos - b * sin
        y[..., 1:dims:2] = a * sin + b * cos
    else:
        a, b = x[..., :half], x[..., half:dims]
        y[..., :half] = a * cos - b * sin
        y[..., half:dims] = a * sin + b * cos
    return y


def t5_bucket(dist, num_buckets, max_distance, bidirectional):
    """T5's bucket of the distance key - query (Raffel et al. 2020, 2.1):
    with both signs, half the buckets are for d > 0; of the rest, the
    first half holds the distances 0 .. n/2-1 exactly and the other half
    spreads n/2 .. max_distance logarithmically (larger ones in the last
    bucket).  One-sided (a decoder), d > 0 counts as 0."""
    n = num_buckets
    out = 0
    if bidirectional:
        n //= 2
        if dist > 0:
            out = n
        mag = abs(dist)
    else:
        mag = max(-dist, 0)
    exact = n // 2
    if mag < exact:
        return out + mag
    spread = int(math.log(mag / exact) / math.log(max_distance / exact)
                 * (n - exact))
    return out + min(exact + spread, n - 1)


def alibi_slopes(n):
    """Press et al. 2022, section 3: m_h = 2^(-8h/n), h = 1 .. n, for a power
    of two; otherwise those of the largest power of two n' below n, then
    every other slope (the 1st, 3rd, ...) of the 2n' sequence."""
    def geometric(k):
        return [2.0 ** (-8.0 * h / k) for h in range(1, k + 1)]
    p = 1 << (n.bit_length() - 1)
    if p == n:
        return geometric(n)
    return geometric(p) + geometric(2 * p)[0::2][:n - p]


def splitmix64(x):
    """SplitMix64's output for the state x (Steele et al. 2014): one step of
    the Weyl sequence, then the finaliser."""
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def bigbird_random(seed, a, r, n):
    """Random key block r of query block a among n blocks (variants.h)."""
    return splitmix64(((seed ^ (a * GOLDEN)) + r) & MASK64) % n


def visible(att, p, j):
    """Whether query position p may see key position j (causal)."""
    if j > p:
        return False
    kind = att.get("sparsity", "none")
    if kind == "sliding_window":
        return p - j <= att["window"] or j < att.get("n_global", 0) \
            or p < att.get("n_global", 0)
    if kind == "bigbird":
        bs = att["block_size"]
        a, b = p // bs, j // bs
        g = att.get("n_global", 0)
        if abs(a - b) <= att["window"] or a < g or b < g:
            return True
        return any(bigbird_random(att.get("seed", 0), a, r, a + 1) == b
                   for r in range(att.get("n_random_blocks", 0)))
    return True


# ---- the model ----------------------------------------------------------------

class VariantAttention(nn.Module):
    """Causal multi-head self-attention with a variant (variants.h):
      a_ij = scale_h q_i.k_j + scale_h q_i.r^K(j-i) + b_h(j-i),
      o_i  = sum_j softmax_j(a_ij) (v_j + r^V(j-i)),
    over the keys `visible` allows; query head h reads key/value head
    h // (H / H_kv).  Parameters are named as libtransformer names them."""

    def __init__(self, d, H, att):
        super().__init__()
        self.att, self.H, self.dk = att, H, d // H
        self.Hkv = att.get("n_kv_heads", H)
        kv = self.Hkv * self.dk
        self.in_proj_weight = nn.Parameter(torch.empty(d + 2 * kv, d))
        self.in_proj_bias = nn.Parameter(torch.empty(d + 2 * kv))
        self.out_proj = nn.Linear(d, d)
        if att.get("score") == "learned_temperature":
            self.temperature = nn.Parameter(torch.empty(H))
        rel = att.get("relative", "none")
        if rel == "shaw":
            n = 2 * att["max_distance"] + 1
            self.relative_key = nn.Embedding(n, self.dk)
            if att.get("relative_values"):
                self.relative_value = nn.Embedding(n, self.dk)
        elif rel == "t5":
            self.relative_attention_bias = nn.Embedding(
                att.get("num_buckets", 32), H)

    def forward(self, x):
        att, H, Hkv, dk = self.att, self.H, self.Hkv, self.dk
        B, L, d = x.shape
        kv = Hkv * dk
        w, b = self.in_proj_weight, self.in_proj_bias
        q = F.linear(x, w[:d], b[:d]).view(B, L, H, dk).transpose(1, 2)
        k = F.linear(x, w[d:d + kv], b[d:d + kv]).view(B, L, Hkv, dk)
        v = F.linear(x, w[d + kv:], b[d + kv:]).view(B, L, Hkv, dk)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        pos = torch.arange(L, dtype=torch.float64)
        if att.get("rope", "none") != "none":
            dims = att.get("rope_dims", dk)
            base = att.get("rope_base", 10000.0)
            q = rope(q, pos, att["rope"], base, dims)
            k = rope(k, pos, att["rope"], base, dims)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)

        if att.get("score") == "learned_temperature":
            scale = 1.0 / self.temperature
        else:
            scale = torch.full((H,), att.get("scale", 1.0 / math.sqrt(dk)),
                               dtype=torch.float64)
        scale = scale[:, None, None]
        logits = scale * (q @ k.transpose(-1, -2))          # [B, H, L, L]
        dist = [[j - i for j in range(L)] for i in range(L)]
        dist_t = torch.tensor(dist)
        rel = att.get("relative", "none")
        if rel == "shaw":
            kmax = att["max_distance"]
            idx = dist_t.clamp(-kmax, kmax) + kmax
            rk = self.relative_key.weight[idx]               # [L, L, dk]
            logits = logits + scale * torch.einsum("bhid,ijd->bhij", q, rk)
        elif rel == "t5":
            buckets = torch.tensor([[t5_bucket(
                dd, att.get("num_buckets", 32), att.get("max_distance", 128),
                att.get("bidirectional", True)) for dd in row]
                for row in dist])
            bias = self.relative_attention_bias.weight[buckets]  # [L, L, H]
            logits = logits + bias.permute(2, 0, 1)
        elif rel == "alibi":
            m = torch.tensor(alibi_slopes(H), dtype=torch.float64)
            logits = logits - m[:, None, None] * dist_t.abs().double()
        seen = torch.tensor([[visible(att, i, j) for j in range(L)]
                             for i in range(L)])
        logits = logits.masked_fill(~seen, float("-inf"))
        weights = torch.softmax(logits, dim=-1)
        out = weights @ v
        if rel == "shaw" and att.get("relative_values"):
            rv = self.relative_value.weight[idx]
            out = out + torch.einsum("bhij,ijd->bhid", weights, rv)
        return self.out_proj(out.transpose(1, 2).reshape(B, L, d))


class VariantLM(LM):
    """make_model_fixtures.LM (decoder-only) with VariantAttention in every
    block and the sinusoidal layouts with a base."""

    def __init__(self, cfg):
        super().__init__(cfg)
        for layer in self.layers:
            layer.self_attn = VariantAttention(cfg["d_model"], cfg["n_heads"],
                                               cfg["attention"])

    def embed(self, ids):
        cfg = self.cfg
        if cfg["positional"] not in ("sinusoidal", "sinusoidal_concat"):
            return super().embed(ids)
        x = self.token_embedding(ids)
        if cfg["scale"]:
            x = x * math.sqrt(cfg["d_model"])
        L, d = ids.shape[1], cfg["d_model"]
        base = cfg.get("positional_base", 10000.0)
        pe = (sinusoidal(L, d, base) if cfg["positional"] == "sinusoidal"
              else sinusoidal_concat(L, d, base))
        return x + pe.to(x.dtype)

    def forward(self, ids):
        x = self.embed(ids)
        act = {"relu": F.relu, "gelu": F.gelu}[self.cfg["activation"]]
        for layer in self.layers:
            def ff(h):
                return layer.linear2(act(layer.linear1(h)))
            if self.cfg["norm_first"]:
                x = x + layer.self_attn(layer.norm1(x))
                x = x + ff(layer.norm2(x))
            else:
                x = layer.norm1(x + layer.self_attn(x))
                x = layer.norm2(x + ff(x))
        return self.head(self.norm(x))


# ---- cases ---------------------------------------------------------------------

def model_metadata(cfg):
    """make_model_fixtures.metadata plus the keys of model.h's options,
    only those that differ from the defaults."""
    m = metadata(cfg)
    if "positional_base" in cfg:
        m["tfm.positional_base"] = repr(float(cfg["positional_base"]))
    for key, value in cfg["attention"].items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, float):
            value = repr(value)
        m["tfm.attention." + key] = str(value)
    return m


def case(d_model, n_heads, attention, **kw):
    cfg = dict(arch="decoder_only", vocab_size=19, d_model=d_model,
               n_heads=n_heads, d_ff=2 * d_model, n_layers=2,
               context_length=12, norm_first=True, activation="gelu",
               eps=1e-5, positional="none", tied=True, scale=False, B=2, L=12,
               attention=attention)
    cfg.update(kw)
    return cfg


# A character tokenizer of vocab_size (19) characters, so that
# transformer-generate can run the files.
VOCAB = " abcdefghilmnorstuw"


CASES = {
    # Ainslie et al. 2023: 4 query heads share 2 key/value heads.
    "gqa": case(16, 4, dict(n_kv_heads=2), positional="sinusoidal",
                positional_base=1000.0),
    # Shazeer 2019: one key/value head.
    "mqa": case(16, 4, dict(n_kv_heads=1), positional="learned",
                norm_first=False, activation="relu"),
    "rope_adjacent": case(16, 2, dict(rope="adjacent")),
    "rope_half_partial": case(24, 3, dict(rope="half", rope_dims=4,
                                          rope_base=500.0),
                              tied=False, norm_first=False),
    # 6 heads: the slopes of a head count that is not a power of two.
    "alibi_6_heads": case(24, 6, dict(relative="alibi")),
    "t5_buckets": case(16, 4, dict(relative="t5", num_buckets=8,
                                   max_distance=20, bidirectional=False)),
    "shaw_values": case(16, 4, dict(relative="shaw", max_distance=3,
                                    relative_values=True),
                        positional="learned"),
    "sliding_window": case(16, 4, dict(sparsity="sliding_window", window=3),
                           positional="learned"),
    # 8 blocks of 2: one global block, one each side, two random ones.
    "bigbird": case(16, 2, dict(sparsity="bigbird", block_size=2, window=1,
                                n_global=1, n_random_blocks=2, seed=7),
                    positional="learned", context_length=16, L=16),
    "learned_temperature": case(16, 4, dict(score="learned_temperature"),
                                positional="learned"),
    # Odd width: the concatenated layout's trailing zero column.
    "sinusoidal_concat": case(15, 3, dict(), positional="sinusoidal_concat",
                              positional_base=500.0, scale=True),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests",
                                                  "models", "variants"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for i, (name, cfg) in enumerate(sorted(CASES.items())):
        torch.manual_seed(4000 + i)
        model = VariantLM(cfg)
        randomize(model, 5000 + i)
        with torch.no_grad():
            for layer in model.layers:
                att = layer.self_attn
                if hasattr(att, "temperature"):   # tau_h > 0
                    att.temperature.uniform_(0.5, 4.0)
                if hasattr(att, "relative_attention_bias"):
                    att.relative_attention_bias.weight.mul_(3.0)
        weights = {k: v.detach().numpy().astype(np.float32)
                   for k, v in model.state_dict().items()}
        meta = model_metadata(cfg)
        meta.update({"tfm.tokenizer": "char", "tfm.vocab": VOCAB})
        save_safetensors(weights,
                         os.path.join(args.out, name + ".safetensors"), meta)
        # The reference runs on the stored (float32-rounded) weights.
        model.load_state_dict({k: torch.from_numpy(v)
                               for k, v in weights.items()})
        model = model.double()
        g = torch.Generator().manual_seed(6000 + i)
        ids = torch.randint(0, cfg["vocab_size"], (cfg["B"], cfg["L"]),
                            generator=g)
        with torch.no_grad():
            logits = model(ids)
        ref = {"ids": ids.numpy().astype(np.float32),
               "logits": logits.numpy().astype(np.float32)}
        save_safetensors(ref,
                         os.path.join(args.out, name + ".ref.safetensors"),
                         {"case": name})
        print("wrote", name)


if __name__ == "__main__":
    main()
