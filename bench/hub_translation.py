#!/usr/bin/python3
"""Translation with the opus-mt layout at its real widths (issue 18,
docs/PERFORMANCE.md, "Hub checkpoints: Marian"): Helsinki-NLP/opus-mt-en-de's
MarianMTModel (d_model 512, 8 heads, d_ff 2048, 6 encoder and 6 decoder
layers, vocabulary 58101, post-norm, SiLU, scaled shared embeddings,
final_logits_bias), random weights written in the hub layout by the test
suite's writer (bindings/python/tests/hub_marian_reference.py) and loaded
with transformer.from_pretrained.  Against PyTorch running the same
weights (the loaded model's state_dict) in plain torch float32 greedy
decoding as transformers' generate does it for Marian: the encoder once,
each decoder layer's cross-attention keys and values once, a self-attention
KV cache, the head on the last position (written here from
modeling_marian: F.linear, F.layer_norm, torch.softmax; no autograd).

Row per thread count: greedy translation (num_beams 1) of a 16-token
source into 24 new tokens (eos and pad banned on both sides, so every
sentence has that length), sentences per second.  Both sides produce the
same tokens (checked first).  Each measurement is the median of --reps;
rounds alternate which side goes first; the median over rounds is
reported.

Usage: /usr/bin/python3 bench/hub_translation.py [--build build]
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

V = 58101
OPUS_MT = dict(vocab_size=V, decoder_vocab_size=V, d_model=512,
               encoder_layers=6, decoder_layers=6, encoder_ffn_dim=2048,
               decoder_ffn_dim=2048, encoder_attention_heads=8,
               decoder_attention_heads=8, max_position_embeddings=512,
               pad_token_id=V - 1, decoder_start_token_id=V - 1,
               bad_words_ids=[[V - 1]], num_beams=1, max_length=512,
               forced_eos_token_id=None)  # fixed-length sentences
N_SRC, N_NEW = 16, 24


def torch_translator(w, c, torch):
    """translate(src, n_new, banned) -> the greedy new ids (a list)."""
    F = torch.nn.functional
    d, H = c["d_model"], c["n_heads"]
    dk, eps = d // H, c["layer_norm_eps"]
    scale = math.sqrt(d) if c["embedding_scale"] else 1.0
    emb, pos = w["token_embedding.weight"], w["position_embedding.weight"]
    head, bias = w.get("lm_head.weight", emb), w["lm_head.bias"]

    def layers(stack, n):
        pre = f"transformer.{stack}.layers."
        return [{k[len(f"{pre}{i}."):]: v for k, v in w.items()
                 if k.startswith(f"{pre}{i}.")} for i in range(n)]
    enc = layers("encoder", c["n_encoder_layers"])
    dec = layers("decoder", c["n_decoder_layers"])

    def ln(x, p, name):
        return F.layer_norm(x, (d,), p[name + ".weight"], p[name + ".bias"],
                            eps)

    def heads(t):
        return t.view(-1, H, dk).transpose(0, 1)

    def attend(q, k, v, mask=None):
        s = heads(q) @ heads(k).transpose(1, 2) / math.sqrt(dk)
        if mask is not None:
            s = s + mask
        return (torch.softmax(s, -1) @ heads(v)).transpose(0, 1).reshape(-1, d)

    def ff(x, p):
        return F.linear(F.silu(F.linear(x, p["linear1.weight"],
                                        p["linear1.bias"])),
                        p["linear2.weight"], p["linear2.bias"])

    def translate(src, n_new, banned):
        n = len(src)
        h = emb[torch.tensor(src)] * scale + pos[:n]
        for p in enc:
            q, k, v = F.linear(h, p["self_attn.in_proj_weight"],
                               p["self_attn.in_proj_bias"]).split(d, 1)
            h = ln(h + F.linear(attend(q, k, v), p["self_attn.out_proj.weight"],
                                p["self_attn.out_proj.bias"]), p, "norm1")
            h = ln(h + ff(h, p), p, "norm2")
        cross = []
        for p in dec:  # each layer's keys and values of the memory, once
            wk, wv = p["multihead_attn.in_proj_weight"][d:].split(d)
            bk, bv = p["multihead_attn.in_proj_bias"][d:].split(d)
            cross.append((F.linear(h, wk, bk), F.linear(h, wv, bv)))
        K = [torch.zeros(N_NEW + 1, d) for _ in dec]
        Vc = [torch.zeros(N_NEW + 1, d) for _ in dec]
        tok, out = c["decoder_start"], []
        for t in range(n_new):
            y = emb[tok] * scale + pos[t]
            y = y[None]
            for i, p in enumerate(dec):
                q, k, v = F.linear(y, p["self_attn.in_proj_weight"],
                                   p["self_attn.in_proj_bias"]).split(d, 1)
                K[i][t], Vc[i][t] = k[0], v[0]
                y = ln(y + F.linear(attend(q, K[i][:t + 1], Vc[i][:t + 1]),
                                    p["self_attn.out_proj.weight"],
                                    p["self_attn.out_proj.bias"]), p, "norm1")
                wq = p["multihead_attn.in_proj_weight"][:d]
                bq = p["multihead_attn.in_proj_bias"][:d]
                y = ln(y + F.linear(attend(F.linear(y, wq, bq), *cross[i]),
                                    p["multihead_attn.out_proj.weight"],
                                    p["multihead_attn.out_proj.bias"]),
                       p, "norm2")
                y = ln(y + ff(y, p), p, "norm3")
            logits = y[0] @ head.t() + bias
            logits[banned] = float("-inf")
            tok = int(torch.argmax(logits))
            out.append(tok)
        return out
    return translate


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
    import hub_marian_reference as R

    cfg = dict(R.CONFIG, **OPUS_MT)
    path = os.path.join(tempfile.mkdtemp(), "opus-mt")
    R.write_checkpoint(path, R.random_weights(cfg), cfg)
    m = transformer.from_pretrained(path)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in m.state_dict().items()}
    c = dict(m.config, decoder_start=V - 1)
    run = torch_translator(sd, c, torch)
    banned = [0, V - 1]                   # eos and pad: fixed length
    src = torch.randint(1, V - 1, (N_SRC,),
                        generator=torch.Generator().manual_seed(0)).tolist()

    def ours():
        return m.generate(src, max_new_tokens=N_NEW, num_beams=1,
                          suppress_tokens=banned)

    def theirs():
        return run(src, N_NEW, banned)
    with torch.no_grad():
        if ours() != theirs():
            sys.exit("PyTorch and libtransformer translate differently")

    threads = [int(t) for t in a.threads.split(",")]
    res = {}
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for rnd in range(a.rounds):
        for t in threads:
            transformer.set_num_threads(t)
            torch.set_num_threads(t)
            sides = [("ours", ours), ("torch", theirs)]
            if rnd % 2:
                sides.reverse()
            for side, fn in sides:
                with torch.no_grad():
                    fn()
                    res.setdefault((t, side), []).append(
                        1.0 / median_time(fn, a.reps))
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
    print("| layout | row | threads | ours sentences/s | PyTorch sentences/s "
          "| ours / PyTorch |")
    print("|---|---|---|---|---|---|")
    for t in threads:
        o = statistics.median(res[(t, "ours")])
        p = statistics.median(res[(t, "torch")])
        print(f"| opus-mt layout | greedy translation ({N_SRC} source, "
              f"{N_NEW} new tokens) | {t} | {o:.2f} | {p:.2f} | {o / p:.2f} |")


if __name__ == "__main__":
    main()
