#!/usr/bin/python3
"""Where the time of each benchmark row goes (issue 20): perf's samples.

    /usr/bin/python3 bench/hotspots.py [--build-dir build] [--threads 1]

Runs the bench program's rows (the shapes of bench/run.py) under
`perf record -e cpu-clock` (a software clock: it works where the machine
has no hardware counters) and prints, per row, the calling thread's
symbols with at least
2 % of the samples, grouped as a Markdown table: OpenBLAS's kernel and its
packing (the `*copy*` routines), our functions, the C library and the
kernel.  The samples include the row's set-up (`fill`: the inputs, the
first touch of its memory), as the bench program's warm-up and timed calls
dominate them.  Needs Debian's linux-perf.  A profile, not a timing: the
percentages are shares of one run's samples.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROWS = [
    ("sdpa B=1 H=8 L=1024 d=64", ["sdpa", 1, 8, 1024, 64], 20),
    ("sdpa B=1 H=4 L=4096 d=64", ["sdpa", 1, 4, 4096, 64], 3),
    ("sdpa causal B=1 H=1 L=16384 d=64", ["sdpa", 1, 1, 16384, 64, "causal"], 2),
    ("mha B=8 L=128 D=512 H=8", ["mha", 8, 128, 512, 8], 20),
    ("encoder B=8 L=128 D=512 H=8 FF=2048",
     ["encoder", 8, 128, 512, 8, 2048], 10),
    ("train B=8 L=128 D=512 H=8 FF=2048", ["train", 8, 128, 512, 8, 2048], 4),
    ("sdpa_backward B=1 H=8 L=1024 d=64",
     ["sdpa_backward", 1, 8, 1024, 64], 10),
    ("decode ctx=1024 D=512 H=8 layers=1", ["decode", 512, 8, 1, 1024], 40),
]


def group(sym, dso):
    if "openblas" in dso:
        return "OpenBLAS packing" if "copy" in sym else (
            "OpenBLAS kernel" if "kernel" in sym else "OpenBLAS other")
    if "libtransformer" in dso:
        return "ours"
    if "kernel" in dso:
        return "Linux kernel"
    if dso.startswith("libc") or "libm" in dso:
        return "C library"
    return dso


def profile(binary, args, reps, threads):
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-o", data, binary,
               "--threads", str(threads), "--reps", str(reps)]
        cmd += [str(a) for a in args]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children",
                              "--stdio", "--sort", "pid,dso,sym"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, check=True).stdout
    rows = []
    for line in rep.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\d+):\S+\s+(\S+)\s+\[[.k]\]\s+(.+)$",
                     line)
        if m:
            rows.append((float(m.group(1)), int(m.group(2)),
                         m.group(4).strip(), m.group(3)))
    # The calling thread only (its tid is the process id, the smallest):
    # at one thread the others are idle pool or OpenBLAS server threads
    # (their spinning shows as sched_yield on the other core).  Shares are
    # renormalised to its samples.
    main_tid = min(r[1] for r in rows)
    total = sum(r[0] for r in rows if r[1] == main_tid)
    return [(100.0 * pct / total, sym, dso) for pct, tid, sym, dso in rows
            if tid == main_tid]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min", type=float, default=2.0,
                    help="smallest share listed, in percent (default 2)")
    args = ap.parse_args()
    binary = os.path.join(args.build_dir, "bench", "transformer-bench")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no bench program at {binary}")
    print(f"perf record -e cpu-clock, {args.threads} thread(s), "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}"
          "\n")
    print("| row | groups | symbols (>= %.0f %%) |" % args.min)
    print("|---|---|---|")
    for name, a, reps in ROWS:
        rows = profile(binary, a, reps, args.threads)
        groups = {}
        for pct, sym, dso in rows:
            g = group(sym, dso)
            groups[g] = groups.get(g, 0.0) + pct
        gs = ", ".join(f"{g} {p:.0f} %" for g, p in
                       sorted(groups.items(), key=lambda x: -x[1]) if p >= 1)
        syms = ", ".join(f"`{sym}` {pct:.1f}" for pct, sym, _ in rows
                         if pct >= args.min)
        print(f"| {name} | {gs} | {syms} |", flush=True)


if __name__ == "__main__":
    main()
