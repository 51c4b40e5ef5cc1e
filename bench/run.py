#!/usr/bin/python3
"""Benchmark runner for libtransformer against PyTorch (issue 8).

    /usr/bin/python3 bench/run.py [--build-dir build] [--quick]

Builds the bench program (cmake --build BUILD --target transformer-bench),
then, for every configuration and thread count, alternates our measurement
(a subprocess of BUILD/bench/transformer-bench, which prints CSV) and
PyTorch's (in this process, on the same shapes and thread count) for
several rounds.  Each measurement is a warm-up then several timed calls;
its median is one sample.  Reported per row: the median over rounds of our
time and of PyTorch's, the median over rounds of the per-round ratio
ours / PyTorch, GFLOP/s, the fraction of the cblas_sgemm rate measured in
the same round and thread count, and the peak memory each side added.

Writes the aggregated table to --csv (default BUILD/bench-results.csv), every
single measurement to --raw-csv (default BUILD/bench-raw.csv), and a Markdown
version of the table with the run's particulars to --markdown (default
BUILD/bench-results.md), ready for docs/PERFORMANCE.md.

With --ggml BIN (bench/build_ggml.sh builds it against a ggml source tree),
the attention-core rows (sdpa) alternate a third side, ggml's flash
attention, and a second table gives our speed against it (issue 20's
target: at least 1.5 times ggml's at every shape and thread count).

Needs Debian's python3-torch (torch 1.13, on the same OpenBLAS) and numpy:
run it with /usr/bin/python3.  OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are
left as the environment has them.
"""
import argparse
import csv
import ctypes
import datetime
import io
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- configurations ------------------------------------------------------
#
# kind: sgemm | mha | encoder | sdpa | train | sdpa_backward | decode.  args: the bench program's
# arguments.  full / quick: per mode, reps and warmup of each measurement,
# rounds (a cap on the alternating rounds; None: all of them) and, for
# decode, full_reps / full_warmup of the whole-sequence recompute.  quick
# None: the row is skipped by --quick.

def configs():
    c = []

    def m(reps, warmup=1, rounds=None, full_reps=None, full_warmup=None):
        return dict(reps=reps, warmup=warmup, rounds=rounds,
                    full_reps=full_reps, full_warmup=full_warmup)

    def add(kind, key, args, full, quick, target=None):
        c.append(dict(kind=kind, key=key, args=[str(a) for a in args],
                      full=full, quick=quick, target=target))

    # The ceiling: cblas_sgemm on the shapes of attention's products.
    add("sgemm", "sgemm 1024x1024x64 A*B^T", ["sgemm", 1024, 1024, 64, "nt"],
        m(15), m(7))
    add("sgemm", "sgemm 1024x64x1024", ["sgemm", 1024, 64, 1024],
        m(15), m(7))
    add("sgemm", "sgemm 512x512x512", ["sgemm", 512, 512, 512], m(15), m(7))
    shapes = [((8, 128, 512, 8), m(9), m(3)),
              ((1, 1024, 512, 8), m(5), m(3)),
              ((1, 4096, 256, 4), m(2), m(1, rounds=1))]
    for (B, L, D, H), full, quick in shapes:
        add("mha", f"mha B={B} L={L} D={D} H={H}", ["mha", B, L, D, H],
            full, quick, target="ratio<=0.5")
    for (B, L, D, H), full, quick in shapes:
        add("encoder", f"encoder B={B} L={L} D={D} H={H} FF={4 * D}",
            ["encoder", B, L, D, H, 4 * D], full, quick, target="ratio<=0.7")
    add("sdpa", "sdpa B=1 H=8 L=1024 d=64", ["sdpa", 1, 8, 1024, 64],
        m(7), m(3), target="sgemm>=0.8")
    add("sdpa", "sdpa B=1 H=4 L=4096 d=64", ["sdpa", 1, 4, 4096, 64],
        m(2), m(1, rounds=1), target="sgemm>=0.8")
    # One call costs seconds (PyTorch's tens of seconds at 32768): no
    # warm-up; the first call's page faults are part of PyTorch's every call.
    add("sdpa", "sdpa causal B=1 H=1 L=16384 d=64",
        ["sdpa", 1, 1, 16384, 64, "causal"], m(1, 0, rounds=3),
        m(1, 0, rounds=1), target="sgemm>=0.5,mem<=64")
    add("sdpa", "sdpa causal B=1 H=1 L=32768 d=64",
        ["sdpa", 1, 1, 32768, 64, "causal"], m(1, 0, rounds=2), None,
        target="sgemm>=0.5,mem<=64")
    # Training (issue 15): forward + backward + AdamW of the encoder layer,
    # and attention's backward (FlashAttention-2's tiles; its memory at
    # L = 16384 against PyTorch's materialised scores).
    for (B, L, D, H), full, quick in shapes[:2]:
        add("train", f"train B={B} L={L} D={D} H={H} FF={4 * D}",
            ["train", B, L, D, H, 4 * D], full, quick, target="ratio<=0.7")
    add("sdpa_backward", "sdpa_backward B=1 H=8 L=1024 d=64",
        ["sdpa_backward", 1, 8, 1024, 64], m(7), m(3), target="sgemm>=0.6")
    add("sdpa_backward", "sdpa_backward causal B=1 H=1 L=16384 d=64",
        ["sdpa_backward", 1, 1, 16384, 64, "causal"], m(1, 0, rounds=2),
        m(1, 0, rounds=1), target="sgemm>=0.6,mem<=64")
    add("decode", "decode ctx=128 D=512 H=8 layers=1",
        ["decode", 512, 8, 1, 128],
        m(15, 2, full_reps=9, full_warmup=1), m(5, 1, full_reps=3))
    add("decode", "decode ctx=1024 D=512 H=8 layers=1",
        ["decode", 512, 8, 1, 1024], m(15, 2, full_reps=5, full_warmup=1),
        m(5, 1, full_reps=2), target="speedup>=20")
    add("decode", "decode ctx=4096 D=512 H=8 layers=1",
        ["decode", 512, 8, 1, 4096], m(9, 2, full_reps=2, full_warmup=1),
        m(5, 1, rounds=1, full_reps=1, full_warmup=0))
    return c


