"""transformer-generate's image input (tools/image_input.h) against
Pillow, which transformers' ViTImageProcessor uses: random PNG and JPEG
files decoded by libpng / libjpeg and resized with the bilinear filter must
give Pillow's pixels (Image.open + resize(BILINEAR)) bit for bit, when
shrinking (antialiased), enlarging, and unchanged.

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
print("ok: image resize")
