"""Image files and the JSON beside them as the Python layer reads them
(issue 44, kinds 4 and 5): a FIFO, a symlink to /dev/zero or a directory
given as an image or as preprocessor_config.json is refused at once (the
alarm ends a run that blocks), a JSON file over 16 MiB or not UTF-8 is
refused, and a PNG whose header claims 20000 x 20000 (400000000 pixels,
above twice Pillow's MAX_IMAGE_PIXELS 89478485) is refused by Pillow before
decoding with its DecompressionBombError message."""

import os
import struct
import zlib

import pytest

from odd_files import KINDS, make_odd, no_hang

from transformer import FormatError, TransformerIOError
from transformer.images import ViTImageProcessor


@pytest.fixture(autouse=True)
def _no_hang():
    with no_hang(20):
        yield


@pytest.mark.parametrize("kind", KINDS)
def test_image_path_not_a_regular_file(tmp_path, kind):
    p = tmp_path / "image.png"
    make_odd(p, kind)
    with pytest.raises(OSError, match=kind):
        ViTImageProcessor()(p)


@pytest.mark.parametrize("kind", KINDS)
def test_preprocessor_config_not_a_regular_file(tmp_path, kind):
    make_odd(tmp_path / "preprocessor_config.json", kind)
    with pytest.raises(OSError, match=kind):
        ViTImageProcessor.from_pretrained(tmp_path)


def test_preprocessor_config_over_cap_or_not_utf8(tmp_path):
    p = tmp_path / "preprocessor_config.json"
    with open(p, "wb") as f:
        f.truncate((16 << 20) + 1)        # sparse: nothing written
    # as the library: an I/O error (TFM_ERR_IO), a format error naming the
    # byte (transformer/_files.py, the bindings' one door)
    with pytest.raises(TransformerIOError, match="larger than 16777216 bytes"):
        ViTImageProcessor.from_pretrained(tmp_path)
    p.write_bytes(b'{"size": 4, "x": "\xff"}')
    with pytest.raises(FormatError, match="not valid UTF-8 at byte 18"):
        ViTImageProcessor.from_pretrained(tmp_path)
    p.write_bytes(b'{"size": 4}')
    assert ViTImageProcessor.from_pretrained(tmp_path).size == {
        "height": 4, "width": 4}


def _png(w, h, rows):
    def chunk(kind, data):
        c = kind + data
        return (struct.pack(">I", len(data)) + c
                + struct.pack(">I", zlib.crc32(c)))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_decompression_bomb_refused_before_decoding(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    p = tmp_path / "bomb.png"
    p.write_bytes(_png(20000, 20000, b"\0" * 61))
    with pytest.raises(Image.DecompressionBombError,
                       match=r"Image size \(400000000 pixels\) exceeds limit "
                             r"of 178956970 pixels, could be decompression "
                             r"bomb DOS attack\."):
        ViTImageProcessor()(p)
    # a small one through a symlink decodes: red, blue -> 2 x 2 resized
    (tmp_path / "small.png").write_bytes(_png(2, 1, b"\0\xff\0\0\0\0\xff"))
    os.symlink("small.png", tmp_path / "link.png")
    x = ViTImageProcessor(size=2, do_normalize=False)(tmp_path / "link.png")
    assert x.shape == (1, 3, 2, 2)
