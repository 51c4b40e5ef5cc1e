#!/usr/bin/python3
"""libtransformer against llama.cpp on the same random weights (issue 45,
docs/PERFORMANCE.md, "Low-bit weights vs llama.cpp (issue 45)"), side by
side in one run on this machine.

Models (random weights, seeded; std 0.02 for matrices, norms around 1):
  - GPT-2 small's shape: d 768, 12 layers, 12 heads, d_ff 3072, vocabulary
    50257, context 1024, tied head (124 M parameters);
  - a Llama shape with grouped-query heads: hidden 1024, 16 layers, 16
    heads, 4 key/value heads, d_ff 2816, vocabulary 32000, untied head,
    RoPE base 10000 (244 M parameters).
Each is written as a hub directory (config.json + model.safetensors under
transformers' names, by the test suite's reference writers) for
libtransformer and as GGUF v3 files for llama.cpp with gguf-py (its
GGUFWriter and its numpy quantisers: F32, Q8_0, Q4_0), in llama.cpp's
names and layout (GPT-2: Conv1D weights transposed, attn_qkv fused as
GPT-2 stores it; Llama: the q / k rows permuted from the hub's half-split
rotary layout to ggml's interleaved pairs, as convert_hf_to_gguf.py does),
with a dummy tokenizer section of the right size (GPT-2: the 256 byte
symbols, dummy tokens, <|endoftext|>, one merge; Llama: <unk> <s> </s>,
the 256 <0xXX> byte tokens, dummy tokens).  All 2-D weights of the
quantised files are quantised, the token table included, except GPT-2's
position table (kept F32).

Measured, at each thread count, as llama-bench measures (-p 512 -n 128):
prefill of 512 tokens into an empty cache (tokens/s) and decoding of 128
tokens one at a time from an empty cache (tokens/s), mean of --reps runs
after a warm-up; libtransformer through bench/decode_bench.c (the same
GGUF file, its weights kept as stored and mapped), llama.cpp through
llama-bench (its defaults otherwise: F16 KV cache, flash attention auto).
Peak RSS of each process (wait4), a plain memory-read rate (decode_bench
--memread: summing a 1 GiB buffer at each thread count) and the weight bytes read per second
while decoding (weight bytes x decode tokens/s) beside them.  Before
timing, both sides must agree on the F32 models: the greedy continuation
of a seeded 16-token prompt, and the last prompt position's logits
(llama.cpp with a float32 KV cache through bench/llama_logits.cpp).

Usage:
  bash bench/build_llama_cpp.sh OUT          # llama-bench, llama-logits
  BUILD_DIR=build bash tools/build.sh        # transformer-decode-bench
  /usr/bin/python3 bench/llama_compare.py --llama OUT [--build build]
      [--threads 1,2] [--reps 3] [--dtypes f32,q8_0] [--models gpt2,llama]
      [--work /tmp/llama-compare]
LLAMA_CPP (or --gguf-py) names the llama.cpp tree whose gguf-py is used
(default OUT/src).
"""
import argparse
import ctypes
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "tests"))

GPT2 = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=768,
            n_head=12, n_layer=12, n_positions=1024, n_ctx=1024,
            n_inner=None, vocab_size=50257, activation_function="gelu_new",
            layer_norm_epsilon=1e-5, tie_word_embeddings=True)
LLAMA = dict(model_type="llama", architectures=["LlamaForCausalLM"],
             hidden_size=1024, num_attention_heads=16, num_key_value_heads=4,
             num_hidden_layers=16, intermediate_size=2816, vocab_size=32000,
             max_position_embeddings=2048, rms_norm_eps=1e-5,
             rope_theta=10000.0, hidden_act="silu", rope_scaling=None,
             tie_word_embeddings=False)
MATRIX_STD = 0.02


def make_weights(kind):
    """The model's tensors (numpy float32) under the hub's names (no
    prefix), seeded: the reference writers' random weights, matrices
    rescaled to std 0.02."""
    import hub_gpt2_reference as G
    import hub_llama_reference as R
    if kind == "gpt2":
        w = G.random_weights(GPT2, seed=45)
    else:
        w = R.random_weights(LLAMA, seed=45)
    out = {}
    for k, v in w.items():
        v = v.numpy()
        if v.ndim == 2:
            std = 1.0 if k == "embed_tokens.weight" else 0.2
            if k == "wpe.weight":
                std = 0.1
            v = v * (MATRIX_STD / std)
        out[k] = v.astype("float32")
    return out


