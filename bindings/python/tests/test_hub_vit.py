"""ViT checkpoints (issue 18): a ViTForImageClassification directory in the
exact hub layout (google/vit-base-patch16-224's names, scaled down) loads
with transformer.from_pretrained and classifies images as an independent
torch float64 ViT does (hub_vit_reference.py), from F32, F16, BF16 and
sharded weights; what it cannot hold is refused, named."""

import json

import numpy as np
import pytest
import torch

import transformer
import hub_gpt2_reference as G
import hub_vit_reference as R
from conftest import rel_err


@pytest.mark.parametrize("dtype,prefix,shards,pooler", [
    ("F32", "vit.", 1, False),   # ViTForImageClassification.save_pretrained
    ("BF16", "vit.", 3, True),   # sharded, with ViTModel's pooler (ignored)
    ("F16", "", 1, False),       # unprefixed
])
def test_logits(tmp_path, dtype, prefix, shards, pooler):
    w = R.random_weights(R.CONFIG, seed=3, pooler=pooler)
    R.write_checkpoint(str(tmp_path), w, dtype=dtype, prefix=prefix,
                       shards=shards)
    ref_w = G.rounded(w, dtype)
    model = transformer.from_pretrained(tmp_path)
    c = model.config
    assert c["architecture"] == "encoder_only" and c["norm_first"]
    assert c["activation"] == "gelu" and c["vocab_size"] == 5
    assert (c["patch_size"], c["image_size"], c["num_channels"]) == (8, 32, 3)
    assert c["context_length"] == 17 and c["head_bias"]
    assert model.id2label == {0: "tabby cat", 1: "goldfish", 2: "airliner",
                              3: "teapot", 4: "volcano"}
    assert c["id2label"] == model.id2label
    x = R.pixels(R.CONFIG, batch=3)
    ref = R.vit_logits(ref_w, R.CONFIG, x)
    out = model.logits(x.numpy())
    assert out.shape == (3, 5)
    assert rel_err(out, ref) <= 1e-5
    assert rel_err(model(x.numpy()), ref) <= 1e-5
    assert rel_err(model.image_logits(x[1].numpy()), ref[1]) <= 1e-5
    sd = model.state_dict()
    np.testing.assert_array_equal(
        sd["layers.1.self_attn.in_proj_weight"][48:96],
        ref_w["encoder.layer.1.attention.attention.key.weight"].float())
    np.testing.assert_array_equal(
        sd["layers.2.self_attn.in_proj_bias"][96:],
        ref_w["encoder.layer.2.attention.attention.value.bias"].float())
    np.testing.assert_array_equal(
        sd["patch_embedding.weight"],
        ref_w["embeddings.patch_embeddings.projection.weight"].float())
    assert sd["cls_token"].shape == (1, 1, 48)
    assert sd["position_embedding.weight"].shape == (17, 48)
    assert "token_embedding.weight" not in sd
    assert isinstance(model.patch_embedding, transformer.PatchEmbedding)
    # MACs: the patches (16 of 3 x 8 x 8 pixels), the 3 blocks over 17
    # positions, the classifier on the class token alone
    d, ff, L = 48, 80, 17
    block = 4 * d * d * L + 2 * L * L * d + 2 * L * d * ff
    assert model.forward_macs(2, L) == 2 * (16 * 192 * d + 3 * block + d * 5)


