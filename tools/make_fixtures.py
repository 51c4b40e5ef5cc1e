#!/usr/bin/python3
"""Generate PyTorch reference cases for tests/test_fixtures.c.

Each case is one safetensors file (float32 tensors, written with numpy
only) holding a module's parameters under their PyTorch state_dict names,
its inputs and masks, and the output PyTorch computes for them:

    param.<state_dict name>   every parameter of the module
    input.<name>              query/key/value (mha), src (encoder layer and
                              stack), tgt/memory (decoder layer and stack),
                              x/memory (cross_attention), src/tgt
                              (transformer), x (layer_norm, feed_forward)
    input.<mask name>         masks, float32 (see below)
    output.out                the reference output
    output.weights            attention weights (mha, when weights != none)

"__metadata__" (all values strings) says how to build and call the module:
module, d_model, n_heads, kdim, vdim, bias, d_ff, activation, norm_first,
layer_norm_eps, n_layers, final_norm, n_encoder_layers, n_decoder_layers,
weights (none | per_head | average), and for each mask group its causal
mode (none | top_left | bottom_right) and for each mask tensor its kind
(block | allow | additive):

    mha:              causal, key_padding_mask, attn_mask
    encoder(_layer):  src_causal, src_key_padding_mask, src_mask
    decoder(_layer):  tgt_causal, tgt_key_padding_mask, tgt_mask,
                      memory_causal, memory_key_padding_mask, memory_mask
    cross_attention:  memory_causal, memory_key_padding_mask, memory_mask
    transformer:      all three groups src_*, tgt_*, memory_*

Kinds: block = boolean, 1.0 masked out (PyTorch's nn.MultiheadAttention
convention); allow = boolean, 1.0 may attend; additive = float added to the
logits (-inf masks out).  A causal mode in the metadata has no tensor: the
C library computes it from indices, while PyTorch (1.13 has no
bottom-right option) is given the equivalent explicit mask.

The reference runs in float64 (module.double() on the float32 parameters
and inputs) and is stored rounded to float32.  Modules are put in training
mode with dropout 0 so that PyTorch 1.13's "fast path" (which, among other
things, zeroes padded positions of TransformerEncoder's output) is never
taken.  No case masks every key of a query row (PyTorch gives NaN there).

Usage: /usr/bin/python3 tools/make_fixtures.py [--out DIR] [--list]
(DIR defaults to tests/fixtures next to this script's tools/ folder).
"""

import argparse
import os
import sys
import zlib

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the interpreter
    sys.stderr.write("make_fixtures.py needs PyTorch (use /usr/bin/python3)\n")
    sys.exit(2)


# The writer shared with the other tools (numpy only).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_safetensors import save_safetensors  # noqa: E402


# ---- helpers ----------------------------------------------------------------

def f32(t):
    """torch tensor -> float32 numpy array."""
    return t.detach().to(torch.float32).cpu().numpy()


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def randomize(module):
    """Random float32 parameters, nothing trivially zero or one."""
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-0.3, 0.3)
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)


def params_of(module):
    return {"param." + name: f32(p) for name, p in module.state_dict().items()}


def causal_blocked(L, S, mode):
    """bool [L, S]: True where query i may NOT see key j."""
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    offset = {"top_left": 0, "bottom_right": S - L}[mode]
    return j > i + offset


def causal_additive(L, S, mode="top_left"):
    """float32 [L, S]: 0 where allowed, -inf where causally masked."""
    m = np.zeros((L, S), dtype=np.float32)
    m[causal_blocked(L, S, mode)] = -np.inf
    return m


def random_bool(shape, p=0.3, keep_diagonal=True):
    """Random boolean 'blocked' mask (True = masked), never a full row."""
    m = (torch.rand(*shape) < p).numpy()
    if keep_diagonal:
        L, S = shape[-2], shape[-1]
        for i in range(L):
            m[..., i, min(i, S - 1)] = False
    return m


def random_additive(shape, p_inf=0.2):
    """Random finite biases with some -inf entries, never a full row."""
    a = (torch.rand(*shape) * 2.0 - 1.0).numpy().astype(np.float32)
    blocked = random_bool(shape, p_inf)
    a[blocked] = -np.inf
    return a


