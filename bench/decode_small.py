#!/usr/bin/python3
"""Decoding the shipped model (issue 20, docs/PERFORMANCE.md, "Decoding the
shipped model"): greedy generation with a KV cache, libtransformer
(model.generate: the C generator, one tfm_generator_next per token) against
a plain PyTorch implementation of the same model with a KV cache, written
here (one token per step through the four pre-norm layers, the keys and
values appended to preallocated tensors), side by side in one run.

Rows:
  - in the context: "And God said" then 110 new characters (all within the
    128-position context, every step one cache append);
  - past the context: 1,000 new characters, libtransformer with
    past_context="auto" (the half-window shift: when the cache is full the
    last 64 tokens are encoded afresh) and "reencode" (the last 128 tokens
    afresh for every token, 1.0's behaviour), PyTorch with the same
    half-window shift;
  - the per-step overhead: the same generation on a model of the same
    shape but d_model 8 and d_ff 32 (random weights), whose arithmetic is
    negligible, so its time per token is the fixed cost of a step
    (dispatch, the layer loop, the embedding and head, the Python
    iteration, and at 2 threads the hand-off to the pool).
Both sides produce the same tokens (checked: the PyTorch reference's
greedy ids equal ours in and past the context).  Tokens per second =
new tokens / wall time of the whole generate call (the prompt's prefill
included, the model load not).  Each measurement is repeated --reps times
and the median taken; rounds alternate which side goes first; the median
over rounds is reported.

Usage: /usr/bin/python3 bench/decode_small.py [--build build] [--threads 1,2]
       [--rounds 3] [--reps 3]
"""
import argparse
import math
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def torch_model(sd, cfg):
    """The weights as torch tensors, by PyTorch's names."""
    import torch
    return {k: torch.from_numpy(v.copy()) for k, v in sd.items()}


def torch_generate(w, cfg, prompt, n_new, torch):
    """Greedy ids of the shipped architecture (pre-norm, exact GELU,
    learned positions, tied head) with a KV cache; past the context the
    half-window shift (the cache restarts with the last ceil(W/2) tokens
    at positions 0 ..)."""
    F = torch.nn.functional
    d, H, W = cfg["d_model"], cfg["n_heads"], cfg["context_length"]
    nl, eps = cfg["n_layers"], cfg["layer_norm_eps"]
    dk = d // H
    scale = 1.0 / math.sqrt(dk)
    K = torch.empty(nl, W, d)
    V = torch.empty(nl, W, d)
    emb, pos = w["token_embedding.weight"], w["position_embedding.weight"]
    L = [{k[len(f"layers.{i}."):]: v for k, v in w.items()
          if k.startswith(f"layers.{i}.")} for i in range(nl)]
    nw, nb = w["norm.weight"], w["norm.bias"]

    def run(ids, start):
        """Appends ids at positions start ..; the last row's logits."""
        n = len(ids)
        x = emb[torch.tensor(ids)] + pos[start:start + n]
        mask = torch.full((n, start + n), float("-inf")).triu(start + 1)
        for i, p in enumerate(L):
            h = F.layer_norm(x, (d,), p["norm1.weight"], p["norm1.bias"], eps)
            qkv = F.linear(h, p["self_attn.in_proj_weight"],
                           p["self_attn.in_proj_bias"])
            q, k, v = qkv.split(d, dim=1)
            K[i, start:start + n] = k
            V[i, start:start + n] = v
            q = q.view(n, H, dk).transpose(0, 1)
            kk = K[i, :start + n].view(-1, H, dk).transpose(0, 1)
            vv = V[i, :start + n].view(-1, H, dk).transpose(0, 1)
            a = torch.softmax(q @ kk.transpose(1, 2) * scale + mask, dim=-1)
            o = (a @ vv).transpose(0, 1).reshape(n, d)
            x = x + F.linear(o, p["self_attn.out_proj.weight"],
                             p["self_attn.out_proj.bias"])
            h = F.layer_norm(x, (d,), p["norm2.weight"], p["norm2.bias"], eps)
            h = F.linear(F.gelu(F.linear(h, p["linear1.weight"],
                                         p["linear1.bias"])),
                         p["linear2.weight"], p["linear2.bias"])
            x = x + h
        x = F.layer_norm(x[-1:], (d,), nw, nb, eps)
        return (x @ emb.t())[0]

    seq = list(prompt)
    held = len(seq)
    logits = run(seq, 0)
    out = []
    with torch.no_grad():
        for _ in range(n_new):
            t = int(torch.argmax(logits))
            out.append(t)
            seq.append(t)
            if held < W:
                logits = run([t], held)
                held += 1
            else:
                keep = W - W // 2
                logits = run(seq[-keep:], 0)
                held = keep
    return out


def median_time(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


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

    model = transformer.load_model(transformer.default_model_path())
    cfg = model.config
    sd = model.state_dict()
    w = torch_model({k: np.asarray(v) for k, v in sd.items()}, cfg)
    prompt = model.tokenizer.encode("And God said")
    tiny_cfg = dict(cfg, d_model=8, n_heads=4, d_ff=32)
    transformer.manual_seed(3)
    tiny = transformer.Model(tiny_cfg)
    tiny_w = torch_model({k: np.asarray(v)
                          for k, v in tiny.state_dict().items()},
                         tiny.config)

    # The same tokens on both sides (in and past the context).
    with torch.no_grad():
        for n in (110, 300):
            ref = torch_generate(w, cfg, prompt, n, torch)
            ours = model.generate(prompt, n)
            if ref != ours:
                sys.exit(f"PyTorch reference and libtransformer differ at "
                         f"{n} new tokens")

    cases = [("in the context (110 new)", model, w, cfg, 110, "auto"),
             ("past the context (1,000 new)", model, w, cfg, 1000, "auto"),
             ("past the context (1,000 new), ours reencode", model, w, cfg,
              1000, "reencode"),
             ("per-step overhead: d_model 8 (110 new)", tiny, tiny_w,
              tiny.config, 110, "auto")]
    threads = [int(t) for t in a.threads.split(",")]
    res = {}
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for rnd in range(a.rounds):
        for name, m, mw, mc, n, pc in cases:
            for t in threads:
                transformer.set_num_threads(t)
                torch.set_num_threads(t)

                def ours():
                    m.generate(prompt, n, past_context=pc)

                def theirs():
                    with torch.no_grad():
                        torch_generate(mw, mc, prompt, n, torch)
                sides = [("ours", ours), ("torch", theirs)]
                if pc == "reencode":
                    sides = sides[:1]
                if rnd % 2:
                    sides.reverse()
                for side, fn in sides:
                    fn()   # warm-up
                    res.setdefault((name, t, side), []).append(
                        n / median_time(fn, a.reps))
    import subprocess
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
    print("| row | threads | ours tok/s | PyTorch tok/s | ours / PyTorch | "
          "ours ms/token |")
    print("|---|---|---|---|---|---|")
    for name, _, _, _, _, pc in cases:
        for t in threads:
            o = statistics.median(res[(name, t, "ours")])
            p = res.get((name, t, "torch"))
            p = statistics.median(p) if p else None
            print(f"| {name} | {t} | {o:,.0f} | "
                  f"{'-' if p is None else f'{p:,.0f}'} | "
                  f"{'-' if p is None else f'{o / p:.2f}'} | "
                  f"{1e3 / o:.3f} |")


if __name__ == "__main__":
    main()