def test_training_gradients_match_autograd(tmp_path):
    """Model.backward of a loaded ViT (tfm_model_image_backward) against
    torch.autograd through the float64 reference: every parameter's
    gradient (patch embedding, class token, positions, blocks, final norm,
    classifier) within 1e-4 of the largest magnitude, accumulated (+=) by
    a second backward."""
    w = R.random_weights(R.CONFIG, seed=6)
    R.write_checkpoint(str(tmp_path), w)
    ours = transformer.from_pretrained(tmp_path)
    ref_w = {k: v.double().requires_grad_(True) for k, v in w.items()}
    x = R.pixels(R.CONFIG, batch=3, seed=8)
    targets = torch.tensor([4, 0, 2])
    logits = R.vit_logits(ref_w, R.CONFIG, x)
    loss = torch.nn.functional.cross_entropy(logits, targets)
    (dlogits,) = torch.autograd.grad(loss, logits, retain_graph=True)
    loss.backward()
    ours.train()
    assert rel_err(ours.logits(x.numpy()), logits.detach()) <= 1e-5
    ours.backward(dlogits.float().numpy())

    def close(name, want, scale=1):
        got = ours.grad(name)
        want = want.reshape(got.shape).numpy() * scale
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= 1e-4, (name, err)

    emb = "embeddings."
    close("cls_token", ref_w[emb + "cls_token"].grad)
    close("position_embedding.weight",
          ref_w[emb + "position_embeddings"].grad)
    proj = emb + "patch_embeddings.projection."
    close("patch_embedding.weight", ref_w[proj + "weight"].grad)
    close("patch_embedding.bias", ref_w[proj + "bias"].grad)
    close("norm.weight", ref_w["layernorm.weight"].grad)
    close("norm.bias", ref_w["layernorm.bias"].grad)
    close("lm_head.weight", ref_w["classifier.weight"].grad)
    close("lm_head.bias", ref_w["classifier.bias"].grad)
    for i in range(R.CONFIG["num_hidden_layers"]):
        p, q = f"layers.{i}.", f"encoder.layer.{i}."
        for part in ("weight", "bias"):
            close(p + "self_attn.in_proj_" + part, torch.cat(
                [ref_w[q + f"attention.attention.{n}.{part}"].grad
                 for n in ("query", "key", "value")]))
            for ours_name, hf in [("self_attn.out_proj",
                                   "attention.output.dense"),
                                  ("norm1", "layernorm_before"),
                                  ("linear1", "intermediate.dense"),
                                  ("linear2", "output.dense"),
                                  ("norm2", "layernorm_after")]:
                close(f"{p}{ours_name}.{part}",
                      ref_w[q + hf + "." + part].grad)
    ours.logits(x.numpy())
    ours.backward(dlogits.float().numpy())       # += : twice the gradient
    close("patch_embedding.weight", ref_w[proj + "weight"].grad, 2)
    close("cls_token", ref_w[emb + "cls_token"].grad, 2)
    with pytest.raises(transformer.InvalidArgumentError):
        ours.backward()                           # no loss() to go back from
    with pytest.raises(transformer.ShapeError):
        ours.backward(np.zeros((2, 5), np.float32))


def test_auto_model_for_image_classification(tmp_path):
    R.write_checkpoint(str(tmp_path / "vit"), R.random_weights(R.CONFIG))
    model = transformer.AutoModelForImageClassification.from_pretrained(
        tmp_path / "vit")
    assert model.config["patch_size"] == 8
    G.write_checkpoint(str(tmp_path / "gpt2"), G.random_weights(G.CONFIG),
                       tokenizer=True)
    with pytest.raises(transformer.UnsupportedError, match="encoder-only"):
        transformer.AutoModelForImageClassification.from_pretrained(
            tmp_path / "gpt2")
    import hub_bert_reference as B
    B.write_checkpoint(str(tmp_path / "bert"), B.random_weights(B.CONFIG))
    with pytest.raises(transformer.UnsupportedError, match="token ids"):
        transformer.AutoModelForImageClassification.from_pretrained(
            tmp_path / "bert")
    with pytest.raises(TypeError):
        transformer.AutoModelForImageClassification()


def test_bf16_equals_the_same_weights_in_f32(tmp_path):
    w = G.rounded(R.random_weights(R.CONFIG, seed=4), "BF16")
    w = {k: v.float() for k, v in w.items()}
    R.write_checkpoint(str(tmp_path / "f32"), w)
    R.write_checkpoint(str(tmp_path / "bf16"), w, dtype="BF16", shards=2)
    x = R.pixels(R.CONFIG).numpy()
    a = transformer.from_pretrained(tmp_path / "f32").logits(x)
    b = transformer.from_pretrained(tmp_path / "bf16").logits(x)
    np.testing.assert_array_equal(a, b)


