#!/usr/bin/env bash
# The CLIs' file door and decompression-bomb check (issue 44, kinds 4, 5):
#  - images whose header claims more than twice Pillow's MAX_IMAGE_PIXELS
#    (int(1024 * 1024 * 1024 // 4 // 3) = 89478485; 2x = 178956970) are
#    refused before any pixel is decoded, with Pillow's message: a PNG and
#    a JPEG of 20000 x 20000 (400000000 pixels) and a JPEG of 65500 x
#    65500 (4290250000 pixels), each under 200 bytes, written here;
#  - a FIFO, a symlink to /dev/zero and a directory given as the image (or
#    as the batch file / prompt file of transformer-generate) are refused
#    at once, naming what they are; a small real PNG through a symlink
#    still decodes.
# Each program runs under `timeout 20`: a blocked open is a failure.
#   test_image_files.sh IMAGE_RESIZE_PROBE [TRANSFORMER_GENERATE]
set -euo pipefail
probe="$1"
gen="${2:-}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
command -v python3 > /dev/null || { echo "no python3: skipped"; exit 77; }
python3 - "$dir" <<'PY'
import struct, sys, zlib
d = sys.argv[1]
def chunk(kind, data):
    c = kind + data
    return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c))
def png(w, h, rows):
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
# a 20000 x 20000 header, one row of data: a bomb
open(d + "/bomb.png", "wb").write(png(20000, 20000, b"\0" * 61))
# 2 x 1, red and blue (filter byte 0 before the row)
open(d + "/small.png", "wb").write(png(2, 1, b"\0\xff\0\0\0\0\xff"))
def jpeg(w, h):
    dqt = b"\xff\xdb" + struct.pack(">H", 67) + b"\0" + b"\1" * 64
    sof = (b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, h, w, 3) +
           b"\1\x11\0\2\x11\0\3\x11\0")
    sos = b"\xff\xda" + struct.pack(">HB", 12, 3) + b"\1\0\2\0\3\0\0\x3f\0"
    return b"\xff\xd8" + dqt + sof + sos + b"\0" * 16 + b"\xff\xd9"
open(d + "/bomb.jpg", "wb").write(jpeg(20000, 20000))
open(d + "/bomb65500.jpg", "wb").write(jpeg(65500, 65500))
PY
mkfifo "$dir/fifo.png"
ln -s /dev/zero "$dir/zero.png"
mkdir "$dir/dir.png"
ln -s small.png "$dir/link.png"

# refused FILE WORDS CMD...: CMD fails within 20 s, stderr holding WORDS
refused() {
  local words="$1"; shift
  local rc=0
  timeout 20 "$@" > /dev/null 2> "$dir/err" || rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    echo "not refused (rc $rc): $*"; cat "$dir/err"; exit 1
  fi
  grep -qF -- "$words" "$dir/err" ||
    { echo "message lacks '$words': $*"; cat "$dir/err"; exit 1; }
}
limit="exceeds limit of 178956970 pixels, could be decompression bomb DOS attack."
refused "Image size (400000000 pixels) $limit" "$probe" "$dir/bomb.png" 2 2
refused "Image size (400000000 pixels) $limit" "$probe" "$dir/bomb.jpg" 2 2
refused "Image size (4290250000 pixels) $limit" \
  "$probe" "$dir/bomb65500.jpg" 2 2
refused "a FIFO" "$probe" "$dir/fifo.png" 2 2
refused "a character device" "$probe" "$dir/zero.png" 2 2
refused "a directory" "$probe" "$dir/dir.png" 2 2
# a symlink to a real image is read: 2 x 1 resized to 2 x 1, 6 bytes
out=$(timeout 20 "$probe" "$dir/link.png" 2 1 | od -An -tu1 | tr -s ' ')
[ "$out" = " 255 0 0 0 0 255" ] || { echo "small.png decoded as '$out'"; exit 1; }
if [ -n "$gen" ]; then
  refused "a FIFO" "$gen" --batch-file "$dir/fifo.png"
  refused "a character device" "$gen" --batch-file "$dir/zero.png"
  refused "a directory" "$gen" --batch-file "$dir/dir.png"
fi
echo "ok: image files"