# ---- memory probes (this process) -----------------------------------------

def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def trim_heap():
    """Gives the C heap's free pages back to the system (glibc's
    malloc_trim): otherwise memory an earlier measurement of this process
    freed stays resident, and the next measurement reuses it unseen (its
    peak then looks smaller than what a fresh process needs)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def mem_begin():
    """Resets the peak-RSS mark; returns the baseline in kB (the heap
    trimmed first)."""
    trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return ("vmhwm", status_kb("VmRSS"))
    except OSError:
        import resource
        return ("maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def mem_end_mb(probe):
    how, base = probe
    if how == "vmhwm":
        peak = status_kb("VmHWM")
    else:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(0, peak - base) / 1024.0


def mem_available_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    return float("inf")


# ---- PyTorch side ------------------------------------------------------------

class Torch:
    def __init__(self):
        import torch
        self.torch = torch
        torch.manual_seed(1)
        self.blas = None
        # torch.set_num_threads sets the OpenMP pool only; the products run
        # in OpenBLAS (the same library the C side uses, loaded by torch), so
        # its thread count is set too, through the already-loaded library.
        for name in ("libopenblas.so.0", "libblas.so.3"):
            try:
                lib = ctypes.CDLL(name)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                lib.openblas_set_num_threads.argtypes = [ctypes.c_int]
                self.blas = lib
                break
            except (OSError, AttributeError):
                continue
        self.cache = {}

    def corename(self):
        if self.blas is None:
            return "unknown"
        return self.blas.openblas_get_corename().decode()

    def blas_threads(self):
        return self.blas.openblas_get_num_threads() if self.blas else -1

    def set_threads(self, n):
        self.torch.set_num_threads(n)
        if self.blas is not None:
            self.blas.openblas_set_num_threads(n)

    def _build(self, cfg):
        """Returns (fn, out_bytes, setup) for the configuration; setup() is
        called inside the memory window but outside the timing (the causal
        mask), and returns the state fn needs."""
        torch = self.torch
        nn = torch.nn
        a = cfg["args"]
        kind = a[0]
        if kind == "sgemm":
            M, N, K = int(a[1]), int(a[2]), int(a[3])
            A = torch.rand(M, K) * 2 - 1
            if len(a) > 4:  # A B^T
                Bm = torch.rand(N, K) * 2 - 1
                return (lambda st: torch.mm(A, Bm.t())), 4 * M * N, None
            Bm = torch.rand(K, N) * 2 - 1
            return (lambda st: torch.mm(A, Bm)), 4 * M * N, None
        if kind in ("mha", "encoder"):
            B, L, D, H = (int(v) for v in a[1:5])
            x = torch.rand(B, L, D) * 2 - 1
            if kind == "mha":
                m = nn.MultiheadAttention(D, H, batch_first=True).eval()
                fn = lambda st: m(x, x, x, need_weights=False)
            else:
                m = nn.TransformerEncoderLayer(
                    D, H, dim_feedforward=int(a[5]), batch_first=True).eval()
                fn = lambda st: m(x)
            for p in m.parameters():
                p.requires_grad_(False)
            return fn, 4 * B * L * D, None
        if kind == "sdpa":
            B, H, L, D = (int(v) for v in a[1:5])
            causal = len(a) > 5
            q, k, v = ((torch.rand(B, H, L, D) * 2 - 1) for _ in range(3))
            scale = 1.0 / math.sqrt(D)

            def core(mask):
                # torch 1.13's math, written to save memory: the scores are
                # scaled and masked in place, then softmax makes the
                # probabilities (a second L x S buffer), then P V.
                s = torch.matmul(q, k.transpose(-2, -1))
                s.mul_(scale)
                if mask is not None:
                    s.masked_fill_(mask, float("-inf"))
                p = torch.softmax(s, dim=-1)
                del s
                return torch.matmul(p, v)

            setup = None
            if causal:
                setup = lambda: torch.ones(L, L, dtype=torch.bool).triu_(1)
            return core, 4 * B * H * L * D, setup
        if kind == "train":
            B, L, D, H = (int(v) for v in a[1:5])
            # x's gradient too, as ours (tfm_encoder_layer_backward's
            # grad_src): a layer's input is a trained tensor's output.
            x = (torch.rand(B, L, D) * 2 - 1).requires_grad_()
            g = torch.rand(B, L, D) * 2 - 1
            m = nn.TransformerEncoderLayer(D, H, dim_feedforward=int(a[5]),
                                           dropout=0.0, batch_first=True)
            opt = torch.optim.AdamW(m.parameters())

            def step(st):
                with torch.enable_grad():
                    opt.zero_grad()
                    x.grad = None
                    m(x).backward(g)
                    opt.step()
            # One step here makes the gradients and AdamW's state, as ours
            # exist before its timing: the memory rows compare what a step
            # adds.
            step(None)
            return step, 0, None
        if kind == "sdpa_backward":
            B, H, L, D = (int(v) for v in a[1:5])
            causal = len(a) > 5
            q, k, v = ((torch.rand(B, H, L, D) * 2 - 1).requires_grad_()
                       for _ in range(3))
            go = torch.rand(B, H, L, D) * 2 - 1
            scale = 1.0 / math.sqrt(D)

            def forward():
                # torch 1.13's math (no fused attention before 2.0): the
                # graph keeps the scores' softmax for the backward.
                with torch.enable_grad():
                    s = torch.matmul(q, k.transpose(-2, -1)) * scale
                    if causal:
                        mask = torch.ones(L, L, dtype=torch.bool).triu_(1)
                        s = s.masked_fill(mask, float("-inf"))
                    return torch.matmul(torch.softmax(s, dim=-1), v)

            def backward(out):
                with torch.enable_grad():
                    out.backward(go, retain_graph=True)
            return backward, 0, forward
        raise ValueError(kind)

    def need_mb(self, cfg):
        a = cfg["args"]
        if a[0] == "sdpa_backward":
            B, H, L = int(a[1]), int(a[2]), int(a[3])
            # scores, probabilities, their gradients (float32), the mask
            return (B * H * L * L * 16 + L * L) / 2**20
        if a[0] == "sdpa":
            B, H, L = int(a[1]), int(a[2]), int(a[3])
            causal = len(a) > 5
            # scores + probabilities (float32) + a boolean mask
            return (B * H * L * L * 8 + (L * L if causal else 0)) / 2**20
        return 0

    def measure(self, cfg, threads, reps, warmup):
        torch = self.torch
        key = cfg["key"]
        if key not in self.cache:
            self.cache = {key: self._build(cfg)}  # keep one config's inputs
        fn, out_bytes, setup = self.cache[key]
        self.set_threads(threads)
        times = []
        with torch.no_grad():
            probe = mem_begin()
            st = setup() if setup else None
            for _ in range(warmup):
                fn(st)
            for _ in range(reps):
                t0 = time.perf_counter()
                fn(st)
                times.append(time.perf_counter() - t0)
            del st
            mem = max(0.0, mem_end_mb(probe) - out_bytes / 2**20)
        return dict(median_s=statistics.median(times), min_s=min(times),
                    peak_delta_mb=mem, mem_method=probe[0],
                    blas_threads=self.blas_threads(),
                    torch_threads=torch.get_num_threads())


# ---- our side ------------------------------------------------------------------

def run_ours(binary, cfg, threads, mode):
    cmd = [binary, "--threads", str(threads), "--reps", str(mode["reps"]),
           "--warmup", str(mode["warmup"])]
    if mode["full_reps"]:
        cmd += ["--full-reps", str(mode["full_reps"])]
    if mode["full_warmup"] is not None:
        cmd += ["--full-warmup", str(mode["full_warmup"])]
    cmd += cfg["args"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n"
                           f"{p.stderr}")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    for r in rows:
        for f in ("median_s", "min_s", "max_s", "gflop", "gflops",
                  "peak_delta_mb", "io_mb"):
            r[f] = float(r[f])
    return rows


def bench_info(binary):
    p = subprocess.run([binary, "info"], stdout=subprocess.PIPE, text=True,
                       check=True)
    return dict(line.split("=", 1) for line in p.stdout.splitlines()
                if "=" in line)


# ---- the run ---------------------------------------------------------------------

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec, dash="-"):
    return dash if x is None else format(x, spec)


def check_target(target, row):
    """'yes' / 'NO' / '' for the row's target."""
    if not target:
        return ""
    parts = []
    for t in target.split(","):
        m = re.fullmatch(r"(ratio|sgemm|mem|speedup)(<=|>=)([0-9.]+)", t)
        what, op, val = m.group(1), m.group(2), float(m.group(3))
        x = {"ratio": row.get("ratio"), "sgemm": row.get("frac_sgemm"),
             "mem": row.get("ours_peak_mb"),
             "speedup": row.get("speedup")}[what]
        ok = None if x is None else (x <= val if op == "<=" else x >= val)
        parts.append((what, ok))
    if any(ok is None for _, ok in parts):
        return "?"
    if all(ok for _, ok in parts):
        return "yes"
    # A time ratio below PyTorch's own fraction of the sgemm rate would need
    # us above that rate: such a target is bound by the sgemm rate.
    floor = row.get("torch_frac_sgemm")
    if (len(parts) == 1 and parts[0][0] == "ratio" and floor is not None
            and floor > float(target.split("=")[1])):
        return f"NO (bound: PyTorch at {floor:.2f} of sgemm)"
    if len(parts) == 1:
        return "NO"
    return "NO (" + ", ".join(f"{w} {'yes' if ok else 'NO'}"
                              for w, ok in parts) + ")"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--quick", action="store_true",
                    help="fewer repetitions and rounds, no L=32768 (~2 min)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="alternating rounds (default 3, quick 2; costly rows "
                    "fewer)")
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--only", default=None,
                    help="regular expression: only rows whose name matches")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--raw-csv", default=None)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--no-build", action="store_true",
                    help="do not run cmake --build first")
    ap.add_argument("--no-torch", action="store_true",
                    help="our side only (no ratios)")
    ap.add_argument("--ggml", default=None, metavar="BIN",
                    help="ggml's flash attention harness "
                    "(bench/build_ggml.sh) as a third side of the sdpa rows")
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    csv_path = args.csv or os.path.join(build, "bench-results.csv")
    raw_path = args.raw_csv or os.path.join(build, "bench-raw.csv")
    md_path = args.markdown or os.path.join(build, "bench-results.md")
    threads_list = [int(t) for t in args.threads.split(",")]
    rounds = args.rounds or (2 if args.quick else 3)

    if not args.no_build:
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build,
                            "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build, "--target",
                        "transformer-bench", "-j", str(os.cpu_count() or 1)],
                       check=True, stdout=subprocess.DEVNULL)
    binary = os.path.join(build, "bench", "transformer-bench")
    ggml = os.path.abspath(args.ggml) if args.ggml else None
    if ggml and not os.access(ggml, os.X_OK):
        sys.exit(f"no ggml harness at {ggml}: run bench/build_ggml.sh")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no bench program at {binary}: build the target "
                 "transformer-bench (TRANSFORMER_BUILD_BENCH=ON)")

    mode_key = "quick" if args.quick else "full"
    cfgs = [c for c in configs() if c[mode_key]]
    if args.only:
        cfgs = [c for c in cfgs if re.search(args.only, c["key"])
                or c["kind"] == "sgemm"]

    info = bench_info(binary)
    torch = None if args.no_torch else Torch()
    t_start = time.time()
    started = datetime.datetime.now().astimezone()
    load_start = os.getloadavg()

    def commit():
        try:
            h = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short",
                                "HEAD"], stdout=subprocess.PIPE, text=True,
                               stderr=subprocess.DEVNULL).stdout.strip()
            d = subprocess.run(["git", "-C", ROOT, "status", "--porcelain",
                                "--untracked-files=no", "src", "include"],
                               stdout=subprocess.PIPE, text=True,
                               stderr=subprocess.DEVNULL).stdout.strip()
            return h + ("+dirty" if d else "")
        except OSError:
            return "unknown"

    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M %Z"),
        "commit": commit(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "ours_corename": info.get("openblas_corename", "?"),
        "ours_openblas": info.get("openblas_config", "?"),
        "tfm_version": info.get("tfm_version", "?"),
        "tfm_set_num_threads": info.get("tfm_set_num_threads", "?"),
        "torch": torch.torch.__version__ if torch else "-",
        "torch_corename": torch.corename() if torch else "-",
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", "(unset)"),
        "threads": ",".join(map(str, threads_list)),
        "rounds": rounds,
        "mode": "quick" if args.quick else "full",
        "ggml": ggml_info(ggml) if ggml else "-",
    }
    print("libtransformer benchmark:", ", ".join(f"{k}={v}" for k, v in
                                                 meta.items()), flush=True)

    raw = []  # every measurement
    # samples[(key, threads)] -> list of per-round dicts
    samples = {}
    for rnd in range(rounds):
        for ci, cfg in enumerate(cfgs):
            mode = cfg[mode_key]
            if mode["rounds"] and rnd >= mode["rounds"]:
                continue
            reps, warmup = mode["reps"], mode["warmup"]
            for t in threads_list:
                rec = dict(round=rnd)
                sides = ["ours", "torch"]
                if ggml and cfg["kind"] == "sdpa":
                    sides.append("ggml")
                k = (rnd + ci + t) % len(sides)
                sides = sides[k:] + sides[:k]  # each side first in turn
                for side in sides:
                    if side in ("ours", "ggml"):
                        # Both programs take the same arguments and print
                        # the same CSV; ours may print several rows
                        # (decode), ggml's one.
                        rows = run_ours(binary if side == "ours" else ggml,
                                        cfg, t, mode)
                        for r in rows:
                            r["side"] = side
                            r["round"] = rnd
                            raw.append(r)
                        rec[side] = rows if side == "ours" else rows[-1]
                    elif torch and cfg["kind"] != "decode":
                        need = torch.need_mb(cfg)
                        avail = mem_available_mb()
                        if need and need * 1.25 > avail:
                            rec["torch_skip"] = (f"needs ~{need:.0f} MB, "
                                                 f"{avail:.0f} MB available")
                            continue
                        m = torch.measure(cfg, t, reps, warmup)
                        m.update(side="torch", round=rnd, name=cfg["kind"],
                                 shape=cfg["key"], threads=t, reps=reps,
                                 warmup=warmup, corename=torch.corename())
                        raw.append(m)
                        rec["torch"] = m
                samples.setdefault((cfg["key"], t), []).append(rec)
                o = rec["ours"][-1]
                tm = rec.get("torch")
                print(f"  round {rnd + 1}/{rounds} {cfg['key']:<38} t={t} "
                      f"ours {o['median_s'] * 1e3:9.2f} ms"
                      + (f"  torch {tm['median_s'] * 1e3:9.2f} ms  ratio "
                         f"{o['median_s'] / tm['median_s']:.3f}" if tm else
                         (f"  {rec['ours'][0]['name']} "
                          f"{rec['ours'][0]['median_s'] * 1e3:.2f} ms"
                          if len(rec["ours"]) > 1 else ""))
                      + (f"  ggml {rec['ggml']['median_s'] * 1e3:9.2f} ms"
                         if rec.get("ggml") else "")
                      + f"   [{time.time() - t_start:.0f} s]", flush=True)

    # ---- aggregate ----------------------------------------------------------
    # The same-run sgemm ceiling: per round and thread count, the best of the
    # sgemm shapes (our side).
    ceiling = {}
    for cfg in cfgs:
        if cfg["kind"] != "sgemm":
            continue
        for t in threads_list:
            for rec in samples.get((cfg["key"], t), []):
                g = rec["ours"][0]["gflops"]
                k = (rec["round"], t)
                ceiling[k] = max(ceiling.get(k, 0.0), g)

    table = []
    for cfg in cfgs:
        for t in threads_list:
            recs = samples.get((cfg["key"], t), [])
            if not recs:
                continue
            o_rows = [r["ours"] for r in recs]
            ours_last = [r[-1] for r in o_rows]
            row = dict(name=cfg["key"], kind=cfg["kind"], threads=t,
                       rounds=len(recs),
                       reps=ours_last[0]["reps"],
                       gflop=ours_last[0]["gflop"],
                       io_mb=ours_last[0]["io_mb"],
                       ours_s=median([r["median_s"] for r in ours_last]),
                       ours_gflops=median([r["gflops"] for r in ours_last]),
                       ours_peak_mb=max(r["peak_delta_mb"] for r in ours_last),
                       corename=ours_last[0]["corename"],
                       blas_threads=ours_last[0]["blas_threads"],
                       tfm_threads=ours_last[0].get("tfm_threads", ""),
                       target=cfg["target"] or "", note="")
            tms = [r.get("torch") for r in recs]
            if any(tms):
                pairs = [(r["ours"][-1]["median_s"], r["torch"]["median_s"])
                         for r in recs if r.get("torch")]
                ratios = [a / b for a, b in pairs]
                row.update(
                    torch_s=median([m["median_s"] for m in tms if m]),
                    ratio=median(ratios), ratio_min=min(ratios),
                    ratio_max=max(ratios),
                    torch_gflops=median([row["gflop"] / m["median_s"]
                                         for m in tms if m]),
                    torch_peak_mb=max(m["peak_delta_mb"] for m in tms if m),
                    torch_corename=next(m["corename"] for m in tms if m),
                    torch_threads=next(m["torch_threads"] for m in tms if m))
                # Against PyTorch's fastest thread count in the same round:
                # on a loaded machine its 2-thread runs can be slower than
                # its 1-thread runs, which flatters the same-count ratio.
                best = []
                for r in recs:
                    if not r.get("torch"):
                        continue
                    alts = [x["torch"]["median_s"]
                            for tt in threads_list
                            for x in samples.get((cfg["key"], tt), [])
                            if x["round"] == r["round"] and x.get("torch")]
                    best.append(r["ours"][-1]["median_s"] / min(alts))
                row["ratio_best"] = median(best)
            gms = [r for r in recs if r.get("ggml")]
            if gms:
                # Our speed against ggml's: its time over ours, per round.
                sp = [r["ggml"]["median_s"] / r["ours"][-1]["median_s"]
                      for r in gms]
                row.update(
                    ggml_s=median([r["ggml"]["median_s"] for r in gms]),
                    ggml_speedup=median(sp), ggml_speedup_min=min(sp),
                    ggml_speedup_max=max(sp),
                    ggml_gflops=median([r["ggml"]["gflops"] for r in gms]),
                    ggml_peak_mb=max(r["ggml"]["peak_delta_mb"] for r in gms),
                    ggml_met="yes" if median(sp) >= 1.5 else "NO")
            skips = [r["torch_skip"] for r in recs if r.get("torch_skip")]
            if skips:
                row["note"] = "PyTorch skipped: " + skips[0]
            if cfg["kind"] in ("sdpa", "mha", "encoder", "train",
                               "sdpa_backward"):
                fr = [r["ours"][-1]["gflops"] / ceiling[(r["round"], t)]
                      for r in recs if ceiling.get((r["round"], t))]
                row["frac_sgemm"] = median(fr)
                if row.get("torch_s"):
                    tf = [row["gflop"] / r["torch"]["median_s"]
                          / ceiling[(r["round"], t)]
                          for r in recs if r.get("torch")
                          and ceiling.get((r["round"], t))]
                    row["torch_frac_sgemm"] = median(tf)
                row["sgemm_gflops"] = median(
                    [ceiling[(r["round"], t)] for r in recs
                     if ceiling.get((r["round"], t))])
            if cfg["kind"] == "decode":
                steps = [r["ours"][0]["median_s"] for r in recs]
                full = [r["ours"][1]["median_s"] for r in recs]
                row["step_s"] = median(steps)
                row["ours_s"] = median(full)
                row["speedup"] = median([f / s for f, s in zip(full, steps)])
                row["ours_gflops"] = median(
                    [r["ours"][1]["gflops"] for r in recs])
                row["step_peak_mb"] = max(
                    r["ours"][0]["peak_delta_mb"] for r in recs)
                row["ours_peak_mb"] = max(
                    r["ours"][1]["peak_delta_mb"] for r in recs)
            row["met"] = check_target(row["target"], row)
            table.append(row)

    elapsed = time.time() - t_start
    meta["wall_s"] = round(elapsed)
    meta["load_start"] = " ".join(f"{x:.2f}" for x in load_start)
    meta["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    text = render_text(table, meta)
    print()
    print(text)
    md = render_markdown(table, meta)

    fields = ["name", "kind", "threads", "rounds", "reps", "gflop", "ours_s",
              "torch_s", "ratio", "ratio_min", "ratio_max", "ratio_best",
              "ours_gflops",
              "torch_gflops", "sgemm_gflops", "frac_sgemm",
              "torch_frac_sgemm", "step_s", "speedup", "ours_peak_mb",
              "torch_peak_mb", "io_mb", "target", "met", "ggml_s",
              "ggml_speedup", "ggml_gflops", "ggml_peak_mb", "ggml_met",
              "corename",
              "torch_corename", "blas_threads", "tfm_threads",
              "torch_threads", "note", "date", "commit"]
    for path in (csv_path, raw_path, md_path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in table:
            w.writerow({**r, "date": meta["date"], "commit": meta["commit"]})
    raw_fields = ["side", "round", "name", "shape", "threads", "blas_threads",
                  "tfm_threads", "torch_threads", "warmup", "reps",
                  "median_s", "min_s", "max_s", "gflop", "gflops",
                  "peak_delta_mb", "io_mb", "mem_method", "corename"]
    with open(raw_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=raw_fields, extrasaction="ignore")
        w.writeheader()
        for r in raw:
            w.writerow(r)
    with open(md_path, "w") as f:
        f.write(md)
    print(f"\nwrote {csv_path}, {raw_path}, {md_path} "
          f"({elapsed:.0f} s)")


def ggml_info(binary):
    """The ggml tree the harness was built from (build_ggml.sh writes it
    beside the binary), or its path."""
    try:
        with open(binary + ".source") as f:
            return f.read().strip()
    except OSError:
        return binary


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# ---- rendering ---------------------------------------------------------------------

MAIN_HEAD = ["row", "thr", "ours ms", "PyTorch ms", "ours/PyTorch",
             "vs PyTorch best thr", "ours GFLOP/s", "PyTorch GFLOP/s", "of sgemm: ours (PyTorch)",
             "ours peak MB", "PyTorch peak MB", "target", "met"]
DECODE_HEAD = ["row", "thr", "decode step ms", "full recompute ms",
               "speed-up", "recompute GFLOP/s", "step peak MB",
               "recompute peak MB", "target", "met"]


GGML_HEAD = ["row", "thr", "ours ms", "ggml ms", "ours speed / ggml's",
             "ours GFLOP/s", "ggml GFLOP/s", "ours peak MB", "ggml peak MB",
             "target", "met"]


def ggml_cells(r):
    sp = fmt(r.get("ggml_speedup"), ".2f")
    if r["rounds"] > 1:
        sp += f" ({r['ggml_speedup_min']:.2f}-{r['ggml_speedup_max']:.2f})"
    return [r["name"], str(r["threads"]), fmt(r["ours_s"] * 1e3, ".2f"),
            fmt(r["ggml_s"] * 1e3, ".2f"), sp,
            fmt(r.get("ours_gflops"), ".1f"), fmt(r.get("ggml_gflops"), ".1f"),
            fmt(r.get("ours_peak_mb"), ".1f"), fmt(r.get("ggml_peak_mb"), ".1f"),
            "ggml x1.5", r["ggml_met"]]


def main_cells(r):
    ratio = fmt(r.get("ratio"), ".3f")
    if r.get("ratio") is not None and r["rounds"] > 1:
        ratio += f" ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
    frac = fmt(r.get("frac_sgemm"), ".2f")
    if r.get("torch_frac_sgemm") is not None:
        frac += f" ({r['torch_frac_sgemm']:.2f})"
    met = r["met"] + (f" [{r['note']}]" if r["note"] else "")
    return [r["name"], str(r["threads"]), fmt(r["ours_s"] * 1e3, ".2f"),
            fmt(r.get("torch_s") and r["torch_s"] * 1e3, ".2f"), ratio,
            fmt(r.get("ratio_best"), ".3f"), fmt(r.get("ours_gflops"), ".1f"),
            fmt(r.get("torch_gflops"), ".1f"), frac,
            fmt(r.get("ours_peak_mb"), ".1f"),
            fmt(r.get("torch_peak_mb"), ".1f"), r["target"], met]


def decode_cells(r):
    return [r["name"], str(r["threads"]), fmt(r["step_s"] * 1e3, ".3f"),
            fmt(r["ours_s"] * 1e3, ".1f"), fmt(r.get("speedup"), ".1f") + "x",
            fmt(r.get("ours_gflops"), ".1f"),
            fmt(r.get("step_peak_mb"), ".1f"),
            fmt(r.get("ours_peak_mb"), ".1f"), r["target"], r["met"]]


def split(table):
    return ([main_cells(r) for r in table if r["kind"] != "decode"],
            [decode_cells(r) for r in table if r["kind"] == "decode"])


def text_table(head, cells):
    if not cells:
        return []
    widths = [max(len(h), *(len(c[i]) for c in cells))
              for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for c in cells:
        lines.append("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
    return lines


def md_table(head, cells):
    if not cells:
        return []
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    for c in cells:
        lines.append("| " + " | ".join(x.replace("|", "/") for x in c) + " |")
    return lines


def render_text(table, meta):
    main_c, dec_c = split(table)
    lines = text_table(MAIN_HEAD, main_c)
    if dec_c:
        lines += [""] + text_table(DECODE_HEAD, dec_c)
    gg = [ggml_cells(r) for r in table if r.get("ggml_s")]
    if gg:
        lines += [""] + text_table(GGML_HEAD, gg)
    lines += ["", f"threads: {meta['threads']}; OpenBLAS core: ours "
              f"{meta['ours_corename']}, PyTorch {meta['torch_corename']}; "
              f"OPENBLAS_CORETYPE={meta['OPENBLAS_CORETYPE']}; "
              f"rounds {meta['rounds']}; load average "
              f"{meta['load_start']} -> {meta['load_end']}"]
    return "\n".join(lines)


def render_markdown(table, meta):
    out = [f"Run of {meta['date']} ({meta['mode']} mode, {meta['wall_s']} s "
           f"wall), commit {meta['commit']}, libtransformer "
           f"{meta['tfm_version']}, torch {meta['torch']}.", "",
           f"- CPU: {meta['cpu']}, {meta['cores']} cores, Linux "
           f"{meta['kernel']}",
           f"- OpenBLAS core type: ours {meta['ours_corename']}, PyTorch's "
           f"{meta['torch_corename']} (OPENBLAS_CORETYPE="
           f"{meta['OPENBLAS_CORETYPE']}, OPENBLAS_L2_SIZE="
           f"{meta['OPENBLAS_L2_SIZE']}); {meta['ours_openblas']}",
           f"- Threads: {meta['threads']} (tfm_set_num_threads: "
           f"{meta['tfm_set_num_threads']}); alternating rounds: "
           f"{meta['rounds']}",
           f"- Load average (1, 5, 15 min) at start {meta['load_start']}, "
           f"at end {meta['load_end']}", ""]
    main_c, dec_c = split(table)
    out += md_table(MAIN_HEAD, main_c)
    if dec_c:
        out += [""] + md_table(DECODE_HEAD, dec_c)
    gg = [ggml_cells(r) for r in table if r.get("ggml_s")]
    if gg:
        out += ["", f"ggml's flash attention ({meta['ggml']}), alternated "
                "with ours in the same rounds:", ""] + md_table(GGML_HEAD, gg)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
