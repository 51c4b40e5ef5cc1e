"""Images for image models (ViT): decoding with Pillow (never a decoder of
our own) and the preprocessing of transformers' ViTImageProcessor, so that
``model.classify(path)`` gives what Hugging Face's image-classification
pipeline gives for a ViT checkpoint directory."""

import os
from os import fspath

import numpy as np

from ._files import open_regular, read_json

__all__ = ["ViTImageProcessor"]

_BILINEAR = 2   # PIL.Image.BILINEAR, ViTImageProcessor's resample


def _uint8_hwc(a):
    """An image array (numpy or torch) as uint8 [H, W, C] (C 1 or 3; [H,
    W] grey; channel-first [C, H, W] transposed, as transformers infers
    the channel dimension).  Values must be whole numbers 0..255: float
    arrays already scaled to [0, 1] are refused rather than truncated."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim == 3 and a.shape[0] in (1, 3) and a.shape[-1] not in (1, 3):
        a = a.transpose(1, 2, 0)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] == 3)):
        raise ValueError(f"an image array must be [H, W], [H, W, 1 or 3] or "
                         f"[1 or 3, H, W], got shape {a.shape}")
    if a.dtype != np.uint8:
        if a.size and not (np.all(a == np.floor(a)) and a.min() >= 0
                           and a.max() <= 255):
            raise ValueError("an image array must hold whole numbers "
                             "0..255 (uint8 pixels), not values scaled to "
                             "[0, 1]")
        a = a.astype(np.uint8)
    return np.ascontiguousarray(a)


class ViTImageProcessor:
    """transformers' ViTImageProcessor: ``processor(images)`` -> pixel
    values ``[B, C, H, W]`` float32: each image (a path, a PIL image or an
    ``[H, W, 3]`` uint8 array) converted to RGB, resized to ``size``
    (``{"height", "width"}``) with Pillow's resample (bilinear), scaled by
    ``rescale_factor`` (1/255) and normalized by ``image_mean`` /
    ``image_std`` (0.5 each), each step when its ``do_*`` flag says.

    ``ViTImageProcessor.from_pretrained(dir)`` reads the directory's
    preprocessor_config.json (the defaults above when absent; the size
    then from config.json's image_size, else 224)."""

    def __init__(self, do_resize=True, size=None, resample=_BILINEAR,
                 do_rescale=True, rescale_factor=1 / 255,
                 do_normalize=True, image_mean=None, image_std=None):
        if size is None:
            size = {"height": 224, "width": 224}
        elif isinstance(size, int):
            size = {"height": size, "width": size}
        self.do_resize = bool(do_resize)
        self.size = {"height": int(size["height"]),
                     "width": int(size["width"])}
        self.resample = int(resample)
        self.do_rescale = bool(do_rescale)
        self.rescale_factor = float(rescale_factor)
        self.do_normalize = bool(do_normalize)
        def triple(v, name):   # a float, as transformers allows, or 3
            v = [0.5] * 3 if v is None else v
            v = [float(v)] * 3 if np.ndim(v) == 0 else [float(x) for x in v]
            if len(v) not in (1, 3):
                raise ValueError(f"{name} must hold 1 or 3 values, got "
                                 f"{len(v)}")
            return v * 3 if len(v) == 1 else v
        self.image_mean = triple(image_mean, "image_mean")
        self.image_std = triple(image_std, "image_std")

    @classmethod
    def from_pretrained(cls, path):
        """The processor of checkpoint directory path."""
        path = fspath(path)
        kwargs = {}
        prep = os.path.join(path, "preprocessor_config.json")
        if os.path.exists(prep):
            cfg = read_json(prep)
            kwargs = {k: cfg[k] for k in (
                "do_resize", "size", "resample", "do_rescale",
                "rescale_factor", "do_normalize", "image_mean", "image_std")
                if cfg.get(k) is not None}
        if "size" not in kwargs:
            config = os.path.join(path, "config.json")
            if os.path.exists(config):
                kwargs["size"] = int(read_json(config).get("image_size",
                                                            224))
        return cls(**kwargs)

    def _one(self, image):
        # A path is opened first (a FIFO or /dev/zero refused at once), then
        # decoded by Pillow, whose Image.open refuses a decompression bomb
        # from its header (DecompressionBombError above twice
        # PIL.Image.MAX_IMAGE_PIXELS, 89478485), as the command line does.
        f = (open_regular(fspath(image))
             if isinstance(image, (str, os.PathLike)) else None)
        try:
            return self._decoded(image, f)
        finally:
            if f is not None:
                f.close()

    def _decoded(self, image, f):
        from PIL import Image, ImageOps
        if f is not None:
            with Image.open(f) as im:
                # transformers' load_image: EXIF orientation applied, then
                # RGB (alpha dropped)
                image = ImageOps.exif_transpose(im).convert("RGB")
        elif not isinstance(image, Image.Image):
            image = Image.fromarray(_uint8_hwc(image))
        else:
            image = ImageOps.exif_transpose(image)
        image = image.convert("RGB")
        if self.do_resize:
            want = (self.size["width"], self.size["height"])
            if image.size != want:
                image = image.resize(want, resample=self.resample)
        x = np.asarray(image, np.float64)
        if self.do_rescale:
            x = x * self.rescale_factor
        if self.do_normalize:
            x = (x - np.asarray(self.image_mean)) / np.asarray(self.image_std)
        return x.astype(np.float32).transpose(2, 0, 1)

    def __call__(self, images):
        """images (one, or a list) -> pixel values ``[B, 3, H, W]``."""
        if not isinstance(images, (list, tuple)):
            images = [images]
        return np.stack([self._one(im) for im in images])

    def __repr__(self):
        return (f"ViTImageProcessor(size={self.size}, "
                f"image_mean={self.image_mean}, image_std={self.image_std})")
