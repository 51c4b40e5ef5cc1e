#!/usr/bin/env python3
"""Reference values for tests/test_training.c (training.h), from PyTorch 1.13.

Written as one safetensors file of float32 tensors (integer values such as
targets are stored as floats; they are small and exact):

  ce<k>.logits, ce<k>.targets, ce<k>.meta = [ignore_index, label_smoothing,
      reduction (0 mean, 1 sum), causal (1: tfm_causal_lm_loss)],
      ce<k>.loss [1], ce<k>.dlogits: torch.nn.functional.cross_entropy in
      float64 (logits.double(), autograd for the gradient) on the float32
      logits; [B, T, C] logits as logits.view(-1, C), the causal loss as
      Hugging Face's shift (logits[:, :-1] against ids[:, 1:]).
  mlm<k>.ids, .inputs, .targets, .meta = [seed, vocab_size, mask_id,
      mask_prob, ignore_index, never_mask...]: BERT's masking procedure as
      training.h specifies it, with SplitMix64 (Steele et al. 2014, the
      constants of Vigna's splitmix64.c) written here in Python integers.

  opt<k>.meta = [kind (0 SGD, 1 Adam, 2 AdamW), lr, weight_decay,
      momentum, dampening, nesterov, beta1, beta2, eps, amsgrad, maximize,
      schedule (0 none, 1 inverse-sqrt warm-up, 2 warm-up + cosine), its
      three arguments, steps, clip max_norm (0: none), clip norm_type],
      opt<k>.<weight|bias>.init, .grad<s> (the gradient given at step s),
      .after<s> (torch.optim's parameter after step s), .<state> (the
      final state), opt<k>.lr [steps] and opt<k>.norm [steps]: the
      parameters of an nn.Linear(6, 4) stepped by torch.optim (foreach=
      False) under torch.optim.lr_scheduler.LambdaLR with the formulas of
      training.h written here, clipped by torch.nn.utils.clip_grad_norm_.

Usage: make_training_fixtures.py --out FILE
"""
import argparse
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F


