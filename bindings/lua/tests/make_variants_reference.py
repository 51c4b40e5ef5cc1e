#!/usr/bin/python3
"""Reference values for the Lua tests of the attention variants
(include/transformer/variants.h): writes variants_reference.lua next to
this script (or into --out DIR).

The expected outputs come from the float64 numpy references of
bindings/python/tests/variant_reference.py, written from the papers'
equations (RoFormer, ALiBi, T5, Shaw et al., Luong, Bahdanau, grouped-query
attention, Longformer / BigBird patterns); nothing here calls
libtransformer.  Inputs and weights are float32 values, so that Lua and
numpy start from the same numbers.  Seeds are fixed: a rerun writes the
same file.

    /usr/bin/python3 bindings/lua/tests/make_variants_reference.py
"""

import argparse
import os
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))
sys.path.insert(0, HERE)
from make_reference import lua_value  # noqa: E402
from variant_reference import attention_ref, concat_ref, mha_ref  # noqa: E402


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def rnd(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def attention_case(name, H, L, dk, cfg, Hkv=None, S=None, dv=None,
                   causal=None, params=None):
    """q, k, v (and parameters) for Attention(dk, H, dv, cfg) and what it
    must return."""
    rng = rng_for(name)
    S = L if S is None else S
    Hkv = H if Hkv is None else Hkv
    dv = dk if dv is None else dv
    q = rnd(rng, 1, H, L, dk)
    k, v = rnd(rng, 1, Hkv, S, dk), rnd(rng, 1, Hkv, S, dv)
    state = {}
    for pname, shape in (params or {}).items():
        if pname == "temperature":
            state[pname] = (1 + 2 * rng.random(shape)).astype(np.float32)
        else:
            state[pname] = rnd(rng, *shape, scale=0.7)
    out, w = attention_ref(q, k, v, state, causal=causal, **cfg)
    return {"head_dim": dk, "num_heads": H, "value_dim": dv,
            "variant": cfg, "causal": causal or "none",
            "q": q, "k": k, "v": v, "state": state,
            "out": out, "weights": w}


def mha_case(name, E, H, L, cfg, causal):
    rng = rng_for(name)
    dk = E // H
    n_kv = cfg.get("n_kv_heads", H)
    rows = E + 2 * n_kv * dk
    state = {"in_proj_weight": rnd(rng, rows, E, scale=0.5),
             "in_proj_bias": rnd(rng, rows, scale=0.5),
             "out_proj.weight": rnd(rng, E, E, scale=0.5),
             "out_proj.bias": rnd(rng, E, scale=0.5)}
    x = rnd(rng, 1, L, E)
    out = mha_ref(x, state, E, H, n_kv, causal, **cfg)
    return {"embed_dim": E, "num_heads": H, "variant": cfg,
            "is_causal": causal, "state": state, "x": x, "out": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE,
                    help="output directory (default: this one)")
    args = ap.parse_args()
    ref = {
        # Ainslie et al. 2023: 4 query heads read 2 key/value heads.
        "gqa": attention_case("gqa", 4, 3, 4, {"n_kv_heads": 2}, Hkv=2,
                              S=5, dv=3),
        "rope_adjacent": attention_case("rope_adjacent", 2, 4, 4,
                                        {"rope": "adjacent"},
                                        causal="top_left"),
        "rope_half_partial": attention_case(
            "rope_half_partial", 2, 4, 6,
            {"rope": "half", "rope_dims": 4, "rope_base": 100.0}),
        # a decoding step: 2 queries at positions 3, 4 of 5 keys
        "rope_half_bottom_right": attention_case(
            "rope_half_bottom_right", 2, 2, 4, {"rope": "half"}, S=5,
            causal="bottom_right"),
        # 6 heads: not a power of two
        "alibi_6_heads": attention_case("alibi_6_heads", 6, 4, 2,
                                        {"relative": "alibi"},
                                        causal="top_left"),
        "t5_unidirectional": attention_case(
            "t5_unidirectional", 2, 12, 2,
            {"relative": "t5", "num_buckets": 8, "max_distance": 20,
             "bidirectional": False},
            params={"relative_attention_bias.weight": (8, 2)}),
        "t5_bidirectional": attention_case(
            "t5_bidirectional", 2, 12, 2,
            {"relative": "t5", "num_buckets": 8, "max_distance": 20},
            params={"relative_attention_bias.weight": (8, 2)}),
        "shaw_values": attention_case(
            "shaw_values", 2, 5, 4,
            {"relative": "shaw", "max_distance": 2, "relative_values": True},
            params={"relative_key.weight": (5, 4),
                    "relative_value.weight": (5, 4)}),
        "sliding_window": attention_case(
            "sliding_window", 2, 6, 4,
            {"sparsity": "sliding_window", "window": 1, "n_global": 1},
            causal="top_left"),
        "general": attention_case("general", 2, 3, 4, {"score": "general"},
                                  S=4, params={"score_weight": (2, 4, 4)}),
        "additive": attention_case(
            "additive", 2, 3, 4, {"score": "additive", "additive_dim": 3},
            S=4, params={"additive_query": (2, 3, 4),
                         "additive_key": (2, 3, 4), "additive_v": (2, 3)}),
        "learned_temperature": attention_case(
            "learned_temperature", 3, 4, 4, {"score": "learned_temperature"},
            params={"temperature": (3,)}),
        "mha_gqa_rope": mha_case("mha_gqa_rope", 8, 4, 5,
                                 {"n_kv_heads": 2, "rope": "half"}, True),
        "mha_alibi": mha_case("mha_alibi", 12, 6, 4, {"relative": "alibi"},
                              False),
        "sinusoidal_concat": {"length": 4, "d_model": 7, "offset": 2,
                              "base": 100.0,
                              "pe": concat_ref(4, 7, 2, 100.0)},
    }
    path = os.path.join(args.out, "variants_reference.lua")
    with open(path, "w") as f:
        f.write("-- Generated by make_variants_reference.py (float64 numpy, "
                "variant_reference.py); do not edit.\n")
        f.write("return " + lua_value(ref) + "\n")
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
