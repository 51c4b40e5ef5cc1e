#!/usr/bin/python3
"""Training throughput of the shipped model's architecture, libtransformer
(transformer-train) against PyTorch (tools/train_charlm.py: the same model,
AdamW, warm-up + cosine, clipping), side by side in one run
(docs/PERFORMANCE.md, "Training the shipped architecture").

Both train the decoder-only character model of models/README.md (4 pre-norm
layers, d_model 128, 4 heads, d_ff 512, context 128, learned positions, exact
GELU) on the King James text (tools/kjv_text.py) with batches of 32 windows.
Each trainer is run twice per round, for --short and --long steps; the time
of one step is the difference of the two wall times over the difference of
the step counts, so start-up (reading the text, importing torch, building
the model) and the final evaluation and save cancel out (both warm up for
one step only, so that short runs are allowed; the schedule costs nothing).  Tokens per second
= batch x context / time per step.  Peak MB is the long run's maximum
resident set (wait4's ru_maxrss) of the whole process.  Rounds alternate
which trainer goes first; the median over rounds is reported.

Usage: /usr/bin/python3 bench/train_throughput.py [--build build]
       [--threads 1,2] [--rounds 3] [--short 3] [--long 13]
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import kjv_text  # noqa: E402

BATCH, CONTEXT = 32, 128


def timed(cmd, env):
    """(wall seconds, peak resident MB) of one run of cmd."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode("utf-8", "replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("bench: %s failed (%d):\n%s" % (cmd[0], p.returncode, err[-2000:]))
    return wall, ru.ru_maxrss / 1024.0


def ours_cmd(build, text, out, steps, threads):
    return [os.path.join(build, "tools", "transformer-train"), "--text", text,
            "--out", out, "--steps", str(steps), "--threads", str(threads),
            "--batch-size", str(BATCH), "--context", str(CONTEXT), "--warmup", "1",
            "--eval-interval", "0", "--eval-windows", "8",
            "--checkpoint-interval", "0", "--log-interval", "1000000"]


def torch_cmd(text, out, steps, threads):
    return ["/usr/bin/python3", os.path.join(ROOT, "tools", "train_charlm.py"),
            "--text", text, "--out", out, "--steps", str(steps),
            "--threads", str(threads), "--batch-size", str(BATCH),
            "--context-length", str(CONTEXT), "--warmup", "1", "--eval-windows", "8",
            "--log-every", "1000000"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short", type=int, default=3)
    ap.add_argument("--long", type=int, default=13)
    args = ap.parse_args()
    if args.long <= args.short:
        sys.exit("bench: --long must exceed --short")
    threads = [int(t) for t in args.threads.split(",")]
    env = dict(os.environ)
    core = env.get("OPENBLAS_CORETYPE", "(detected)")
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "kjv.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write(kjv_text.kjv_text())
        names = ("libtransformer", "PyTorch")

        def one(name, steps, thr, tag):
            out = os.path.join(tmp, "%s-%s.safetensors" % (name[:5], tag))
            cmd = (ours_cmd(args.build, text, out, steps, thr) if name == names[0]
                   else torch_cmd(text, out, steps, thr))
            return timed(cmd, env)

        load0 = os.getloadavg()
        rows = []
        for thr in threads:
            per = {n: [] for n in names}
            peak = {n: [] for n in names}
            for r in range(args.rounds):
                order = names if r % 2 == 0 else names[::-1]
                for n in order:
                    ws, _ = one(n, args.short, thr, "s")
                    wl, mb = one(n, args.long, thr, "l")
                    per[n].append((wl - ws) / (args.long - args.short))
                    peak[n].append(mb)
            rows.append((thr, {n: statistics.median(per[n]) for n in names},
                         {n: max(peak[n]) for n in names}, per))
        load1 = os.getloadavg()

    print("Run of %s, %s, %s; OPENBLAS_CORETYPE %s; rounds %d, steps %d and %d"
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.node(),
             platform.processor() or platform.machine(), core, args.rounds,
             args.short, args.long))
    print("Load average at start %.2f %.2f %.2f, at end %.2f %.2f %.2f\n"
          % (load0 + load1))
    print("| threads | ours ms/step | PyTorch ms/step | ours tok/s | PyTorch tok/s "
          "| ours / PyTorch tok/s (range) | ours peak MB | PyTorch peak MB |")
    print("|---|---|---|---|---|---|---|---|")
    tokens = BATCH * CONTEXT
    for thr, med, pk, per in rows:
        ratios = [t / o for o, t in zip(per[names[0]], per[names[1]])]
        print("| %d | %.1f | %.1f | %.0f | %.0f | %.2f (%.2f-%.2f) | %.0f | %.0f |"
              % (thr, 1e3 * med[names[0]], 1e3 * med[names[1]],
                 tokens / med[names[0]], tokens / med[names[1]],
                 med[names[1]] / med[names[0]], min(ratios), max(ratios),
                 pk[names[0]], pk[names[1]]))


if __name__ == "__main__":
    main()
