#!/usr/bin/python3
"""Hub checkpoint layouts at their real widths (issue 18, docs/PERFORMANCE.md,
"Hub checkpoints"): GPT-2 small's layout (d_model 768, 12 heads, d_ff 3072,
vocabulary 50257, tied head, learned positions) and a Llama layout of the
same width (12 heads, 4 key/value heads, d_ff 2048, vocabulary 32000,
RMSNorm, SwiGLU, rotary positions, untied head), 4 layers each, random
weights written in the hub layout by the test suite's reference writers
and loaded with transformer.from_pretrained.  Against PyTorch running the
same weights (the loaded model's state_dict) in plain torch float32 with a
KV cache, written here from transformers' modeling_gpt2 / modeling_llama
(F.linear, F.layer_norm, torch.softmax; no autograd).

Rows per layout and thread count:
  - prefill, all logits: the logits of all positions of a 128-token
    prompt (Model.logits against the torch forward), tokens per second;
  - prefill for generation: the same prompt into the KV cache and the
    last position's logits, the first new token (Model.generate(prompt, 1)
    against the torch forward computing the head on the last row only, as
    transformers' generate with logits_to_keep=1 and llama.cpp do), prompt
    tokens per second;
  - decode: greedy generation of 64 new tokens after a 16-token prompt
    with a KV cache (Model.generate against a cached torch loop), new
    tokens per second of the whole call.
Both sides produce the same greedy tokens (checked first).  Each
measurement is the median of --reps; rounds alternate which side goes
first; the median over rounds is reported.

Usage: /usr/bin/python3 bench/hub_models.py [--build build]
       [--threads 1,2] [--rounds 3] [--reps 3]
"""
import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from decode_small import median_time  # noqa: E402  (the one timer)

GPT2 = dict(model_type="gpt2", n_embd=768, n_head=12, n_layer=4,
            n_positions=1024, n_inner=None, vocab_size=50257,
            activation_function="gelu_new", layer_norm_epsilon=1e-5)
LLAMA = dict(model_type="llama", hidden_size=768, num_attention_heads=12,
             num_key_value_heads=4, num_hidden_layers=4,
             intermediate_size=2048, vocab_size=32000,
             max_position_embeddings=2048, rms_norm_eps=1e-5,
             rope_theta=10000.0, hidden_act="silu", rope_scaling=None,
             tie_word_embeddings=False)


