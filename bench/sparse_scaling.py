#!/usr/bin/env python3
"""Shows that sparse attention patterns cost time and memory linear in the
sequence length (issue 7): runs `transformer-bench sparse` for growing L
under each pattern, side by side with dense causal attention, and prints
microseconds per query position and the peak memory the calls added.

    /usr/bin/python3 bench/sparse_scaling.py --bench build/bench/transformer-bench

Linear cost shows as a flat us/query column; dense attention's grows with L.
Standard library only.
"""
import argparse
import csv
import io
import os
import subprocess
import sys


def run(bench, args, threads, reps):
    cmd = [bench, "--threads", str(threads), "--reps", str(reps),
           "--warmup", "1", "sparse"] + [str(a) for a in args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return next(csv.DictReader(io.StringIO(out.stdout)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/bench/transformer-bench")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--lengths", default="4096,8192,16384,32768,65536")
    ap.add_argument("--dense-max", type=int, default=16384,
                    help="longest L for the dense comparison rows")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    patterns = [("window", 256), ("dilated", 128), ("bigbird", 64),
                ("dense", 1)]
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')} "
          f"threads={a.threads} H={a.heads} d={a.d}")
    print(f"{'pattern':8} {'W':>4} {'L':>6} {'median_s':>9} {'us/query':>9} "
          f"{'GFLOP/s':>8} {'peak_MB':>8} {'core':>10}")
    for pat, w in patterns:
        for L in lengths:
            if pat == "dense" and L > a.dense_max:
                continue
            r = run(a.bench, [a.heads, L, a.d, pat, w], a.threads, a.reps)
            med = float(r["median_s"])
            print(f"{pat:8} {w:>4} {L:>6} {med:>9.4f} {1e6 * med / L:>9.2f} "
                  f"{float(r['gflops']):>8.1f} "
                  f"{float(r['peak_delta_mb']):>8.2f} {r['corename']:>10}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
