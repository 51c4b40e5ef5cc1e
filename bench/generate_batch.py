#!/usr/bin/python3
"""Batched greedy generation (tfm_model_generate_batch): decoding tokens
per second at batch 1, 4 and 16 (docs/PERFORMANCE.md, "Batched
generation"), on random weights of two decoder-only architectures: the
shipped model's (4 pre-norm layers, d_model 128, 4 heads, d_ff 512,
context 128, vocabulary 63, learned positions, tied head) and a larger one
(8 layers, d_model 512, 8 heads, d_ff 2048, context 256, vocabulary 256).

Each row runs BUILD/bench/transformer-bench generate_batch: prompts of
--prompt tokens, --new greedy tokens each (random weights: no EOS, every
sequence runs to the end).  The decoding time is the median of the whole
call minus the median of the same call with one new token (the prefills
and set-up), so decode tok/s = batch * (new - 1) / that difference.  At
one thread (OPENBLAS_NUM_THREADS=1 and --threads 1) unless told.

Usage: /usr/bin/python3 bench/generate_batch.py [--build build]
       [--threads 1] [--reps 5] [--prompt 16] [--new 96]
"""
import argparse
import csv
import io
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = [("shipped (d128, 4 layers)", [128, 4, 4, 128, 63]),
         ("d512, 8 layers", [512, 8, 8, 256, 256])]


def run(build, threads, reps, arch, batch, prompt, new):
    exe = os.path.join(build, "bench", "transformer-bench")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run(
        [exe, "--threads", str(threads), "--reps", str(reps), "--warmup", "1",
         "generate_batch", *map(str, arch), str(batch), str(prompt),
         str(new)], env=env, check=True, capture_output=True, text=True)
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    t_all = float(rows["generate_batch"]["median_s"])
    t_pre = float(rows["generate_batch_prefill"]["median_s"])
    return t_all, t_pre, rows["generate_batch"]["corename"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=96)
    a = ap.parse_args()
    print("| model | batch | call ms | prefill+set-up ms | decode ms/step "
          "| decode tok/s | vs batch 1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    core = None
    for name, arch in ARCHS:
        base = None
        for batch in (1, 4, 16):
            t_all, t_pre, core = run(a.build, a.threads, a.reps, arch, batch,
                                     a.prompt, a.new)
            dec = t_all - t_pre
            rate = batch * (a.new - 1) / dec
            base = base or rate
            print(f"| {name} | {batch} | {1e3 * t_all:.1f} | "
                  f"{1e3 * t_pre:.1f} | {1e3 * dec / (a.new - 1):.3f} | "
                  f"{rate:.0f} | {rate / base:.2f}x |")
    print(f"\n{a.threads} thread(s), prompts of {a.prompt} tokens, "
          f"{a.new} new tokens each, OpenBLAS core {core}.")


if __name__ == "__main__":
    main()