class MaskGroup:
    """The masks of one attention call, as stored and as given to torch.

    causal: none | top_left | bottom_right (metadata only, no tensor).
    kpm / attn: (numpy array, kind) or None.  Arrays hold the stored
    float32 values: for block/allow kinds 0.0/1.0 as bool -> float.
    """

    def __init__(self, causal="none", kpm=None, attn=None):
        self.causal = causal
        self.kpm = kpm
        self.attn = attn

    def store(self, tensors, metadata, causal_key, kpm_name, attn_name):
        metadata[causal_key] = self.causal
        for name, entry in ((kpm_name, self.kpm), (attn_name, self.attn)):
            if entry is None:
                continue
            arr, kind = entry
            tensors["input." + name] = np.asarray(arr, dtype=np.float32)
            metadata[name + "_kind"] = kind

    def visible(self, B, H, L, S):
        """bool [B, H, L, S]: which keys each query sees (numpy)."""
        vis = np.ones((B, H, L, S), dtype=bool)
        if self.causal != "none":
            vis &= ~causal_blocked(L, S, self.causal)
        for entry, is_kpm in ((self.kpm, True), (self.attn, False)):
            if entry is None:
                continue
            arr, kind = entry
            arr = np.asarray(arr, dtype=np.float32)
            if kind == "block":
                ok = arr == 0
            elif kind == "allow":
                ok = arr != 0
            else:
                ok = np.isfinite(arr)
            if is_kpm:
                ok = ok[:, None, None, :]
            elif ok.ndim == 3:
                ok = ok[:, None, :, :]
            vis &= ok
        return vis

    def check(self, B, H, L, S, what):
        vis = self.visible(B, H, L, S)
        if not vis.any(axis=-1).all():
            raise AssertionError("%s: a query row has every key masked" % what)

    def torch_args(self, B, H, L, S):
        """(attn_mask, key_padding_mask) for nn.MultiheadAttention."""
        attn = None
        if self.attn is not None:
            arr, kind = self.attn
            arr = np.asarray(arr, dtype=np.float32)
            if kind == "block":
                attn = torch.from_numpy(arr != 0)
            elif kind == "allow":
                attn = torch.from_numpy(arr == 0)
            else:
                attn = torch.from_numpy(arr).double()
            if attn.dim() == 3:      # [B, L, S] -> [B*H, L, S]
                attn = attn.repeat_interleave(H, dim=0)
            elif attn.dim() == 4:    # [B, H, L, S] -> [B*H, L, S]
                attn = attn.reshape(B * H, L, S)
        if self.causal != "none":
            c = torch.from_numpy(causal_blocked(L, S, self.causal))
            if attn is None:
                # PyTorch's usual causal mask: [L, L] float, -inf above.
                attn = torch.zeros(L, S, dtype=torch.float64)
                attn = attn.masked_fill(c, float("-inf"))
            elif attn.dtype == torch.bool:
                attn = attn | c
            else:
                attn = attn.masked_fill(c, float("-inf"))
        kpm = None
        if self.kpm is not None:
            arr, kind = self.kpm
            arr = np.asarray(arr, dtype=np.float32)
            if kind == "block":
                kpm = torch.from_numpy(arr != 0)
            elif kind == "allow":
                kpm = torch.from_numpy(arr == 0)
            else:
                # torch 1.13 cannot mix a float key_padding_mask with a
                # float attn_mask: fold it into a [B*H, L, S] attn_mask.
                add = torch.from_numpy(arr).double()[:, None, None, :]
                add = add.expand(B, H, L, S)
                if attn is None:
                    base = torch.zeros(B, H, L, S, dtype=torch.float64)
                else:
                    if attn.dtype == torch.bool:
                        attn = torch.zeros(attn.shape, dtype=torch.float64
                                           ).masked_fill(attn, float("-inf"))
                    base = attn.expand(B * H, L, S).reshape(B, H, L, S)
                attn = (base + add).reshape(B * H, L, S)
        return attn, kpm


def padding(B, S, pad_counts, kind="block"):
    """[B, S] key padding mask with the last pad_counts[b] keys padded."""
    blocked = np.zeros((B, S), dtype=bool)
    for b, n in enumerate(pad_counts):
        if n:
            blocked[b, S - n:] = True
    if kind == "block":
        return blocked.astype(np.float32), kind
    if kind == "allow":
        return (~blocked).astype(np.float32), kind
    add = (torch.rand(B, S) * 2.0 - 1.0).numpy().astype(np.float32)
    add[blocked] = -np.inf
    return add, "additive"


def as_kind(blocked, kind):
    """bool 'blocked' array -> (stored float32 array, kind)."""
    if kind == "block":
        return blocked.astype(np.float32), kind
    if kind == "allow":
        return (~blocked).astype(np.float32), kind
    raise ValueError(kind)


# ---- reference modules not in torch.nn ------------------------------------

class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, activation):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = activation

    def forward(self, x):
        h = self.linear1(x)
        if self.activation == "relu":
            h = F.relu(h)
        elif self.activation == "gelu":
            h = F.gelu(h)
        else:
            h = F.gelu(h, approximate="tanh")
        return self.linear2(h)