def test_save_load_round_trip_and_errors(tmp_path):
    R.write_checkpoint(str(tmp_path / "hub"), R.random_weights(R.CONFIG))
    model = transformer.from_pretrained(tmp_path / "hub")
    x = R.pixels(R.CONFIG).numpy()
    path = str(tmp_path / "vit.safetensors")
    model.save(path)
    again = transformer.load_model(path)
    for k in ("patch_size", "image_size", "num_channels", "context_length",
              "vocab_size", "head_bias", "norm_first"):
        assert again.config[k] == model.config[k]
    np.testing.assert_array_equal(again.logits(x), model.logits(x))
    # the label names travel in the file's "id2label" metadata (they were
    # lost: a saved ViT classified as LABEL_<i>)
    assert again.id2label == model.id2label == {
        int(k): v for k, v in R.CONFIG["id2label"].items()}
    # a model of images takes no ids, and trains from images only
    with pytest.raises(transformer.UnsupportedError, match="image model"):
        with model._use() as ptr:
            transformer._lowlevel.tfm_model_logits(
                ptr, np.zeros((1, 2), np.int32),
                np.zeros((1, 2, 5), np.float32))
    model.train()
    with pytest.raises(transformer.UnsupportedError,
                       match="tfm_model_image_backward"):
        model.loss_backward(np.zeros((1, 2), np.int32),
                            np.zeros((1, 2), np.int32))
    with pytest.raises(transformer.ShapeError):
        model.logits(np.zeros((1, 3, 16, 16), np.float32))   # not 32 x 32
    with pytest.raises(transformer.ShapeError):
        model.logits(np.zeros((1, 1, 32, 32), np.float32))   # 1 channel
    bad = x.copy()
    bad[0, 1, 2, 3] = np.nan
    with pytest.raises(transformer.NonFiniteError):
        model.logits(bad)
    # a model of token ids takes no images
    bert_like = transformer.Model(vocab_size=7, d_model=8, n_heads=2,
                                  context_length=4,
                                  architecture="encoder_only")
    with pytest.raises(transformer.UnsupportedError, match="token ids"):
        bert_like.image_logits(x)


def test_a_created_image_model_matches_the_reference():
    """Model(config) with the image parts: its own parameters, set from a
    hub-named dict, run as the reference does."""
    w = R.random_weights(R.CONFIG, seed=9)
    model = transformer.Model(
        architecture="encoder_only", vocab_size=5, d_model=48, n_heads=4,
        d_ff=80, n_layers=3, context_length=17, activation="gelu",
        layer_norm_eps=1e-12, norm_first=True, tied_embeddings=False,
        head_bias=True, patch_size=8, image_size=32, num_channels=3)
    sd = {"cls_token": w["embeddings.cls_token"],
          "position_embedding.weight":
              w["embeddings.position_embeddings"][0],
          "patch_embedding.weight":
              w["embeddings.patch_embeddings.projection.weight"],
          "patch_embedding.bias":
              w["embeddings.patch_embeddings.projection.bias"],
          "norm.weight": w["layernorm.weight"],
          "norm.bias": w["layernorm.bias"],
          "lm_head.weight": w["classifier.weight"],
          "lm_head.bias": w["classifier.bias"]}
    for i in range(3):
        p = f"encoder.layer.{i}."
        a = p + "attention.attention."
        sd.update({
            f"layers.{i}.norm1.weight": w[p + "layernorm_before.weight"],
            f"layers.{i}.norm1.bias": w[p + "layernorm_before.bias"],
            f"layers.{i}.self_attn.in_proj_weight": torch.cat(
                [w[a + n + ".weight"] for n in ("query", "key", "value")]),
            f"layers.{i}.self_attn.in_proj_bias": torch.cat(
                [w[a + n + ".bias"] for n in ("query", "key", "value")]),
            f"layers.{i}.self_attn.out_proj.weight":
                w[p + "attention.output.dense.weight"],
            f"layers.{i}.self_attn.out_proj.bias":
                w[p + "attention.output.dense.bias"],
            f"layers.{i}.norm2.weight": w[p + "layernorm_after.weight"],
            f"layers.{i}.norm2.bias": w[p + "layernorm_after.bias"],
            f"layers.{i}.linear1.weight": w[p + "intermediate.dense.weight"],
            f"layers.{i}.linear1.bias": w[p + "intermediate.dense.bias"],
            f"layers.{i}.linear2.weight": w[p + "output.dense.weight"],
            f"layers.{i}.linear2.bias": w[p + "output.dense.bias"]})
    model.load_state_dict({k: v.numpy() for k, v in sd.items()})
    x = R.pixels(R.CONFIG)
    assert rel_err(model.logits(x.numpy()),
                   R.vit_logits(w, R.CONFIG, x)) <= 1e-5


