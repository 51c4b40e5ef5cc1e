#!/usr/bin/python3
"""Threads on a busy machine (issue 20, docs/PERFORMANCE.md, "Threads on a
busy machine"): the bench program's rows at 1 and 2 threads, on a quiet
machine and beside a CPU hog (one process spinning on one core, so that
the two threads of a call share the cores with it), for this build and,
optionally, an older build of the library (--baseline BUILD: the same
transformer-bench program linked to that build), side by side in one run.

Per round, every (build, condition, threads) measurement runs once, in an
order that alternates between rounds; each measurement is the bench
program's median over --reps calls after a warm-up.  Reported: the median
over rounds of each time, and the speed-up of 2 threads over 1 (time at 1
thread / time at 2) per build and condition.  The targets: never below 1
beside the hog (2 threads never slower than 1), >= 1.8 on the quiet
machine.

The hog is /usr/bin/python3 spinning (`while True: pass`), started before
and killed after each hog measurement.  OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE are left as the environment has them; the core type the
bench program reports is printed.

Usage: /usr/bin/python3 bench/busy_threads.py [--build build]
       [--baseline OLD_BUILD] [--rounds 3] [--reps 5] [--only SUBSTRING]
"""
import argparse
import csv
import datetime
import io
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ROWS = [
    ("sdpa B=1 H=8 L=1024 d=64", ["sdpa", "1", "8", "1024", "64"]),
    ("sdpa causal B=1 H=1 L=4096 d=64",
     ["sdpa", "1", "1", "4096", "64", "causal"]),
    ("mha B=8 L=128 D=512 H=8", ["mha", "8", "128", "512", "8"]),
    ("encoder B=8 L=128 D=512 H=8 FF=2048",
     ["encoder", "8", "128", "512", "8", "2048"]),
    ("train B=8 L=128 D=512 H=8 FF=2048",
     ["train", "8", "128", "512", "8", "2048"]),
    ("sdpa_backward B=1 H=8 L=1024 d=64",
     ["sdpa_backward", "1", "8", "1024", "64"]),
]


def measure(binary, args, threads, reps):
    cmd = [binary, "--threads", str(threads), "--reps", str(reps),
           "--warmup", "1"] + args
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    return float(rows[0]["median_s"])


def start_hog():
    hog = subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"])
    time.sleep(0.3)
    return hog


def info(binary):
    p = subprocess.run([binary, "info"], stdout=subprocess.PIPE, text=True,
                       check=True)
    return dict(line.split("=", 1) for line in p.stdout.splitlines()
                if "=" in line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    builds = [("this", os.path.join(a.build, "bench", "transformer-bench"))]
    if a.baseline:
        builds.append(("baseline", os.path.join(a.baseline, "bench",
                                                "transformer-bench")))
    rows = [r for r in ROWS if not a.only or a.only in r[0]]
    keys = [(b, cond, t) for b, _ in builds for cond in ("quiet", "hog")
            for t in (1, 2)]
    times = {(row, k): [] for row, _ in rows for k in keys}
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    for rnd in range(a.rounds):
        order = keys if rnd % 2 == 0 else list(reversed(keys))
        for name, args in rows:
            for b, cond, t in order:
                binary = dict(builds)[b]
                hog = start_hog() if cond == "hog" else None
                try:
                    times[(name, (b, cond, t))].append(
                        measure(binary, args, t, a.reps))
                finally:
                    if hog:
                        hog.kill()
                        hog.wait()
    meta = info(builds[0][1])
    print(f"Run of {started:%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, OpenBLAS core {meta.get('openblas_corename', '?')}"
          f" (OPENBLAS_CORETYPE {os.environ.get('OPENBLAS_CORETYPE', 'unset')}"
          f"), rounds {a.rounds}, reps {a.reps}; load average at start "
          f"{load0[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    print()
    head = ["row", "build", "quiet 1T ms", "quiet 2T ms", "quiet 2T speed-up",
            "hog 1T ms", "hog 2T ms", "hog 2T speed-up"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, _ in rows:
        for b, _ in builds:
            med = {k: statistics.median(times[(name, (b,) + k)])
                   for k in [(c, t) for c in ("quiet", "hog") for t in (1, 2)]}
            cells = [name, b]
            for c in ("quiet", "hog"):
                cells += [f"{med[(c, 1)] * 1e3:.1f}", f"{med[(c, 2)] * 1e3:.1f}",
                          f"{med[(c, 1)] / med[(c, 2)]:.2f}"]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
