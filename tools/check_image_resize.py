"""transformer-generate's image input (tools/image_input.h) against
Pillow, which transformers' ViTImageProcessor uses: random PNG and JPEG
files decoded by libpng / libjpeg and resized with the bilinear filter must
give Pillow's pixels (Image.open + resize(BILINEAR)) bit for bit, when
shrinking (antialiased), enlarging, and unchanged; PNGs of every colour
type and bit depth (alpha, tRNS, gAMA, 16-bit, 1-4-bit grey, palettes)
must decode as Pillow's convert("RGB"), and JPEGs of all eight EXIF
orientations as ImageOps.exif_transpose turns them.

    python3 check_image_resize.py IMAGE_RESIZE_PROBE   (exit 77: no Pillow)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    from PIL import Image
except ImportError:
    print("Pillow (python3-pil) is not installed: skipped")
    sys.exit(77)

probe = sys.argv[1]
rng = np.random.default_rng(2026)
cases = [(45, 60, 32, 32, "PNG"), (97, 33, 32, 32, "JPEG"),
         (20, 24, 32, 32, "PNG"), (640, 480, 224, 224, "JPEG"),
         (33, 97, 50, 17, "PNG"), (7, 5, 224, 224, "PNG"),
         (32, 32, 32, 32, "JPEG")]
with tempfile.TemporaryDirectory() as tmp:
    for w, h, W, H, fmt in cases:
        path = os.path.join(tmp, f"in.{fmt.lower()}")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(
            path, fmt)
        out = subprocess.run([probe, path, str(W), str(H)],
                             capture_output=True, check=True).stdout
        ours = np.frombuffer(out, np.uint8).reshape(H, W, 3)
        with Image.open(path) as im:
            ref = np.asarray(im.convert("RGB").resize((W, H),
                                                      Image.BILINEAR))
        diff = np.abs(ours.astype(int) - ref.astype(int))
        if diff.max() != 0:
            print(f"{fmt} {w}x{h} -> {W}x{H}: {(diff > 0).sum()} values "
                  f"differ from Pillow's (by up to {diff.max()})")
            sys.exit(1)
        print(f"ok: {fmt} {w}x{h} -> {W}x{H} equals Pillow's")


# ---- PNG kinds: Image.open(path).convert("RGB") is what transformers'
# load_image gives the processor: alpha and tRNS dropped (not composited),
# gAMA not applied, 16-bit colour by its high byte, 16-bit grey clipped.
# Written here by a minimal PNG writer (filter 0, one IDAT) so that every
# colour type and bit depth can be made.
import struct
import zlib


def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png(rows, w, h, color_type, depth, extra=(), plte=None):
    """rows: h byte strings of packed samples (big-endian 16-bit)."""
    out = b"\x89PNG\r\n\x1a\n" + chunk(
        b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0))
    for kind, data in extra:
        if kind != b"tRNS":
            out += chunk(kind, data)
    if plte is not None:
        out += chunk(b"PLTE", plte)
    for kind, data in extra:
        if kind == b"tRNS":
            out += chunk(kind, data)
    raw = b"".join(b"\x00" + r for r in rows)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def packed(values, depth):
    """One row of grey/palette samples of depth < 8 bits, packed."""
    per = 8 // depth
    out = bytearray()
    for i in range(0, len(values), per):
        byte = 0
        for j, v in enumerate(values[i:i + per]):
            byte |= int(v) << (8 - depth * (j + 1))
        out.append(byte)
    return bytes(out)


w, h = 13, 9
u8 = lambda *shape: rng.integers(0, 256, shape, np.uint8)   # noqa: E731
u16 = lambda *shape: rng.integers(0, 65536, shape, np.uint16)  # noqa: E731
gama = (b"gAMA", struct.pack(">I", 100000))       # gamma 1.0
kinds = {
    "RGB 8": png([r.tobytes() for r in u8(h, w, 3)], w, h, 2, 8),
    "RGB 8 with gAMA 1.0": png([r.tobytes() for r in u8(h, w, 3)], w, h, 2,
                               8, [gama]),
    "RGB 8 with tRNS": png([r.tobytes() for r in u8(h, w, 3)], w, h, 2, 8,
                           [(b"tRNS", struct.pack(">HHH", 1, 2, 3))]),
    "RGBA 8": png([r.tobytes() for r in u8(h, w, 4)], w, h, 6, 8),
    "grey+alpha 8": png([r.tobytes() for r in u8(h, w, 2)], w, h, 4, 8),
    "RGB 16": png([r.astype(">u2").tobytes() for r in u16(h, w, 3)], w, h,
                  2, 16),
    "RGB 16 with gAMA": png([r.astype(">u2").tobytes() for r in u16(h, w, 3)],
                            w, h, 2, 16, [gama]),
    "RGBA 16": png([r.astype(">u2").tobytes() for r in u16(h, w, 4)], w, h,
                   6, 16),
    "grey 16 (low values)": png(
        [(r % 400).astype(">u2").tobytes() for r in u16(h, w)], w, h, 0, 16),
    "grey 8": png([r.tobytes() for r in u8(h, w)], w, h, 0, 8),
    "palette with tRNS": png([r.tobytes() for r in u8(h, w) % 16], w, h, 3,
                             8, [(b"tRNS", bytes(range(0, 256, 16)))],
                             plte=u8(16, 3).tobytes()),
    "palette 4-bit": png([packed(r, 4) for r in u8(h, w) % 16], w, h, 3, 4,
                         plte=u8(16, 3).tobytes()),
}
for depth in (1, 2, 4):
    kinds[f"grey {depth}-bit"] = png(
        [packed(r, depth) for r in u8(h, w) % (1 << depth)], w, h, 0, depth)
with tempfile.TemporaryDirectory() as tmp:
    for name, data in kinds.items():
        path = os.path.join(tmp, "kind.png")
        with open(path, "wb") as f:
            f.write(data)
        out = subprocess.run([probe, path, str(w), str(h)],
                             capture_output=True, check=True).stdout
        ours = np.frombuffer(out, np.uint8).reshape(h, w, 3)
        with Image.open(path) as im:
            ref = np.asarray(im.convert("RGB"))
        diff = np.abs(ours.astype(int) - ref.astype(int))
        if diff.max() != 0:
            print(f"PNG {name}: {(diff > 0).sum()} values differ from "
                  f"Pillow's convert('RGB') (by up to {diff.max()})")
            sys.exit(1)
        print(f"ok: PNG {name} decodes as Pillow's convert('RGB')")

# ---- EXIF orientation: a JPEG turned upright as Pillow's
# ImageOps.exif_transpose turns it (transformers' load_image), all eight.
from PIL import ImageOps  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    base = Image.fromarray(rng.integers(0, 256, (10, 14, 3), np.uint8))
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        path = os.path.join(tmp, f"o{orientation}.jpg")
        base.save(path, exif=exif.tobytes(), quality=95)
        with Image.open(path) as im:
            ref = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        H, W = ref.shape[:2]
        out = subprocess.run([probe, path, str(W), str(H)],
                             capture_output=True, check=True).stdout
        ours = np.frombuffer(out, np.uint8)
        if ours.size != ref.size or not np.array_equal(
                ours.reshape(H, W, 3), ref):
            print(f"JPEG with EXIF orientation {orientation}: not Pillow's "
                  f"exif_transpose")
            sys.exit(1)
        print(f"ok: JPEG with EXIF orientation {orientation} upright as "
              f"Pillow's")
print("ok: image resize")