def _edit(tmp_path, config=None, drop=None, extra=None, reshape=None):
    w = R.random_weights(R.CONFIG)
    if drop:
        del w[drop]
    if reshape:
        w[reshape] = w[reshape][:-1]
    R.write_checkpoint(str(tmp_path), w, config, extra=extra)
    return str(tmp_path)


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(config=dict(R.CONFIG, image_size=36)),
     transformer.FormatError, "image_size"),
    (dict(config=dict(R.CONFIG, num_attention_heads=5)),
     transformer.FormatError, "num_attention_heads"),
    (dict(config=dict(R.CONFIG, hidden_act="gelu_quick")),
     transformer.UnsupportedError, "hidden_act"),
    (dict(config=dict(R.CONFIG, qkv_bias=False)),
     transformer.UnsupportedError, "qkv_bias"),
    (dict(config=dict(R.CONFIG, id2label={})),
     transformer.UnsupportedError, "id2label"),
    (dict(config=dict(R.CONFIG, num_channels=1)),
     transformer.FormatError,
     "vit.embeddings.patch_embeddings.projection.weight"),
    (dict(config=dict(R.CONFIG, image_size=40)),
     transformer.FormatError, "vit.embeddings.position_embeddings"),
    (dict(drop="embeddings.cls_token"),
     transformer.FormatError, "vit.embeddings.cls_token"),
    (dict(drop="classifier.bias"),
     transformer.FormatError, "classifier.bias"),
    (dict(reshape="encoder.layer.0.attention.attention.key.bias"),
     transformer.FormatError,
     "vit.encoder.layer.0.attention.attention.key.bias"),
    (dict(extra={"vit.encoder.layer.3.output.dense.bias": torch.ones(48)}),
     transformer.FormatError, "vit.encoder.layer.3.output.dense.bias"),
    (dict(config={k: v for k, v in R.CONFIG.items()
                  if k not in ("id2label", "label2id")}),
     transformer.FormatError, "classifier.weight"),  # 2 labels by default
    # id2label's keys are the class ids 0 .. n-1 (Python's raw ValueError
    # before); image and patch sizes may be square pairs, not others
    (dict(config=dict(R.CONFIG, id2label={"0": "a", "x": "b", "2": "c",
                                          "3": "d", "4": "e"})),
     transformer.FormatError, "id2label\" key \"x\""),
    (dict(config=dict(R.CONFIG, id2label={"0": "a", "1": "b", "2": "c",
                                          "3": "d", "5": "e"})),
     transformer.FormatError, "id2label\" key \"5\""),
    (dict(config=dict(R.CONFIG, image_size=[32, 40])),
     transformer.UnsupportedError, "only square images"),
    (dict(config=dict(R.CONFIG, patch_size=[8, 8, 8])),
     transformer.FormatError, "patch_size\" must be"),
])
def test_refused_with_the_name(tmp_path, kwargs, error, words):
    path = _edit(tmp_path, **kwargs)
    with pytest.raises(error, match=words.replace(".", r"\.")):
        transformer.from_pretrained(path)


def test_square_pairs_are_the_number(tmp_path):
    """image_size and patch_size as [n, n] (transformers' ViT takes pairs)
    give the model of n."""
    w = R.random_weights(R.CONFIG, seed=3)
    R.write_checkpoint(str(tmp_path), w, dict(R.CONFIG, image_size=[32, 32],
                                               patch_size=[8, 8]))
    model = transformer.from_pretrained(tmp_path)
    x = R.pixels(R.CONFIG)
    ref = R.vit_logits(G.rounded(w, "F32"), R.CONFIG, x)
    assert rel_err(model.logits(x.numpy()), ref) <= 1e-5


# ---- images: the command line's libpng / libjpeg, Python's Pillow ----------

PREP = {"do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.485, 0.456, 0.406],
        "image_processor_type": "ViTImageProcessor",
        "image_std": [0.229, 0.224, 0.225], "resample": 2,
        "rescale_factor": 0.00392156862745098,
        "size": {"height": 32, "width": 32}}


