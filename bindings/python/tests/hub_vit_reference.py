"""A tiny random ViT written in the Hugging Face hub layout, and ViT's
image-classification forward pass in plain torch float64, independent of
the library.

The checkpoint is what transformers' ViTForImageClassification
.save_pretrained writes (names, shapes and config.json keys of
google/vit-base-patch16-224, scaled down): "vit." + ViTModel's tensors
(embeddings.cls_token [1, 1, d], embeddings.position_embeddings [1, N+1,
d], embeddings.patch_embeddings.projection [d, C, P, P] / [d],
encoder.layer.<i>.layernorm_before, attention.attention.query / key /
value, attention.output.dense, layernorm_after, intermediate.dense,
output.dense, layernorm) and the unprefixed "classifier" [labels, d].

The forward pass follows the paper (Dosovitskiy et al. 2021, eq. 1-4) as
modeling_vit implements it, eval mode: z0 = [cls; conv(x) patches in
row-major order] + positions; per layer (pre-norm) z = z + MSA(LN(z)),
z = z + MLP(LN(z)) with MSA softmax(q k^T / sqrt(d / H)) v over every
position and MLP out(gelu(inter(.))), erf GELU; y = LN(z_L); logits =
classifier(y[:, 0]).
"""

import json
import math
import os
import sys

import torch

import hub_gpt2_reference as G

CONFIG = {
    "architectures": ["ViTForImageClassification"],
    "attention_probs_dropout_prob": 0.0,
    "encoder_stride": 8,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "hidden_size": 48,
    "id2label": {"0": "tabby cat", "1": "goldfish", "2": "airliner",
                 "3": "teapot", "4": "volcano"},
    "image_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 80,
    "label2id": {"tabby cat": 0, "goldfish": 1, "airliner": 2, "teapot": 3,
                 "volcano": 4},
    "layer_norm_eps": 1e-12,
    "model_type": "vit",
    "num_attention_heads": 4,
    "num_channels": 3,
    "num_hidden_layers": 3,
    "patch_size": 8,
    "qkv_bias": True,
    "torch_dtype": "float32",
}


def random_weights(config, seed=0, pooler=False):
    """ViTForImageClassification's tensors (ViTModel's without the "vit."
    prefix, "classifier.*" as saved), random float32; `pooler` adds
    ViTModel's pooler."""
    g = torch.Generator().manual_seed(seed)
    d, ff = config["hidden_size"], config["intermediate_size"]
    C, P = config["num_channels"], config["patch_size"]
    N = (config["image_size"] // P) ** 2
    labels = len(config["id2label"])

    def rnd(*shape, scale=0.2, mean=0.0):
        return torch.randn(*shape, generator=g) * scale + mean

    def norm(name):
        w[name + ".weight"] = rnd(d, scale=0.1, mean=1.0)
        w[name + ".bias"] = rnd(d, scale=0.1)

    def linear(name, out, inp):
        w[name + ".weight"] = rnd(out, inp)
        w[name + ".bias"] = rnd(out, scale=0.1)

    w = {"embeddings.cls_token": rnd(1, 1, d, scale=1.0),
         "embeddings.position_embeddings": rnd(1, N + 1, d, scale=0.5),
         "embeddings.patch_embeddings.projection.weight": rnd(d, C, P, P,
                                                              scale=0.1),
         "embeddings.patch_embeddings.projection.bias": rnd(d, scale=0.1)}
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        norm(p + "layernorm_before")
        for part in ("query", "key", "value"):
            linear(p + "attention.attention." + part, d, d)
        linear(p + "attention.output.dense", d, d)
        norm(p + "layernorm_after")
        linear(p + "intermediate.dense", ff, d)
        linear(p + "output.dense", d, ff)
    norm("layernorm")
    if pooler:
        linear("pooler.dense", d, d)
    linear("classifier", labels, d)
    return w


def write_checkpoint(directory, weights, config=None, dtype="F32",
                     prefix="vit.", shards=1, extra=None):
    """The directory of a save_pretrained (G.write_checkpoint's layout and
    shards), ViT's config.json, "classifier.*" never prefixed."""
    named = {(k if k.startswith("classifier.") else prefix + k): v
             for k, v in weights.items()}
    return G.write_checkpoint(directory, named,
                              CONFIG if config is None else config,
                              dtype=dtype, prefix="", shards=shards,
                              tokenizer=False, extra=extra)


def _ln(x, w, name, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],),
                                          w[name + ".weight"],
                                          w[name + ".bias"], eps)


def _linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _gelu(x):  # erf GELU, transformers' GELUActivation ("gelu")
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def vit_logits(w, config, pixels):
    """logits [B, labels] of pixels [B, C, H, W], in float64."""
    w = {k: v.to(torch.float64) for k, v in w.items()}
    x = torch.as_tensor(pixels, dtype=torch.float64)
    d, H = config["hidden_size"], config["num_attention_heads"]
    eps = config["layer_norm_eps"]
    P = config["patch_size"]
    B = x.shape[0]
    # eq. 1: the patches in row-major order, each flattened as (c, u, v)
    # and projected by E (the Conv2d's weight as a [d, C P P] matrix).
    patches = x.unfold(2, P, P).unfold(3, P, P)          # B C gh gw P P
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, x.shape[1]
                                                        * P * P)
    proj = "embeddings.patch_embeddings.projection"
    e = patches @ w[proj + ".weight"].reshape(d, -1).T + w[proj + ".bias"]
    cls = w["embeddings.cls_token"].expand(B, 1, d)
    z = torch.cat([cls, e], 1) + w["embeddings.position_embeddings"]
    L = z.shape[1]
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        h = _ln(z, w, p + "layernorm_before", eps)
        q, k, v = (_linear(h, w, p + "attention.attention." + n)
                   .view(B, L, H, d // H).transpose(1, 2)
                   for n in ("query", "key", "value"))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // H), -1)
        a = (a @ v).transpose(1, 2).reshape(B, L, d)
        z = z + _linear(a, w, p + "attention.output.dense")
        h = _ln(z, w, p + "layernorm_after", eps)
        z = z + _linear(_gelu(_linear(h, w, p + "intermediate.dense")), w,
                        p + "output.dense")
    y = _ln(z, w, "layernorm", eps)
    return _linear(y[:, 0], w, "classifier")


def pixels(config, batch=2, seed=7):
    """Normalised pixel values [B, C, image_size, image_size] in [-1, 1]."""
    g = torch.Generator().manual_seed(seed)
    s = config["image_size"]
    return (torch.rand(batch, config["num_channels"], s, s, generator=g)
            * 2 - 1)


def main(directory):
    """Writes a checkpoint and its reference logits (reference.json: the
    pixels and the logits) for the Lua test."""
    w = random_weights(CONFIG, seed=5)
    write_checkpoint(directory, w)
    x = pixels(CONFIG, batch=2, seed=11)
    ref = vit_logits(w, CONFIG, x)
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump({"pixels": x.reshape(-1).tolist(),
                   "shape": list(x.shape),
                   "logits": ref.reshape(-1).tolist()}, f)


if __name__ == "__main__":
    main(sys.argv[1])
