#!/usr/bin/python3
"""Training tokens per second of the shipped model's architecture at 1 and 2
threads in one process and at 2 MPI ranks x 1 thread (issue 16,
docs/PERFORMANCE.md, "Training the shipped architecture"), side by side in
one run, through the Python package: model.loss_backward (one forward and
the backward), transformer.distributed.all_reduce_gradients between the
ranks (each rank holds half of every batch of 32 windows of 128
characters), AdamW.  Batches are random windows of the King James text
(tools/kjv_text.py).  Each configuration runs --warmup untimed steps, then
--steps timed ones; rounds alternate the order; medians are reported.

Usage: /usr/bin/python3 bench/train_mpi.py [--build build] [--rounds 3]
       [--steps 10] [--warmup 2]
(it starts `mpirun -np 2` itself for the ranks' run; as root it sets
OMPI_ALLOW_RUN_AS_ROOT.)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, CONTEXT = 32, 128


def worker(a):
    """One measurement (this process, or one rank under mpirun)."""
    sys.path.insert(0, os.path.join(a.build, "bindings", "python"))
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import numpy as np
    import transformer
    import kjv_text
    comm = None
    if a.mpi:
        from mpi4py import MPI
        import transformer.distributed as dist
        comm = MPI.COMM_WORLD
    transformer.set_num_threads(a.threads)
    text = kjv_text.kjv_text()
    vocab = sorted(set(text))
    table = np.zeros(128, np.int32)
    for i, ch in enumerate(vocab):
        table[ord(ch)] = i
    data = table[np.frombuffer(text.encode("ascii"), np.uint8)]
    cfg = dict(architecture="decoder_only", vocab_size=len(vocab),
               d_model=128, n_heads=4, d_ff=512, n_layers=4,
               context_length=CONTEXT, activation="gelu", norm_first=True)
    transformer.manual_seed(1234)
    model = transformer.Model(cfg)
    if comm is not None:
        dist.broadcast_parameters(model, comm)
    model.train()
    opt = transformer.optim.AdamW(model, lr=1e-3, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    rng = np.random.default_rng(7)
    ranks = comm.Get_size() if comm is not None else 1
    rank = comm.Get_rank() if comm is not None else 0
    share = BATCH // ranks

    def step():
        starts = rng.integers(0, data.size - CONTEXT - 1, BATCH)
        mine = starts[rank * share:(rank + 1) * share]
        win = np.stack([data[s:s + CONTEXT + 1] for s in mine])
        opt.zero_grad()
        model.loss_backward(win[:, :-1], win[:, 1:])
        if comm is not None:
            dist.all_reduce_gradients(model, comm)
        opt.step()

    for _ in range(a.warmup):
        step()
    if comm is not None:
        comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    if comm is not None:
        comm.Barrier()
    wall = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"tok_s": a.steps * BATCH * CONTEXT / wall,
                          "ms_step": 1e3 * wall / a.steps}))


def run(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--build",
          a.build, "--steps", str(a.steps), "--warmup", str(a.warmup)]
    configs = [("1 process x 1 thread", me + ["--threads", "1"]),
               ("1 process x 2 threads", me + ["--threads", "2"]),
               ("2 ranks x 1 thread", ["mpirun", "-np", "2", "--oversubscribe"]
                + me + ["--threads", "1", "--mpi"])]
    res = {name: [] for name, _ in configs}
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for rnd in range(a.rounds):
        order = configs if rnd % 2 == 0 else list(reversed(configs))
        for name, cmd in order:
            res[name].append(run(cmd, env))
    print(f"Run of {started}, {os.cpu_count()} CPUs, rounds {a.rounds}, "
          f"{a.steps} timed steps of {BATCH} x {CONTEXT} tokens after "
          f"{a.warmup}; load average at start {load0[0]:.2f}, at end "
          f"{os.getloadavg()[0]:.2f}")
    print()
    print("| configuration | ms/step | tok/s | vs 1 x 1 |")
    print("|---|---|---|---|")
    base = statistics.median(r["tok_s"] for r in res[configs[0][0]])
    for name, _ in configs:
        tok = statistics.median(r["tok_s"] for r in res[name])
        ms = statistics.median(r["ms_step"] for r in res[name])
        print(f"| {name} | {ms:.0f} | {tok:,.0f} | {tok / base:.2f} |")


if __name__ == "__main__":
    main()