def _image(path, size, fmt, seed=0):
    """A smooth random RGB image written by Pillow; its pixels as Pillow
    decodes them back ([H, W, 3] uint8)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    w, h = size
    base = rng.integers(0, 256, (h // 4 + 2, w // 4 + 2, 3), np.uint8)
    img = Image.fromarray(base).resize((w, h), Image.BICUBIC)
    img.save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    with Image.open(path) as im:
        return im.convert("RGB")


def _reference_top(w, pil_image, prep=PREP):
    """The float64 reference's softmax over the labels for pil_image,
    preprocessed as ViTImageProcessor does (Pillow's bilinear resize)."""
    from PIL import Image
    size = (prep["size"]["width"], prep["size"]["height"])
    if pil_image.size != size:
        pil_image = pil_image.resize(size, Image.BILINEAR)
    x = np.asarray(pil_image, np.float64) * prep["rescale_factor"]
    x = (x - np.asarray(prep["image_mean"])) / np.asarray(prep["image_std"])
    x = torch.tensor(x.transpose(2, 0, 1)[None].astype(np.float32))
    return torch.softmax(R.vit_logits(w, R.CONFIG, x)[0], -1)


def _labels(i):
    return R.CONFIG["id2label"][str(i)]


def test_classify_in_python_with_pillow(tmp_path):
    pytest.importorskip("PIL")
    w = R.random_weights(R.CONFIG, seed=21)
    R.write_checkpoint(str(tmp_path), w)
    with open(tmp_path / "preprocessor_config.json", "w") as f:
        json.dump(PREP, f)
    model = transformer.from_pretrained(tmp_path)
    for size, fmt in (((32, 32), "PNG"), ((57, 41), "PNG"),
                      ((40, 48), "JPEG")):
        path = str(tmp_path / f"img.{fmt.lower()}")
        img = _image(path, size, fmt, seed=size[0])
        p = _reference_top(w, img)
        got = model.classify(path)
        order = torch.argsort(p, descending=True).tolist()
        assert [g["label"] for g in got] == [_labels(i) for i in order]
        np.testing.assert_allclose([g["score"] for g in got],
                                   p[order].numpy(), rtol=1e-5, atol=1e-6)
    proc = transformer.ViTImageProcessor.from_pretrained(tmp_path)
    assert proc.size == {"height": 32, "width": 32}
    assert proc.image_mean == PREP["image_mean"]
    assert len(model.classify(path, top_k=2)) == 2


def test_command_line_classify(tmp_path):
    """transformer-generate --model DIR --classify IMAGE: the top 5 labels
    with their probabilities (4 decimals), a PNG and a JPEG at the model's
    size read by libpng / libjpeg as Pillow reads them, normalised with the
    directory's preprocessor_config.json; images shrunk and enlarged
    (bilinear; the pixels equal Pillow's, tools/check_image_resize.py) give
    the reference's probabilities on Pillow's resize; --top-k 2 gives two;
    a model file takes the processor's defaults and LABEL_<i>; a text
    model and a file that is no image are refused."""
    import os
    import subprocess
    pytest.importorskip("PIL")
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    w = R.random_weights(R.CONFIG, seed=22)
    R.write_checkpoint(str(tmp_path), w)
    with open(tmp_path / "preprocessor_config.json", "w") as f:
        json.dump(PREP, f)

    def run(image, *more):
        r = subprocess.run([cli, "--model", str(tmp_path), "--classify",
                            image, *more], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return [line.split("\t") for line in r.stdout.splitlines()]

    for size, fmt, tol in (((32, 32), "PNG", 1e-4), ((32, 32), "JPEG", 1e-4),
                           ((45, 60), "PNG", 1e-4), ((97, 33), "JPEG", 1e-4),
                           ((20, 24), "PNG", 1e-4)):
        path = str(tmp_path / f"x{size[0]}.{fmt.lower()}")
        p = _reference_top(w, _image(path, size, fmt, seed=size[1]))
        order = torch.argsort(p, descending=True).tolist()
        lines = run(path)
        assert len(lines) == 5
        assert lines[0][1] == _labels(order[0])
        for score, label in lines:
            i = [_labels(k) for k in range(5)].index(label)
            assert abs(float(score) - float(p[i])) <= tol
        if tol < 1e-3:
            assert [label for _, label in lines] == [_labels(i)
                                                     for i in order]
    assert len(run(path, "--top-k", "2")) == 2
    # a model file: no config.json, no preprocessor_config.json: the labels
    # from its "id2label" metadata (LABEL_<i> without it),
    # ViTImageProcessor's default mean and std 0.5
    model_file = str(tmp_path / "vit.safetensors")
    transformer.from_pretrained(tmp_path).save(model_file)
    r = subprocess.run([cli, "--model", model_file, "--classify", path,
                        "--top-k", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    prep = dict(PREP, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    from PIL import Image
    with Image.open(path) as im:
        p = _reference_top(w, im.convert("RGB"), prep)
    got = [line.split("\t") for line in r.stdout.splitlines()]
    assert got[0][1] == _labels(int(torch.argmax(p)))
    for score, label in got:
        i = [_labels(k) for k in range(5)].index(label)
        assert abs(float(score) - float(p[i])) <= 1e-4
    bare = str(tmp_path / "bare.safetensors")
    tensors = transformer.load_safetensors(model_file)
    meta = {k: v for k, v in transformer.load_safetensors_metadata(
        model_file).items() if k != "id2label"}
    transformer.save_safetensors(tensors, bare, metadata=meta)
    r = subprocess.run([cli, "--model", bare, "--classify", path,
                        "--top-k", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [line.split("\t") for line in r.stdout.splitlines()]
    assert got[0][1] == f"LABEL_{int(torch.argmax(p))}"
    for score, label in got:
        assert abs(float(score) - float(p[int(label[6:])])) <= 1e-4
    (tmp_path / "not.png").write_text("hello")
    r = subprocess.run([cli, "--model", str(tmp_path), "--classify",
                        str(tmp_path / "not.png")], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "not a PNG or JPEG" in r.stderr
    G.write_checkpoint(str(tmp_path / "gpt2"), G.random_weights(G.CONFIG),
                       tokenizer=True)
    r = subprocess.run([cli, "--model", str(tmp_path / "gpt2"),
                        "--classify", path], capture_output=True, text=True)
    assert r.returncode == 1 and "image model" in r.stderr


def test_command_line_classify_reads_images_as_pillow(tmp_path):
    """What transformers' load_image hands the processor,
    Image.open(path).convert("RGB"): a PNG with alpha (RGBA, or a palette
    with tRNS) drops it -- it was composited onto uninitialised memory, so
    the probabilities changed from run to run -- and the reference's
    probabilities on Pillow's pixels are printed.  A truncated JPEG is
    refused as Pillow refuses it (libjpeg would grey the rest), and a
    preprocessor_config.json whose size is not the model's (2**61 crashed
    the resize) or whose resample is not bilinear is refused by name."""
    import os
    import subprocess
    pytest.importorskip("PIL")
    from PIL import Image
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    w = R.random_weights(R.CONFIG, seed=23)
    R.write_checkpoint(str(tmp_path), w)
    with open(tmp_path / "preprocessor_config.json", "w") as f:
        json.dump(PREP, f)
    rng = np.random.default_rng(5)
    rgba = Image.fromarray(rng.integers(0, 256, (32, 32, 4), np.uint8))
    pal = Image.fromarray(rng.integers(0, 256, (32, 32, 3), np.uint8)).quantize(8)
    pal.info["transparency"] = 3
    cases = {"rgba.png": (rgba, {}), "pal.png": (pal, {"transparency": 3})}
    for name, (img, kw) in cases.items():
        path = str(tmp_path / name)
        img.save(path, **kw)
        with Image.open(path) as im:
            p = _reference_top(w, im.convert("RGB"))
        outs = set()
        for perturb in ("0", "85", "170"):
            r = subprocess.run([cli, "--model", str(tmp_path), "--classify",
                                path], capture_output=True, text=True,
                               env=dict(os.environ, MALLOC_PERTURB_=perturb))
            assert r.returncode == 0, r.stderr
            outs.add(r.stdout)
        assert len(outs) == 1, name
        for score, label in (line.split("\t")
                             for line in outs.pop().splitlines()):
            i = [_labels(k) for k in range(5)].index(label)
            assert abs(float(score) - float(p[i])) <= 1e-4, name

    def refused(path, words):
        r = subprocess.run([cli, "--model", str(tmp_path), "--classify",
                            path], capture_output=True, text=True)
        assert r.returncode == 1 and words in r.stderr, r.stderr

    jpeg = str(tmp_path / "whole.jpg")
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), np.uint8)).save(jpeg)
    data = open(jpeg, "rb").read()
    cut = str(tmp_path / "cut.jpg")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(OSError):
        with Image.open(cut) as im:
            im.convert("RGB")
    refused(cut, "Premature end of JPEG file")
    for prep, words in ((dict(PREP, size={"height": 32,
                                          "width": 2 ** 61}), "\"size\""),
                        (dict(PREP, size=1e30), "\"size\""),
                        (dict(PREP, size=-5), "\"size\""),
                        (dict(PREP, resample=3), "\"resample\"")):
        with open(tmp_path / "preprocessor_config.json", "w") as f:
            json.dump(prep, f)
        refused(jpeg, words)


def test_python_images_as_transformers_loads_them(tmp_path):
    """classify / ViTImageProcessor take images as transformers'
    load_image and processor do: a JPEG's EXIF orientation applied
    (ImageOps.exif_transpose; it was ignored), channel-first [C, H, W],
    [H, W] grey and torch tensors as [H, W, 3] pixels, a float image_mean;
    float arrays scaled to [0, 1] refused (they were truncated to 0 and 1),
    top_k < 1 refused (0 gave nothing, -1 all but one)."""
    pytest.importorskip("PIL")
    from PIL import Image
    w = R.random_weights(R.CONFIG, seed=24)
    R.write_checkpoint(str(tmp_path), w)
    with open(tmp_path / "preprocessor_config.json", "w") as f:
        json.dump(PREP, f)
    model = transformer.from_pretrained(tmp_path)
    rng = np.random.default_rng(8)
    base = Image.fromarray(rng.integers(0, 256, (12, 10, 3), np.uint8))
    img = base.resize((50, 40), Image.BICUBIC)
    exif = Image.Exif()
    exif[0x0112] = 6                     # rotated 90 degrees clockwise
    path = str(tmp_path / "turned.jpg")
    img.save(path, exif=exif.tobytes(), quality=95)
    with Image.open(path) as im:
        upright = im.transpose(Image.Transpose.ROTATE_270).convert("RGB")
        assert upright.size == (40, 50)
    p = _reference_top(w, upright)
    got = model.classify(path)
    assert got[0]["label"] == _labels(int(torch.argmax(p)))
    for g in got:
        i = [_labels(k) for k in range(5)].index(g["label"])
        assert abs(g["score"] - float(p[i])) <= 1e-5
    proc = transformer.ViTImageProcessor.from_pretrained(tmp_path)
    hwc = np.asarray(upright)
    want = proc(hwc)
    for same in (hwc.transpose(2, 0, 1), torch.tensor(hwc),
                 hwc.astype(np.float32)):
        np.testing.assert_array_equal(proc(same), want)
    grey = hwc[..., 0]
    np.testing.assert_array_equal(proc(grey), proc(np.stack([grey] * 3, -1)))
    with pytest.raises(ValueError, match="0..255"):
        proc(hwc / 255.0)
    with pytest.raises(ValueError, match="shape"):
        proc(hwc[..., :2])
    one = transformer.ViTImageProcessor(size=32, image_mean=0.5,
                                        image_std=0.5)
    assert one.image_mean == [0.5] * 3 and one.image_std == [0.5] * 3
    for k in (0, -1):
        with pytest.raises(transformer.InvalidArgumentError, match="top_k"):
            model.classify(path, top_k=k)


@pytest.mark.parametrize("change,words", [
    (dict(architecture="decoder_only"), "encoder-only"),
    (dict(image_size=30), "multiple of patch_size"),
    (dict(num_channels=0), "num_channels"),
    (dict(context_length=16), "context_length 17"),
    (dict(positional="sinusoidal"), "learned"),
    (dict(tied_embeddings=True), "no token table"),
    (dict(type_vocab_size=2), "no token table"),
])
def test_image_parts_refused_with_the_reason(change, words):
    """tfm_model_create_v2's checks of the image parts (model.h)."""
    cfg = dict(architecture="encoder_only", vocab_size=5, d_model=16,
               n_heads=2, n_layers=1, context_length=17, norm_first=True,
               tied_embeddings=False, head_bias=True, patch_size=8,
               image_size=32, num_channels=3)
    cfg.update(change)
    with pytest.raises(transformer.InvalidArgumentError, match=words):
        transformer.Model(cfg)