def torch_runner(w, cfg, opts, torch):
    """run(ids, start) -> logits [n, V] of ids appended at positions start ..
    to the torch KV cache (reset() empties it)."""
    F = torch.nn.functional
    d, H = cfg["d_model"], cfg["n_heads"]
    nl, eps, dk = cfg["n_layers"], cfg["layer_norm_eps"], d // H
    att = cfg.get("attention") or {}
    Hkv = att.get("n_kv_heads") or H
    llama = att.get("rope") == "half"
    kv = Hkv * dk
    W = 2048
    K = torch.zeros(nl, W, kv)
    V = torch.zeros(nl, W, kv)
    emb = w["token_embedding.weight"]
    head = w.get("lm_head.weight", emb)
    L = [{k[len(f"layers.{i}."):]: v for k, v in w.items()
          if k.startswith(f"layers.{i}.")} for i in range(nl)]
    if llama:
        base = att.get("rope_base") or 10000.0
        inv = 1.0 / base ** (torch.arange(0, dk, 2, dtype=torch.float32) / dk)
        ang = torch.arange(W, dtype=torch.float32)[:, None] * inv[None]
        ang = torch.cat((ang, ang), -1)
        COS, SIN = ang.cos(), ang.sin()

    def norm(x, p):
        if llama:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * \
                w[p + "weight"]
        return F.layer_norm(x, (d,), w[p + "weight"], w[p + "bias"], eps)

    def rope(t, start, n):
        c, s = COS[start:start + n], SIN[start:start + n]
        h = dk // 2
        return t * c + torch.cat((-t[..., h:], t[..., :h]), -1) * s

    def run(ids, start, last_only=False):
        n = len(ids)
        x = emb[torch.tensor(ids)]
        if not llama:
            x = x + w["position_embedding.weight"][start:start + n]
        mask = torch.full((n, start + n), float("-inf")).triu(start + 1)
        for i, p in enumerate(L):
            pre = f"layers.{i}."
            h = norm(x, pre + "norm1.")
            qkv = F.linear(h, p["self_attn.in_proj_weight"],
                           p.get("self_attn.in_proj_bias"))
            q, k, v = qkv.split([d, kv, kv], dim=1)
            q = q.view(n, H, dk).transpose(0, 1)
            if llama:
                q = rope(q, start, n)
                k = rope(k.view(n, Hkv, dk).transpose(0, 1), start, n)
                k = k.transpose(0, 1).reshape(n, kv)
            K[i, start:start + n] = k
            V[i, start:start + n] = v
            kk = K[i, :start + n].view(-1, Hkv, dk).transpose(0, 1)
            vv = V[i, :start + n].view(-1, Hkv, dk).transpose(0, 1)
            if Hkv != H:
                kk = kk.repeat_interleave(H // Hkv, 0)
                vv = vv.repeat_interleave(H // Hkv, 0)
            a = torch.softmax(q @ kk.transpose(1, 2) / math.sqrt(dk) + mask,
                              dim=-1)
            o = (a @ vv).transpose(0, 1).reshape(n, d)
            x = x + F.linear(o, p["self_attn.out_proj.weight"],
                             p.get("self_attn.out_proj.bias"))
            h = norm(x, pre + "norm2.")
            if llama:
                h = F.linear(F.silu(F.linear(h, p["linear1.weight"])) *
                             F.linear(h, p["linear3.weight"]),
                             p["linear2.weight"])
            else:
                h = F.linear(F.gelu(F.linear(h, p["linear1.weight"],
                                             p["linear1.bias"]),
                                    approximate="tanh"),
                             p["linear2.weight"], p["linear2.bias"])
            x = x + h
        if last_only:  # generation needs the last position's logits only
            x = x[-1:]
        return norm(x, "norm.") @ head.t()
    return run


def torch_generate(run, prompt, n_new, torch):
    logits = run(list(prompt), 0, last_only=True)[-1]
    out, held = [], len(prompt)
    for _ in range(n_new):
        t = int(torch.argmax(logits))
        out.append(t)
        logits = run([t], held)[-1]
        held += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "bindings", "python"))
    import numpy as np
    import torch
    import transformer
    import hub_gpt2_reference as G
    import hub_llama_reference as R

    tmp = tempfile.mkdtemp()
    models = {}
    for name, cfg, writer, weights in [
            ("GPT-2 layout", GPT2, G, G.random_weights),
            ("Llama layout", LLAMA, R, R.random_weights)]:
        path = os.path.join(tmp, name.split()[0])
        w = weights(cfg)
        if writer is G:
            w = {k: v * 0.2 for k, v in w.items()}  # tamer logits
        writer.write_checkpoint(path, w, cfg, tokenizer=False)
        m = transformer.from_pretrained(path)
        sd = {k: torch.from_numpy(np.array(v)) for k, v in
              m.state_dict().items()}
        models[name] = (m, torch_runner(sd, m.config, None, torch))
    gen = torch.Generator().manual_seed(0)
    long_prompt = torch.randint(0, 32000, (128,), generator=gen).tolist()
    short = long_prompt[:16]
    with torch.no_grad():
        for name, (m, run) in models.items():
            ref = torch_generate(run, short, 64, torch)
            if ref != m.generate(short, 64):
                sys.exit(f"{name}: PyTorch and libtransformer differ")
            got = m.logits(np.array([long_prompt]))[0]
            want = run(long_prompt, 0).numpy()
            err = np.abs(got - want).max() / np.abs(want).max()
            if err > 1e-4:
                sys.exit(f"{name}: prefill logits differ by {err:g}")

    threads = [int(t) for t in a.threads.split(",")]
    res = {}
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ids = np.array([long_prompt])
    for rnd in range(a.rounds):
        for name, (m, run) in models.items():
            for t in threads:
                transformer.set_num_threads(t)
                torch.set_num_threads(t)
                rows = {
                    "prefill, all logits (128 tokens)": (
                        128, lambda: m.logits(ids),
                        lambda: run(long_prompt, 0)),
                    "prefill for generation (128 tokens)": (
                        128, lambda: m.generate(long_prompt, 1),
                        lambda: torch_generate(run, long_prompt, 0, torch)),
                    "decode (64 new after 16)": (
                        64, lambda: m.generate(short, 64),
                        lambda: torch_generate(run, short, 64, torch)),
                }
                for row, (n, ours, theirs) in rows.items():
                    sides = [("ours", ours), ("torch", theirs)]
                    if rnd % 2:
                        sides.reverse()
                    for side, fn in sides:
                        with torch.no_grad():
                            fn()
                            res.setdefault((name, row, t, side), []).append(
                                n / median_time(fn, a.reps))
    info = subprocess.run([os.path.join(a.build, "bench", "transformer-bench"),
                           "info"], stdout=subprocess.PIPE, text=True).stdout
    blas = dict(line.split("=", 1) for line in info.splitlines()
                if "=" in line).get("openblas_corename", "?")
    print(f"Run of {started}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, OPENBLAS_CORETYPE "
          f"{os.environ.get('OPENBLAS_CORETYPE', 'unset')}, OpenBLAS core "
          f"{blas}; rounds {a.rounds}, reps {a.reps}; load average at start "
          f"{load0[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    print()
    print("| layout | row | threads | ours tok/s | PyTorch tok/s | "
          "ours / PyTorch |")
    print("|---|---|---|---|---|---|")
    for (name, row, t, side) in sorted(res):
        if side != "ours":
            continue
        o = statistics.median(res[(name, row, t, "ours")])
        p = statistics.median(res[(name, row, t, "torch")])
        print(f"| {name} | {row} | {t} | {o:,.0f} | {p:,.0f} | {o / p:.2f} |")


if __name__ == "__main__":
    main()