def write_hub(kind, w, path):
    import torch
    import hub_gpt2_reference as G
    import hub_llama_reference as R
    tw = {k: torch.from_numpy(v) for k, v in w.items()}
    if kind == "gpt2":
        G.write_checkpoint(path, tw, GPT2, tokenizer=False)
    else:
        R.write_checkpoint(path, tw, LLAMA, tokenizer=False)


def permute_rows(w, n_head):
    """Hub q/k rows (per head: the first half of the rotary pairs, then the
    second) to ggml's order (per head: pairs interleaved)."""
    r, c = w.shape
    return w.reshape(n_head, 2, r // n_head // 2, c).swapaxes(1, 2) \
        .reshape(r, c)


def gguf_tensors(kind, w):
    """(name, float32 array, quantisable) in llama.cpp's names and layout."""
    t = []
    if kind == "gpt2":
        t.append(("token_embd.weight", w["wte.weight"], True))
        t.append(("position_embd.weight", w["wpe.weight"], False))
        for i in range(GPT2["n_layer"]):
            p, b = f"h.{i}.", f"blk.{i}."
            t += [(b + "attn_norm.weight", w[p + "ln_1.weight"], False),
                  (b + "attn_norm.bias", w[p + "ln_1.bias"], False),
                  (b + "attn_qkv.weight", w[p + "attn.c_attn.weight"].T, True),
                  (b + "attn_qkv.bias", w[p + "attn.c_attn.bias"], False),
                  (b + "attn_output.weight", w[p + "attn.c_proj.weight"].T,
                   True),
                  (b + "attn_output.bias", w[p + "attn.c_proj.bias"], False),
                  (b + "ffn_norm.weight", w[p + "ln_2.weight"], False),
                  (b + "ffn_norm.bias", w[p + "ln_2.bias"], False),
                  (b + "ffn_up.weight", w[p + "mlp.c_fc.weight"].T, True),
                  (b + "ffn_up.bias", w[p + "mlp.c_fc.bias"], False),
                  (b + "ffn_down.weight", w[p + "mlp.c_proj.weight"].T, True),
                  (b + "ffn_down.bias", w[p + "mlp.c_proj.bias"], False)]
        t += [("output_norm.weight", w["ln_f.weight"], False),
              ("output_norm.bias", w["ln_f.bias"], False)]
    else:
        H, Hkv = LLAMA["num_attention_heads"], LLAMA["num_key_value_heads"]
        t.append(("token_embd.weight", w["embed_tokens.weight"], True))
        for i in range(LLAMA["num_hidden_layers"]):
            p, b = f"layers.{i}.", f"blk.{i}."
            t += [(b + "attn_norm.weight", w[p + "input_layernorm.weight"],
                   False),
                  (b + "attn_q.weight",
                   permute_rows(w[p + "self_attn.q_proj.weight"], H), True),
                  (b + "attn_k.weight",
                   permute_rows(w[p + "self_attn.k_proj.weight"], Hkv), True),
                  (b + "attn_v.weight", w[p + "self_attn.v_proj.weight"],
                   True),
                  (b + "attn_output.weight", w[p + "self_attn.o_proj.weight"],
                   True),
                  (b + "ffn_norm.weight",
                   w[p + "post_attention_layernorm.weight"], False),
                  (b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"], True),
                  (b + "ffn_up.weight", w[p + "mlp.up_proj.weight"], True),
                  (b + "ffn_down.weight", w[p + "mlp.down_proj.weight"],
                   True)]
        t += [("output_norm.weight", w["norm.weight"], False),
              ("output.weight", w["lm_head.weight"], True)]
    return t


def write_gguf(kind, w, path, dtype, gguf):
    from gguf import quants
    Q = gguf.GGMLQuantizationType
    qtype = {"f32": Q.F32, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}[dtype]
    ftype = {"f32": 0, "q8_0": 7, "q4_0": 2}[dtype]
    wr = gguf.GGUFWriter(path + ".tmp", kind)
    wr.add_name(f"random {kind} (issue 45 benchmark)")
    wr.add_file_type(ftype)
    if kind == "gpt2":
        c, V = GPT2, GPT2["vocab_size"]
        wr.add_context_length(c["n_positions"])
        wr.add_embedding_length(c["n_embd"])
        wr.add_feed_forward_length(4 * c["n_embd"])
        wr.add_block_count(c["n_layer"])
        wr.add_head_count(c["n_head"])
        wr.add_layer_norm_eps(c["layer_norm_epsilon"])
        import hub_gpt2_reference as G
        toks = [ch for _, ch in G.bytes_to_unicode()]
        toks += [f"<t{i}>" for i in range(len(toks), V - 1)]
        toks.append("<|endoftext|>")
        wr.add_tokenizer_model("gpt2")
        wr.add_tokenizer_pre("default")
        wr.add_token_list(toks)
        wr.add_token_types([1] * (V - 1) + [3])
        wr.add_token_merges(["Ġ t"])
        wr.add_bos_token_id(V - 1)
        wr.add_eos_token_id(V - 1)
    else:
        c, V = LLAMA, LLAMA["vocab_size"]
        dk = c["hidden_size"] // c["num_attention_heads"]
        wr.add_context_length(c["max_position_embeddings"])
        wr.add_embedding_length(c["hidden_size"])
        wr.add_feed_forward_length(c["intermediate_size"])
        wr.add_block_count(c["num_hidden_layers"])
        wr.add_head_count(c["num_attention_heads"])
        wr.add_head_count_kv(c["num_key_value_heads"])
        wr.add_layer_norm_rms_eps(c["rms_norm_eps"])
        wr.add_rope_dimension_count(dk)
        wr.add_rope_freq_base(c["rope_theta"])
        wr.add_vocab_size(V)
        toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        types = [2, 3, 3] + [6] * 256
        toks += [f"<t{i}>" for i in range(len(toks), V)]
        types += [1] * (V - len(types))
        wr.add_tokenizer_model("llama")
        wr.add_token_list(toks)
        wr.add_token_scores([0.0] * V)
        wr.add_token_types(types)
        wr.add_unk_token_id(0)
        wr.add_bos_token_id(1)
        wr.add_eos_token_id(2)
    for name, a, quantisable in gguf_tensors(kind, w):
        a = a.astype("float32")
        if quantisable and dtype != "f32":
            wr.add_tensor(name, quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            wr.add_tensor(name, a)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    os.replace(path + ".tmp", path)


def run_rss(cmd, env=None):
    """(stdout, peak RSS in MB) of cmd; exits on failure.  The peak is GNU
    time's (%M, from the command's own wait4): a child forked from this
    Python process would start its ru_maxrss at this process's size (the
    random models' arrays), so wait4 here would report that instead."""
    p = subprocess.run(["/usr/bin/time", "-f", "TFM_PEAK_RSS_KB %M"] + cmd,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env)
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-3000:]}")
    kb = [ln.split()[1] for ln in err.splitlines()
          if ln.startswith("TFM_PEAK_RSS_KB ")]
    return p.stdout.decode(), int(kb[-1]) / 1024.0


def memory_read_gbs(bench, threads):
    """decode_bench --memread: summing a 1 GiB buffer, best of 5."""
    out, _ = run_rss([bench, "--memread", "--threads", str(threads)])
    return json.loads(out)["memread_gbs"]


def openblas_info(build):
    lib = None
    so = os.path.join(build, "src", "libtransformer.so")
    if not os.path.exists(so):
        so = next((os.path.join(r, f) for r, _, fs in os.walk(build)
                   for f in fs if f.startswith("libtransformer.so")), so)
    try:
        ldd = subprocess.run(["ldd", so], capture_output=True, text=True)
        m = re.search(r"(\S*libopenblas\S*) => (\S+)", ldd.stdout)
        lib = ctypes.CDLL(m.group(2))
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return (f"{lib.openblas_get_corename().decode()} "
                f"({lib.openblas_get_config().decode().strip()})")
    except Exception as e:  # noqa: BLE001  (reported, not fatal)
        return f"unknown ({e})"


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", required=True,
                    help="bench/build_llama_cpp.sh's output directory")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtypes", default="f32,q8_0")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(),
                                                   "llama-compare"))
    ap.add_argument("--gguf-py", default=None)
    ap.add_argument("--json", default=None, help="also write the rows here")
    a = ap.parse_args()
    gpy = a.gguf_py or os.path.join(os.environ.get(
        "LLAMA_CPP", os.path.join(a.llama, "src")), "gguf-py")
    sys.path.insert(0, gpy)
    import numpy as np
    import gguf
    bench = os.path.join(a.build, "bench", "transformer-decode-bench")
    lbench = os.path.join(a.llama, "llama-bench")
    llogits = os.path.join(a.llama, "llama-logits")
    for f in (bench, lbench, llogits):
        if not os.path.exists(f):
            sys.exit(f"missing {f}")
    threads = [int(t) for t in a.threads.split(",")]
    dtypes = a.dtypes.split(",")
    kinds = a.models.split(",")
    os.makedirs(a.work, exist_ok=True)

    # 1. The files (kept in --work between runs: same seed, same bytes).
    files = {}
    for kind in kinds:
        hub = os.path.join(a.work, kind + "-hub")
        need = [d for d in dtypes if not os.path.exists(
            os.path.join(a.work, f"{kind}-{d}.gguf"))]
        if "f32" not in need and not os.path.exists(
                os.path.join(a.work, f"{kind}-f32.gguf")):
            need.append("f32")
        if need or not os.path.exists(os.path.join(hub, "config.json")):
            print(f"writing {kind} ({', '.join(need) or 'hub'}) ...",
                  file=sys.stderr)
            w = make_weights(kind)
            if not os.path.exists(os.path.join(hub, "config.json")):
                write_hub(kind, w, hub)
            for d in need:
                write_gguf(kind, w, os.path.join(a.work, f"{kind}-{d}.gguf"),
                           d, gguf)
            del w
        files[kind] = hub

    # 2. Agreement on the F32 models.
    rng = np.random.default_rng(45)
    agree = {}
    for kind in kinds:
        V = (GPT2 if kind == "gpt2" else LLAMA)["vocab_size"]
        prompt = ",".join(str(int(i)) for i in rng.integers(300, V - 1, 16))
        outs = {}
        for side, cmd in [
                ("ours", [bench, files[kind], "--threads", "2", "--check",
                          prompt, "8"]),
                ("llama", [llogits, os.path.join(a.work, f"{kind}-f32.gguf"),
                           "2", prompt, "8"])]:
            lf = os.path.join(a.work, f"{kind}-{side}.logits")
            out, _ = run_rss(cmd + [lf])
            ids = [int(x) for x in out.split("greedy:")[1].split()]
            outs[side] = (ids, np.fromfile(lf, dtype=np.float32))
        (ia, la), (ib, lb) = outs["ours"], outs["llama"]
        err = float(np.abs(la - lb).max() / np.abs(lb).max())
        agree[kind] = dict(ours=ia, llama=ib, logits_rel_err=err)
        print(f"{kind}: greedy ours {ia}\n{' ' * len(kind)}  llama.cpp "
              f"{ib}\n{' ' * len(kind)}  max |logit diff| / max |logit| = "
              f"{err:.2e}", file=sys.stderr)
        if ia != ib or err > 1e-3:
            sys.exit(f"{kind}: libtransformer and llama.cpp disagree")

    # 3. Timings.
    gbs = {t: memory_read_gbs(bench, t) for t in threads}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()
    rows, build_info = [], ""
    for kind in kinds:
        for d in dtypes:
            gg = os.path.join(a.work, f"{kind}-{d}.gguf")
            for t in threads:
                out, rss_l = run_rss([lbench, "-m", gg, "-p", "512", "-n",
                                      "128", "-t", str(t), "-r",
                                      str(a.reps), "-o", "json"])
                res = json.loads(out)
                pp = next(r for r in res if r["n_prompt"] == 512
                          and r["n_gen"] == 0)
                tg = next(r for r in res if r["n_gen"] == 128
                          and r["n_prompt"] == 0)
                build_info = (f"llama.cpp {pp['build_commit']} build "
                              f"{pp['build_number']}, {pp['backends']}, "
                              f"{pp['cpu_info']}, type_k {pp['type_k']}, "
                              f"flash_attn {pp.get('flash_attn')}")
                # The same GGUF file on both sides: the weights exactly
                # llama.cpp's, kept as stored and mapped (tfm_model_load_v2
                # with dtype auto).
                ours_out, rss_o = run_rss([bench, gg, "--threads", str(t),
                                           "--dtype", "auto", "--reps",
                                           str(a.reps)])
                o = json.loads(ours_out)
                rows.append(dict(model=kind, dtype=d, threads=t,
                                 ours_pp=o["prefill_tps"],
                                 llama_pp=pp["avg_ts"],
                                 ours_tg=o["decode_tps"],
                                 llama_tg=tg["avg_ts"],
                                 ours_bytes=o["param_bytes"],
                                 llama_bytes=pp["model_size"],
                                 ours_rss=rss_o, llama_rss=rss_l))
                r = rows[-1]
                print(f"{kind} {d} t={t}: pp {r['ours_pp']:.1f} vs "
                      f"{r['llama_pp']:.1f}, tg {r['ours_tg']:.2f} vs "
                      f"{r['llama_tg']:.2f}", file=sys.stderr)
    load1 = os.getloadavg()

    # 4. The table.
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    print(f"- CPU: {cpu_model()}, {os.cpu_count()} cores, AVX-512 "
          f"{'yes' if avx512 else 'no'}; {started}; load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"- OpenBLAS (libtransformer): {openblas_info(a.build)}")
    print(f"- {build_info}")
    src = os.path.join(a.llama, "llama.source")
    if os.path.exists(src):
        print(f"- built by bench/build_llama_cpp.sh: "
              f"{open(src).read().strip()}")
    print("- memory read (decode_bench --memread: summing 1 GiB): " +
          ", ".join(f"{g:.1f} GB/s at {t} thread{'s' if t > 1 else ''}"
                    for t, g in gbs.items()))
    for kind, g in agree.items():
        print(f"- agreement ({kind}, F32, 16-token prompt): greedy 8 tokens "
              f"equal; max |logit diff| / max |logit| {g['logits_rel_err']:.1e}")
    print()
    print("| model | weights | thr | prefill 512 t/s ours | llama.cpp | "
          "ratio | decode 128 t/s ours | llama.cpp | ratio | weight GB/s "
          "ours | llama.cpp | weight MB ours | llama.cpp | peak RSS MB "
          "ours | llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['dtype'].upper()} | {r['threads']} | "
              f"{r['ours_pp']:.1f} | {r['llama_pp']:.1f} | "
              f"{r['ours_pp'] / r['llama_pp']:.2f} | {r['ours_tg']:.2f} | "
              f"{r['llama_tg']:.2f} | {r['ours_tg'] / r['llama_tg']:.2f} | "
              f"{r['ours_bytes'] * r['ours_tg'] / 1e9:.1f} | "
              f"{r['llama_bytes'] * r['llama_tg'] / 1e9:.1f} | "
              f"{r['ours_bytes'] / 1e6:.0f} | {r['llama_bytes'] / 1e6:.0f} | "
              f"{r['ours_rss']:.0f} | {r['llama_rss']:.0f} |")
    for kind in kinds:
        for d in dtypes:
            by = {r["threads"]: r for r in rows
                  if r["model"] == kind and r["dtype"] == d}
            if 1 in by and 2 in by:
                print(f"- {kind} {d.upper()} 2-thread scaling: prefill ours "
                      f"{by[2]['ours_pp'] / by[1]['ours_pp']:.2f}x, llama.cpp "
                      f"{by[2]['llama_pp'] / by[1]['llama_pp']:.2f}x; decode "
                      f"ours {by[2]['ours_tg'] / by[1]['ours_tg']:.2f}x, "
                      f"llama.cpp {by[2]['llama_tg'] / by[1]['llama_tg']:.2f}x")
    for r in rows:
        if r["threads"] in gbs:
            g = gbs[r["threads"]] * 1e9
            print(f"- {r['model']} {r['dtype'].upper()} t={r['threads']}: a "
                  f"decode step takes {1e3 / r['ours_tg']:.1f} ms ours, "
                  f"{1e3 / r['llama_tg']:.1f} ms llama.cpp; reading the "
                  f"weights once at the memory-read rate takes "
                  f"{1e3 * r['ours_bytes'] / g:.1f} ms ours, "
                  f"{1e3 * r['llama_bytes'] / g:.1f} ms llama.cpp")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(rows=rows, agree=agree, mem_gbs=gbs), f, indent=1)


if __name__ == "__main__":
    main()