def save(path, tensors):
    """A safetensors file (Hugging Face's format) of float32 arrays."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape) or [1],
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def cross_entropy_cases(out, rng):
    # (shape, ignore_index, smoothing, reduction, causal, ignored share,
    #  logit scale)
    cases = [
        ((7, 5), -100, 0.0, 0, 0, 0.0, 1.0),
        ((9, 11), -100, 0.1, 0, 0, 0.3, 2.0),
        ((9, 11), -100, 0.1, 1, 0, 0.3, 2.0),
        ((2, 6, 13), -100, 0.2, 0, 0, 0.25, 1.0),
        ((2, 6, 13), -1, 0.0, 1, 0, 0.25, 1.0),
        ((8, 6), 3, 0.3, 0, 0, 0.0, 1.0),      # ignore_index a real class
        ((5, 17), -100, 0.1, 0, 0, 0.2, 40.0),  # large logits
        ((4, 1000), -100, 0.1, 0, 0, 0.25, 3.0),
        ((2, 5, 7), -100, 0.1, 0, 1, 0.2, 1.0),
        ((3, 4, 9), -100, 0.0, 1, 1, 0.0, 1.0),
        ((1, 6, 10), 0, 0.05, 0, 1, 0.0, 1.0),  # causal, id 0 ignored
        ((6, 4), -100, 1.0, 0, 0, 0.3, 1.0),    # smoothing 1: uniform only
    ]
    for k, (shape, ign, eps, red, causal, share, scale) in enumerate(cases):
        C = shape[-1]
        logits = (rng.standard_normal(shape) * scale).astype(np.float32)
        n = int(np.prod(shape[:-1]))
        t = rng.integers(0, C, n)
        t[rng.random(n) < share] = ign
        reduction = "mean" if red == 0 else "sum"
        x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        if causal:
            B, T = shape[0], shape[1]
            ids = torch.tensor(t.reshape(B, T))
            lg = x[:, :-1, :].reshape(-1, C)
            lab = ids[:, 1:].reshape(-1)
        else:
            lg = x.reshape(-1, C)
            lab = torch.tensor(t)
        loss = F.cross_entropy(lg, lab, ignore_index=ign,
                               label_smoothing=eps, reduction=reduction)
        loss.backward()
        p = "ce%d." % k
        out[p + "logits"] = logits
        out[p + "targets"] = t.astype(np.float32)
        out[p + "meta"] = np.array([ign, eps, red, causal], np.float32)
        out[p + "loss"] = np.array([loss.item()])
        out[p + "dlogits"] = x.grad.numpy()


M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 40) / float(1 << 24)


def f32(x):
    return float(np.float32(x))


def masked_lm(ids, vocab, mask_id, prob, never, ignore, seed):
    g = SplitMix64(seed)
    inputs, targets = list(ids), [ignore] * len(ids)
    for i, t in enumerate(ids):
        if t in never:
            continue
        if not g.uniform() < f32(prob):
            continue
        targets[i] = t
        u = g.uniform()
        if u < f32(0.8):
            inputs[i] = mask_id
        elif u < f32(0.9):
            inputs[i] = (g.next() * vocab) >> 64
    return inputs, targets


def masked_lm_cases(out, rng):
    cases = [(1234, 30, 4, 0.15, [0, 1, 2], -100, 400),
             (99, 1000, 103, 0.5, [0], -1, 300),
             (7, 5, 0, 1.0, [], -100, 50)]
    for k, (seed, vocab, mask_id, prob, never, ign, n) in enumerate(cases):
        ids = [int(i) for i in rng.integers(0, vocab, n)]
        inputs, targets = masked_lm(ids, vocab, mask_id, prob, never, ign,
                                    seed)
        p = "mlm%d." % k
        out[p + "ids"] = np.array(ids, np.float32)
        out[p + "inputs"] = np.array(inputs, np.float32)
        out[p + "targets"] = np.array(targets, np.float32)
        out[p + "meta"] = np.array([seed, vocab, mask_id, prob, ign] + never,
                                   np.float32)


def noam(d_model, warmup):
    def f(s):
        n = max(s, 1)
        return d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)
    return f


def warmup_cosine(warmup, total, floor):
    def f(s):
        if s < warmup:
            return s / warmup
        q = min(1.0, (s - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * q))
    return f


def optimizer_cases(out, rng):
    f = f32
    # kind, options, schedule (kind, a, b, c), steps, clip (max, type)
    cases = [
        (0, dict(lr=0.1), (0, 0, 0, 0), 1, (0, 2)),
        (0, dict(lr=0.05, momentum=0.9), (0, 0, 0, 0), 8, (0, 2)),
        (0, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
         (0, 0, 0, 0), 6, (0, 2)),
        (0, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1,
                 maximize=True), (0, 0, 0, 0), 6, (1.0, 2)),
        (1, dict(lr=1e-3), (0, 0, 0, 0), 1, (0, 2)),
        (1, dict(lr=1e-2), (0, 0, 0, 0), 20, (0, 2)),
        (1, dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                 amsgrad=True), (0, 0, 0, 0), 12, (0.5, 2)),
        (2, dict(lr=1e-3), (0, 0, 0, 0), 1, (0, 2)),
        (2, dict(lr=1.0, weight_decay=0.01), (1, 16, 4, 0), 12, (0, 2)),
        (2, dict(lr=2e-2, weight_decay=0.1, amsgrad=True, maximize=True),
         (2, 3, 10, 0.1), 12, (0.7, float("inf"))),
        (1, dict(lr=2e-2), (2, 0, 5, 0.0), 8, (2.0, 1.5)),
    ]
    names = {0: torch.optim.SGD, 1: torch.optim.Adam, 2: torch.optim.AdamW}
    for k, (kind, opts, sched, steps, clip) in enumerate(cases):
        opts = {key: (tuple(f(b) for b in v) if isinstance(v, tuple)
                      else (f(v) if isinstance(v, float) else v))
                for key, v in opts.items()}
        w = torch.tensor(rng.standard_normal((4, 6)).astype(np.float32),
                         requires_grad=True)
        b = torch.tensor(rng.standard_normal(4).astype(np.float32),
                         requires_grad=True)
        p = "opt%d." % k
        out[p + "weight.init"] = w.detach().numpy().copy()
        out[p + "bias.init"] = b.detach().numpy().copy()
        # Every hyperparameter explicit and float32-representable, as the
        # test passes them (the meta row is float32).
        g = {"momentum": 0.0, "dampening": 0.0, "nesterov": False,
             "weight_decay": 0.01 if kind == 2 else 0.0,
             "betas": (0.9, 0.999), "eps": 1e-8, "amsgrad": False,
             "maximize": False}
        g.update(opts)
        g = {key: (tuple(f(b) for b in v) if isinstance(v, tuple)
                   else (f(v) if isinstance(v, float) else v))
             for key, v in g.items()}
        if kind == 0:
            kw = {key: g[key] for key in ("lr", "momentum", "dampening",
                                          "nesterov", "weight_decay",
                                          "maximize")}
        else:
            kw = {key: g[key] for key in ("lr", "betas", "eps",
                                          "weight_decay", "amsgrad",
                                          "maximize")}
        opt = names[kind]([w, b], foreach=False, **kw)
        if sched[0] == 1:
            lam = noam(sched[1], sched[2])
        elif sched[0] == 2:
            lam = warmup_cosine(sched[1], sched[2], sched[3])
        else:
            lam = lambda s: 1.0
        sch = torch.optim.lr_scheduler.LambdaLR(opt, lam)
        lrs, norms = [], []
        for s in range(steps):
            gw = rng.standard_normal((4, 6)).astype(np.float32)
            gb = rng.standard_normal(4).astype(np.float32)
            out[p + "weight.grad%d" % s] = gw
            out[p + "bias.grad%d" % s] = gb
            w.grad = torch.tensor(gw)
            b.grad = torch.tensor(gb)
            if clip[0] > 0:
                norms.append(float(torch.nn.utils.clip_grad_norm_(
                    [w, b], clip[0], norm_type=clip[1])))
            else:
                norms.append(0.0)
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
            out[p + "weight.after%d" % s] = w.detach().numpy().copy()
            out[p + "bias.after%d" % s] = b.detach().numpy().copy()
        for name, t in (("weight", w), ("bias", b)):
            for key, v in opt.state[t].items():
                if v is None:       # SGD without momentum
                    continue
                out[p + name + "." + key] = np.array(
                    v.detach().numpy(), np.float32).reshape(-1) \
                    if key == "step" else v.detach().numpy()
        out[p + "meta"] = np.array(
            [kind, g["lr"], g["weight_decay"], g["momentum"], g["dampening"],
             g["nesterov"], g["betas"][0], g["betas"][1], g["eps"],
             g["amsgrad"], g["maximize"], sched[0], sched[1], sched[2],
             sched[3], steps, clip[0], clip[1]], np.float32)
        out[p + "lr"] = np.array(lrs, np.float32)
        out[p + "norm"] = np.array(norms, np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(20261202)
    out = {}
    cross_entropy_cases(out, rng)
    masked_lm_cases(out, rng)
    optimizer_cases(out, rng)
    save(args.out, out)


if __name__ == "__main__":
    main()