class CrossAttention(nn.Module):
    """The decoder's cross-attention sub-layer with residual and norm."""

    def __init__(self, d_model, n_heads, eps, norm_first):
        super().__init__()
        self.multihead_attn = nn.MultiheadAttention(
            d_model, n_heads, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.norm_first = norm_first

    def forward(self, x, memory, attn_mask=None, key_padding_mask=None):
        def ca(y):
            return self.multihead_attn(
                y, memory, memory, attn_mask=attn_mask,
                key_padding_mask=key_padding_mask, need_weights=False)[0]
        if self.norm_first:
            return x + ca(self.norm(x))
        return self.norm(x + ca(x))


# ---- cases --------------------------------------------------------------------

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def layer_meta(d_model, n_heads, d_ff, activation, norm_first, eps):
    return {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff,
            "activation": activation, "norm_first": int(norm_first),
            "layer_norm_eps": repr(float(eps))}


def mha_case(name, description, B=2, L=5, S=None, d=8, H=2, kdim=None,
             vdim=None, bias=True, masks=None, weights="none", self_attn=None,
             add_bias_kv=False, add_zero_attn=False, static_k=None,
             static_v=None):
    """Build one nn.MultiheadAttention case.

    add_bias_kv / add_zero_attn: the module's options (metadata keys of
    the same names).  static_k / static_v: None, or the number of rows S_s
    of random F.multi_head_attention_forward static keys / values
    (input.static_k / input.static_v, [B, H, S_s, d/H], PyTorch's
    [B*H, S_s, d/H]); masks are then over S_s keys and the reference is
    F.multi_head_attention_forward on the module's parameters."""
    S = L if S is None else S
    if static_k is not None or static_v is not None:
        return mha_static_case(name, description, B, L, S, d, H, bias, masks,
                               weights, add_zero_attn, static_k, static_v)
    kdim = d if kdim is None else kdim
    vdim = d if vdim is None else vdim
    masks = masks or (lambda: MaskGroup())
    if self_attn is None:
        self_attn = (S == L and kdim == d and vdim == d)
    mha = nn.MultiheadAttention(d, H, dropout=0.0, bias=bias, kdim=kdim,
                                vdim=vdim, batch_first=True,
                                add_bias_kv=add_bias_kv,
                                add_zero_attn=add_zero_attn)
    randomize(mha)
    query = randn(B, L, d)
    if self_attn:
        key = value = query
    else:
        key = randn(B, S, kdim)
        value = randn(B, S, vdim)
    group = masks()
    group.check(B, H, L, S, name)
    tensors = params_of(mha)
    tensors["input.query"] = f32(query)
    tensors["input.key"] = f32(key)
    tensors["input.value"] = f32(value)
    meta = {"module": "mha", "description": description, "d_model": d,
            "n_heads": H, "kdim": kdim, "vdim": vdim, "bias": int(bias),
            "weights": weights}
    if add_bias_kv or add_zero_attn:
        meta["add_bias_kv"] = int(add_bias_kv)
        meta["add_zero_attn"] = int(add_zero_attn)
    group.store(tensors, meta, "causal", "key_padding_mask", "attn_mask")
    attn_mask, kpm = group.torch_args(B, H, L, S)
    mha.double().train()
    out, w = mha(query.double(), key.double(), value.double(),
                 key_padding_mask=kpm, attn_mask=attn_mask,
                 need_weights=(weights != "none"),
                 average_attn_weights=(weights == "average"))
    tensors["output.out"] = f32(out)
    if weights != "none":
        tensors["output.weights"] = f32(w)
    return name, tensors, meta


def mha_static_case(name, description, B, L, S, d, H, bias, masks, weights,
                    add_zero_attn, static_k, static_v):
    """A case of F.multi_head_attention_forward with static_k / static_v
    (rows static_k / static_v, or None) on an nn.MultiheadAttention's
    parameters; key and value have S rows, the masks are over the S_s
    keys attended."""
    dk = d // H
    mha = nn.MultiheadAttention(d, H, dropout=0.0, bias=bias,
                                batch_first=True,
                                add_zero_attn=add_zero_attn)
    randomize(mha)
    S_s = static_k if static_k is not None else static_v
    if static_k is not None and static_v is not None:
        assert static_k == static_v
    if static_k is None or static_v is None:
        assert S == S_s, "a projected key or value has the static rows"
    query = randn(B, L, d)
    key = randn(B, S, d)
    value = randn(B, S, d)
    sk = randn(B, H, S_s, dk) if static_k is not None else None
    sv = randn(B, H, S_s, dk) if static_v is not None else None
    masks = masks or (lambda: MaskGroup())
    group = masks()
    group.check(B, H, L, S_s, name)
    tensors = params_of(mha)
    tensors["input.query"] = f32(query)
    tensors["input.key"] = f32(key)
    tensors["input.value"] = f32(value)
    if sk is not None:
        tensors["input.static_k"] = f32(sk)
    if sv is not None:
        tensors["input.static_v"] = f32(sv)
    meta = {"module": "mha", "description": description, "d_model": d,
            "n_heads": H, "kdim": d, "vdim": d, "bias": int(bias),
            "weights": weights}
    if add_zero_attn:
        meta["add_bias_kv"] = 0
        meta["add_zero_attn"] = 1
    group.store(tensors, meta, "causal", "key_padding_mask", "attn_mask")
    attn_mask, kpm = group.torch_args(B, H, L, S_s)
    mha.double()
    out, w = F.multi_head_attention_forward(
        query.double().transpose(0, 1), key.double().transpose(0, 1),
        value.double().transpose(0, 1), d, H, mha.in_proj_weight,
        mha.in_proj_bias, None, None, add_zero_attn, 0.0,
        mha.out_proj.weight, mha.out_proj.bias, training=True,
        key_padding_mask=kpm, need_weights=(weights != "none"),
        attn_mask=attn_mask,
        static_k=None if sk is None else sk.double().reshape(B * H, S_s, dk),
        static_v=None if sv is None else sv.double().reshape(B * H, S_s, dk),
        average_attn_weights=(weights == "average"))
    tensors["output.out"] = f32(out.transpose(0, 1))
    if weights != "none":
        tensors["output.weights"] = f32(w)
    return name, tensors, meta


@case
def mha_bias_kv():
    return mha_case(
        "mha_bias_kv", "add_bias_kv, self-attention, padding and bool mask",
        add_bias_kv=True, weights="per_head",
        masks=lambda: MaskGroup(
            kpm=padding(2, 5, [0, 2]),
            attn=as_kind(random_bool((5, 5)), "block")))


@case
def mha_zero_attn():
    return mha_case(
        "mha_zero_attn", "add_zero_attn, cross-attention, additive mask",
        L=4, S=7, add_zero_attn=True, weights="average",
        masks=lambda: MaskGroup(attn=(random_additive((4, 7)), "additive")))


@case
def mha_bias_kv_zero_attn_causal():
    return mha_case(
        "mha_bias_kv_zero_attn_causal",
        "add_bias_kv and add_zero_attn, causal (top left) and padding",
        B=3, L=6, d=12, H=3, add_bias_kv=True, add_zero_attn=True,
        weights="per_head",
        masks=lambda: MaskGroup(causal="top_left",
                                kpm=padding(3, 6, [1, 0, 2], "additive")))


@case
def mha_bias_kv_bottom_right():
    return mha_case(
        "mha_bias_kv_bottom_right",
        "add_bias_kv, cross-attention, bottom-right causal, allow padding",
        L=3, S=6, add_bias_kv=True, weights="average",
        masks=lambda: MaskGroup(causal="bottom_right",
                                kpm=padding(2, 6, [0, 1], "allow")))


@case
def mha_bias_kv_kdim_4d():
    return mha_case(
        "mha_bias_kv_kdim_4d",
        "add_bias_kv and add_zero_attn, kdim/vdim, [B,H,L,S] allow mask",
        L=4, S=5, kdim=6, vdim=3, add_bias_kv=True, add_zero_attn=True,
        weights="per_head",
        masks=lambda: MaskGroup(
            attn=as_kind(random_bool((2, 2, 4, 5)), "allow")))


@case
def mha_bias_kv_no_bias():
    return mha_case("mha_bias_kv_no_bias",
                    "add_bias_kv without projection biases",
                    bias=False, add_bias_kv=True)


@case
def mha_static_kv():
    return mha_case(
        "mha_static_kv", "static_k and static_v (6 rows), padding",
        L=4, S=5, static_k=6, static_v=6, weights="per_head",
        masks=lambda: MaskGroup(kpm=padding(2, 6, [2, 0])))


@case
def mha_static_k_zero_attn():
    return mha_case(
        "mha_static_k_zero_attn",
        "static_k, projected value, add_zero_attn, additive mask, padding",
        L=3, S=5, static_k=5, add_zero_attn=True, weights="average",
        masks=lambda: MaskGroup(attn=(random_additive((3, 5)), "additive"),
                                kpm=padding(2, 5, [1, 0])))


@case
def mha_static_v_causal():
    return mha_case(
        "mha_static_v_causal", "static_v, no biases, causal",
        B=1, L=5, d=12, H=4, bias=False, static_v=5, weights="per_head",
        masks=lambda: MaskGroup(causal="top_left"))


@case
def mha_self_nomask():
    return mha_case("mha_self_nomask", "self-attention, no mask")


@case
def mha_causal_meta():
    return mha_case(
        "mha_causal_meta",
        "self-attention, causal top_left from metadata (torch: [L,L] -inf mask)",
        masks=lambda: MaskGroup(causal="top_left"))


@case
def mha_causal_tensor():
    return mha_case(
        "mha_causal_tensor",
        "self-attention, causal mask as an explicit additive [L,L] tensor",
        masks=lambda: MaskGroup(attn=(causal_additive(5, 5), "additive")))


@case
def mha_key_padding():
    return mha_case(
        "mha_key_padding", "self-attention, boolean key_padding_mask (block)",
        masks=lambda: MaskGroup(kpm=padding(2, 5, [0, 2])))


@case
def mha_key_padding_allow():
    return mha_case(
        "mha_key_padding_allow",
        "self-attention, key_padding_mask of kind allow (1 = may attend)",
        masks=lambda: MaskGroup(kpm=padding(2, 5, [1, 3], "allow")))


@case
def mha_key_padding_additive():
    return mha_case(
        "mha_key_padding_additive",
        "self-attention, additive key_padding_mask (finite values and -inf)",
        masks=lambda: MaskGroup(kpm=padding(2, 5, [2, 0], "additive")))


@case
def mha_attn_mask_bool():
    return mha_case(
        "mha_attn_mask_bool", "self-attention, boolean attn_mask [L,S] (block)",
        masks=lambda: MaskGroup(attn=as_kind(random_bool((5, 5), 0.4),
                                             "block")))


@case
def mha_attn_mask_allow():
    return mha_case(
        "mha_attn_mask_allow",
        "cross-attention L=4 S=6, attn_mask [L,S] of kind allow",
        L=4, S=6,
        masks=lambda: MaskGroup(attn=as_kind(random_bool((4, 6), 0.4),
                                             "allow")))


@case
def mha_attn_mask_additive():
    return mha_case(
        "mha_attn_mask_additive",
        "self-attention, additive attn_mask [L,S] (finite values and -inf)",
        masks=lambda: MaskGroup(attn=(random_additive((5, 5)), "additive")))


@case
def mha_attn_mask_3d():
    return mha_case(
        "mha_attn_mask_3d",
        "self-attention, additive attn_mask [B,L,S] broadcast over heads",
        masks=lambda: MaskGroup(attn=(random_additive((2, 5, 5)),
                                      "additive")))


@case
def mha_attn_mask_4d():
    return mha_case(
        "mha_attn_mask_4d",
        "self-attention, additive attn_mask [B,H,L,S] (torch: [B*H,L,S])",
        masks=lambda: MaskGroup(attn=(random_additive((2, 2, 5, 5)),
                                      "additive")))


@case
def mha_combined():
    return mha_case(
        "mha_combined",
        "causal (metadata) + boolean key padding + additive attn_mask [L,S],"
        " per-head weights",
        L=6, weights="per_head",
        masks=lambda: MaskGroup(causal="top_left",
                                kpm=padding(2, 6, [2, 1]),
                                attn=(random_additive((6, 6)), "additive")))


@case
def mha_combined_bool():
    return mha_case(
        "mha_combined_bool",
        "causal (metadata) + boolean key padding + boolean attn_mask [B,H,L,S]",
        L=6,
        masks=lambda: MaskGroup(causal="top_left",
                                kpm=padding(2, 6, [1, 2]),
                                attn=as_kind(random_bool((2, 2, 6, 6), 0.3),
                                             "block")))


@case
def mha_cross():
    return mha_case("mha_cross",
                    "cross-attention L=4 != S=7, separate key and value",
                    L=4, S=7)


@case
def mha_cross_padding():
    return mha_case("mha_cross_padding",
                    "cross-attention L=3 S=6 with boolean key padding",
                    L=3, S=6, masks=lambda: MaskGroup(kpm=padding(2, 6, [3, 0])))


@case
def mha_causal_top_left_rect():
    return mha_case(
        "mha_causal_top_left_rect",
        "causal top_left with L=4 < S=6 (metadata; torch: explicit mask)",
        L=4, S=6, masks=lambda: MaskGroup(causal="top_left"))


@case
def mha_causal_top_left_tall():
    return mha_case(
        "mha_causal_top_left_tall",
        "causal top_left with L=6 > S=4 (last rows see every key)",
        L=6, S=4, masks=lambda: MaskGroup(causal="top_left"))


@case
def mha_causal_bottom_right():
    return mha_case(
        "mha_causal_bottom_right",
        "causal bottom_right with L=3 < S=6, metadata only (torch: explicit"
        " mask j <= i + S - L), per-head weights",
        L=3, S=6, weights="per_head",
        masks=lambda: MaskGroup(causal="bottom_right"))


@case
def mha_causal_bottom_right_padding():
    return mha_case(
        "mha_causal_bottom_right_padding",
        "causal bottom_right L=2 S=5 with key padding of the first key",
        L=2, S=5,
        masks=lambda: MaskGroup(
            causal="bottom_right",
            kpm=(np.array([[1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], np.float32),
                 "block")))


@case
def mha_kdim_vdim():
    return mha_case(
        "mha_kdim_vdim",
        "kdim=6 != vdim=10 != d_model=8 (q/k/v_proj_weight), L=4 S=5",
        L=4, S=5, kdim=6, vdim=10,
        masks=lambda: MaskGroup(kpm=padding(2, 5, [0, 1])))


@case
def mha_kdim_only():
    return mha_case("mha_kdim_only",
                    "kdim=12, vdim=d_model=8 (separate projections), L=3 S=4",
                    L=3, S=4, kdim=12, vdim=8)


@case
def mha_no_bias():
    return mha_case("mha_no_bias", "bias=False, causal (metadata)", bias=False,
                    masks=lambda: MaskGroup(causal="top_left"))


@case
def mha_no_bias_kdim():
    return mha_case("mha_no_bias_kdim", "bias=False with kdim=4 vdim=6",
                    L=3, S=5, kdim=4, vdim=6, bias=False)


@case
def mha_weights_per_head():
    return mha_case("mha_weights_per_head",
                    "per-head weights [B,H,L,S], key padding, 4 heads d=16",
                    d=16, H=4, L=4, S=6, weights="per_head",
                    masks=lambda: MaskGroup(kpm=padding(2, 6, [2, 0])))


@case
def mha_weights_average():
    return mha_case("mha_weights_average",
                    "head-averaged weights [B,L,S], additive attn_mask",
                    weights="average",
                    masks=lambda: MaskGroup(attn=(random_additive((5, 5)),
                                                  "additive")))


@case
def mha_single_head():
    return mha_case("mha_single_head", "one head, d=8, B=1, L=7",
                    B=1, L=7, H=1)


def encoder_layer_case(name, description, norm_first, activation, masks=None,
                       eps=1e-5, B=2, L=5, d=8, H=2, d_ff=16):
    masks = masks or (lambda: MaskGroup())
    layer = nn.TransformerEncoderLayer(
        d, H, dim_feedforward=d_ff, dropout=0.0, activation=activation,
        layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
    randomize(layer)
    src = randn(B, L, d)
    group = masks()
    group.check(B, H, L, L, name)
    tensors = params_of(layer)
    tensors["input.src"] = f32(src)
    meta = {"module": "encoder_layer", "description": description}
    meta.update(layer_meta(d, H, d_ff, activation, norm_first, eps))
    group.store(tensors, meta, "src_causal", "src_key_padding_mask", "src_mask")
    attn_mask, kpm = group.torch_args(B, H, L, L)
    layer.double().train()
    out = layer(src.double(), src_mask=attn_mask, src_key_padding_mask=kpm)
    tensors["output.out"] = f32(out)
    return name, tensors, meta


@case
def encoder_layer_post_relu():
    return encoder_layer_case("encoder_layer_post_relu",
                              "post-norm, ReLU, no masks", False, "relu")


@case
def encoder_layer_pre_gelu():
    return encoder_layer_case("encoder_layer_pre_gelu",
                              "pre-norm, exact GELU, layer_norm_eps=1e-3",
                              True, "gelu", eps=1e-3)


@case
def encoder_layer_pad_causal():
    return encoder_layer_case(
        "encoder_layer_pad_causal",
        "post-norm ReLU, key padding + causal (metadata)", False, "relu",
        masks=lambda: MaskGroup(causal="top_left", kpm=padding(2, 5, [2, 0])))


@case
def encoder_layer_pre_pad_mask():
    return encoder_layer_case(
        "encoder_layer_pre_pad_mask",
        "pre-norm GELU, key padding + causal as an additive src_mask tensor",
        True, "gelu", L=6,
        masks=lambda: MaskGroup(kpm=padding(2, 6, [0, 3]),
                                attn=(causal_additive(6, 6), "additive")))


@case
def encoder_layer_bool_mask():
    return encoder_layer_case(
        "encoder_layer_bool_mask",
        "post-norm GELU, boolean src_mask [L,L], d=16 H=4",
        False, "gelu", d=16, H=4, d_ff=24,
        masks=lambda: MaskGroup(attn=as_kind(random_bool((5, 5), 0.4),
                                             "block")))


def decoder_layer_case(name, description, norm_first, activation, tgt_masks,
                       mem_masks, eps=1e-5, B=2, L=4, S=6, d=8, H=2, d_ff=16):
    layer = nn.TransformerDecoderLayer(
        d, H, dim_feedforward=d_ff, dropout=0.0, activation=activation,
        layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
    randomize(layer)
    tgt = randn(B, L, d)
    memory = randn(B, S, d)
    tg = tgt_masks()
    mg = mem_masks()
    tg.check(B, H, L, L, name + " tgt")
    mg.check(B, H, L, S, name + " memory")
    tensors = params_of(layer)
    tensors["input.tgt"] = f32(tgt)
    tensors["input.memory"] = f32(memory)
    meta = {"module": "decoder_layer", "description": description}
    meta.update(layer_meta(d, H, d_ff, activation, norm_first, eps))
    tg.store(tensors, meta, "tgt_causal", "tgt_key_padding_mask", "tgt_mask")
    mg.store(tensors, meta, "memory_causal", "memory_key_padding_mask",
             "memory_mask")
    tm, tk = tg.torch_args(B, H, L, L)
    mm, mk = mg.torch_args(B, H, L, S)
    layer.double().train()
    out = layer(tgt.double(), memory.double(), tgt_mask=tm, memory_mask=mm,
                tgt_key_padding_mask=tk, memory_key_padding_mask=mk)
    tensors["output.out"] = f32(out)
    return name, tensors, meta


@case
def decoder_layer_post():
    return decoder_layer_case(
        "decoder_layer_post",
        "post-norm ReLU, L=4 S=6: tgt causal (metadata), memory key padding"
        " + additive memory_mask [L,S]",
        False, "relu",
        lambda: MaskGroup(causal="top_left"),
        lambda: MaskGroup(kpm=padding(2, 6, [2, 0]),
                          attn=(random_additive((4, 6)), "additive")))


@case
def decoder_layer_pre():
    return decoder_layer_case(
        "decoder_layer_pre",
        "pre-norm GELU, L=5 S=3: tgt causal as tensor + tgt key padding,"
        " memory key padding + boolean memory_mask",
        True, "gelu",
        lambda: MaskGroup(kpm=padding(2, 5, [0, 2]),
                          attn=(causal_additive(5, 5), "additive")),
        lambda: MaskGroup(kpm=padding(2, 3, [1, 0]),
                          attn=as_kind(random_bool((5, 3), 0.3), "block")),
        L=5, S=3)


@case
def decoder_layer_pre_nomask():
    return decoder_layer_case(
        "decoder_layer_pre_nomask", "pre-norm ReLU, no masks, L=3 S=7",
        True, "relu", lambda: MaskGroup(), lambda: MaskGroup(), L=3, S=7)


def stack_case(name, description, kind, norm_first, activation, n_layers,
               final_norm, masks, mem_masks=None, eps=1e-5, B=2, L=5, S=6,
               d=8, H=2, d_ff=16):
    if kind == "encoder":
        layer = nn.TransformerEncoderLayer(
            d, H, dim_feedforward=d_ff, dropout=0.0, activation=activation,
            layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
        norm = nn.LayerNorm(d, eps=eps) if final_norm else None
        stack = nn.TransformerEncoder(layer, n_layers, norm=norm,
                                      enable_nested_tensor=False)
    else:
        layer = nn.TransformerDecoderLayer(
            d, H, dim_feedforward=d_ff, dropout=0.0, activation=activation,
            layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
        norm = nn.LayerNorm(d, eps=eps) if final_norm else None
        stack = nn.TransformerDecoder(layer, n_layers, norm=norm)
    randomize(stack)   # after the deep copies: every layer differs
    meta = {"module": kind, "description": description,
            "n_layers": n_layers, "final_norm": int(final_norm)}
    meta.update(layer_meta(d, H, d_ff, activation, norm_first, eps))
    tensors = params_of(stack)
    group = masks()
    if kind == "encoder":
        src = randn(B, L, d)
        group.check(B, H, L, L, name)
        tensors["input.src"] = f32(src)
        group.store(tensors, meta, "src_causal", "src_key_padding_mask",
                    "src_mask")
        am, kpm = group.torch_args(B, H, L, L)
        stack.double().train()
        out = stack(src.double(), mask=am, src_key_padding_mask=kpm)
    else:
        tgt = randn(B, L, d)
        memory = randn(B, S, d)
        mg = mem_masks()
        group.check(B, H, L, L, name + " tgt")
        mg.check(B, H, L, S, name + " memory")
        tensors["input.tgt"] = f32(tgt)
        tensors["input.memory"] = f32(memory)
        group.store(tensors, meta, "tgt_causal", "tgt_key_padding_mask",
                    "tgt_mask")
        mg.store(tensors, meta, "memory_causal", "memory_key_padding_mask",
                 "memory_mask")
        tm, tk = group.torch_args(B, H, L, L)
        mm, mk = mg.torch_args(B, H, L, S)
        stack.double().train()
        out = stack(tgt.double(), memory.double(), tgt_mask=tm,
                    memory_mask=mm, tgt_key_padding_mask=tk,
                    memory_key_padding_mask=mk)
    tensors["output.out"] = f32(out)
    return name, tensors, meta


@case
def encoder_stack():
    return stack_case(
        "encoder_stack", "2 post-norm ReLU layers + final norm, key padding",
        "encoder", False, "relu", 2, True,
        lambda: MaskGroup(kpm=padding(2, 5, [0, 2])))


@case
def encoder_stack_pre_nonorm():
    return stack_case(
        "encoder_stack_pre_nonorm",
        "2 pre-norm GELU layers, no final norm, causal (metadata)",
        "encoder", True, "gelu", 2, False,
        lambda: MaskGroup(causal="top_left"))


@case
def decoder_stack():
    return stack_case(
        "decoder_stack",
        "2 post-norm ReLU layers + final norm, L=5 S=6: tgt causal (metadata)"
        " + memory key padding",
        "decoder", False, "relu", 2, True,
        lambda: MaskGroup(causal="top_left"),
        lambda: MaskGroup(kpm=padding(2, 6, [0, 3])))


@case
def decoder_stack_pre():
    return stack_case(
        "decoder_stack_pre",
        "2 pre-norm GELU layers + final norm, L=4 S=5: tgt causal + padding,"
        " memory_mask boolean",
        "decoder", True, "gelu", 2, True,
        lambda: MaskGroup(causal="top_left", kpm=padding(2, 4, [1, 0])),
        lambda: MaskGroup(attn=as_kind(random_bool((4, 5), 0.3), "block")),
        L=4, S=5)


def transformer_case(name, description, norm_first, activation, src_masks,
                     tgt_masks, mem_masks, n_enc=2, n_dec=2, eps=1e-5, B=2,
                     S=6, L=5, d=8, H=2, d_ff=16):
    model = nn.Transformer(
        d_model=d, nhead=H, num_encoder_layers=n_enc, num_decoder_layers=n_dec,
        dim_feedforward=d_ff, dropout=0.0, activation=activation,
        layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
    randomize(model)
    src = randn(B, S, d)
    tgt = randn(B, L, d)
    sg, tg, mg = src_masks(), tgt_masks(), mem_masks()
    sg.check(B, H, S, S, name + " src")
    tg.check(B, H, L, L, name + " tgt")
    mg.check(B, H, L, S, name + " memory")
    tensors = params_of(model)
    tensors["input.src"] = f32(src)
    tensors["input.tgt"] = f32(tgt)
    meta = {"module": "transformer", "description": description,
            "n_encoder_layers": n_enc, "n_decoder_layers": n_dec}
    meta.update(layer_meta(d, H, d_ff, activation, norm_first, eps))
    sg.store(tensors, meta, "src_causal", "src_key_padding_mask", "src_mask")
    tg.store(tensors, meta, "tgt_causal", "tgt_key_padding_mask", "tgt_mask")
    mg.store(tensors, meta, "memory_causal", "memory_key_padding_mask",
             "memory_mask")
    sm, sk = sg.torch_args(B, H, S, S)
    tm, tk = tg.torch_args(B, H, L, L)
    mm, mk = mg.torch_args(B, H, L, S)
    model.double().train()
    out = model(src.double(), tgt.double(), src_mask=sm, tgt_mask=tm,
                memory_mask=mm, src_key_padding_mask=sk,
                tgt_key_padding_mask=tk, memory_key_padding_mask=mk)
    tensors["output.out"] = f32(out)
    return name, tensors, meta


@case
def transformer_post():
    src_pad = padding(2, 6, [0, 2])
    return transformer_case(
        "transformer_post",
        "nn.Transformer 2+2 post-norm ReLU, S=6 L=5: src key padding, tgt"
        " causal (metadata), memory key padding (= src padding)",
        False, "relu",
        lambda: MaskGroup(kpm=src_pad),
        lambda: MaskGroup(causal="top_left"),
        lambda: MaskGroup(kpm=src_pad))


@case
def transformer_pre_gelu():
    src_pad = padding(2, 5, [1, 0])
    return transformer_case(
        "transformer_pre_gelu",
        "nn.Transformer 1+2 pre-norm GELU, S=5 L=4: src padding, tgt causal"
        " as tensor + tgt padding, memory padding",
        True, "gelu",
        lambda: MaskGroup(kpm=src_pad),
        lambda: MaskGroup(kpm=padding(2, 4, [0, 1]),
                          attn=(causal_additive(4, 4), "additive")),
        lambda: MaskGroup(kpm=src_pad), n_enc=1, S=5, L=4)


def cross_attention_case(name, description, norm_first, masks, eps=1e-5,
                         B=2, L=4, S=6, d=8, H=2):
    block = CrossAttention(d, H, eps, norm_first)
    randomize(block)
    x = randn(B, L, d)
    memory = randn(B, S, d)
    group = masks()
    group.check(B, H, L, S, name)
    tensors = params_of(block)
    tensors["input.x"] = f32(x)
    tensors["input.memory"] = f32(memory)
    meta = {"module": "cross_attention", "description": description,
            "d_model": d, "n_heads": H, "norm_first": int(norm_first),
            "layer_norm_eps": repr(float(eps))}
    group.store(tensors, meta, "memory_causal", "memory_key_padding_mask",
                "memory_mask")
    am, kpm = group.torch_args(B, H, L, S)
    block.double().train()
    out = block(x.double(), memory.double(), attn_mask=am, key_padding_mask=kpm)
    tensors["output.out"] = f32(out)
    return name, tensors, meta


@case
def cross_attention_post():
    return cross_attention_case(
        "cross_attention_post",
        "post-norm cross-attention block, L=4 S=6, memory key padding",
        False, lambda: MaskGroup(kpm=padding(2, 6, [3, 0])))


@case
def cross_attention_pre():
    return cross_attention_case(
        "cross_attention_pre",
        "pre-norm cross-attention block, L=5 S=3, additive memory_mask",
        True, lambda: MaskGroup(attn=(random_additive((5, 3)), "additive")),
        L=5, S=3)


@case
def layer_norm_large_mean():
    name = "layer_norm_large_mean"
    d, eps = 16, 1e-5
    norm = nn.LayerNorm(d, eps=eps)
    randomize(norm)
    x = randn(2, 3, d)
    x[0, 1] = 1000.0 + randn(d)          # large mean, unit spread
    x[1, 2] = -500.0 + 0.5 * randn(d)
    tensors = params_of(norm)
    tensors["input.x"] = f32(x)
    norm.double().train()
    tensors["output.out"] = f32(norm(x.double()))
    meta = {"module": "layer_norm", "d_model": d,
            "layer_norm_eps": repr(float(eps)),
            "description": "LayerNorm d=16 [2,3,16], rows with mean 1000 and"
                           " -500 (spread 1 and 0.5)"}
    return name, tensors, meta


@case
def layer_norm_eps():
    name = "layer_norm_eps"
    d, eps = 8, 0.1
    norm = nn.LayerNorm(d, eps=eps)
    randomize(norm)
    x = 0.3 * randn(5, d)                # variance comparable to eps
    tensors = params_of(norm)
    tensors["input.x"] = f32(x)
    norm.double().train()
    tensors["output.out"] = f32(norm(x.double()))
    meta = {"module": "layer_norm", "d_model": d,
            "layer_norm_eps": repr(float(eps)),
            "description": "LayerNorm d=8 rank-2 input [5,8], eps=0.1 with"
                           " variance ~0.09"}
    return name, tensors, meta


def feed_forward_case(name, activation, B=2, L=4, d=8, d_ff=16):
    ff = FeedForward(d, d_ff, activation)
    randomize(ff)
    # Wide inputs, so that hidden values reach |h| ~ 2-4 where exact and
    # tanh GELU differ most (up to ~5e-4).
    x = 3.0 * randn(B, L, d)
    tensors = params_of(ff)
    tensors["input.x"] = f32(x)
    ff.double().train()
    tensors["output.out"] = f32(ff(x.double()))
    meta = {"module": "feed_forward", "d_model": d, "d_ff": d_ff,
            "activation": activation,
            "description": "linear1 -> %s -> linear2, d=%d d_ff=%d"
                           % (activation, d, d_ff)}
    return name, tensors, meta


@case
def feed_forward_relu():
    return feed_forward_case("feed_forward_relu", "relu")


@case
def feed_forward_gelu():
    return feed_forward_case("feed_forward_gelu", "gelu")


@case
def feed_forward_gelu_tanh():
    return feed_forward_case("feed_forward_gelu_tanh", "gelu_tanh", d=12,
                             d_ff=20)


# ---- main --------------------------------------------------------------------

def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(os.path.dirname(here), "tests", "fixtures")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=default_out,
                        help="output directory (default: tests/fixtures)")
    parser.add_argument("--list", action="store_true",
                        help="list the case names and exit")
    args = parser.parse_args(argv)

    if args.list:
        for fn in CASES:
            print(fn.__name__)
        return 0

    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    written = set()
    total = 0
    for fn in CASES:
        torch.manual_seed(zlib.crc32(fn.__name__.encode("utf-8")))
        name, tensors, meta = fn()
        assert name == fn.__name__, (name, fn.__name__)
        meta = {k: str(v) for k, v in meta.items()}
        for key, arr in tensors.items():
            if key.startswith("output.") and not np.isfinite(arr).all():
                raise AssertionError("%s: %s is not finite" % (name, key))
        filename = name + ".safetensors"
        # Sorted header keys, as the committed fixtures have them (written
        # atomically: an interrupted run leaves no partial file).
        path = os.path.join(args.out, filename)
        size = save_safetensors(tensors, path, meta, sort_keys=True)
        written.add(filename)
        total += size
        print("%-36s %6d bytes" % (filename, size))
    # Remove cases that no longer exist, so the directory is exactly the set.
    for stale in sorted(os.listdir(args.out)):
        if stale.endswith(".safetensors") and stale not in written:
            os.remove(os.path.join(args.out, stale))
            print("removed stale %s" % stale)
    print("%d cases, %d bytes in %s" % (len(written), total, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
