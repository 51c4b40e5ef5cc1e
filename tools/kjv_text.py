#!/usr/bin/python3
"""Training text for the default libtransformer model: the King James Bible.

The text comes from Debian's ``bible-kjv`` program (data in ``bible-kjv-text``,
public domain).  ``bible -f 'Gen1:1-Rev22:21'`` prints one verse per line, e.g.

    Ge1:1 In the beginning God created the heaven and the earth.

We strip the leading verse reference (the first space-separated token) and
trailing whitespace, keep everything else verbatim, and join the verses with
"\\n" (no trailing newline).  The output is fully deterministic.

Split: the last 5% of the *characters* (``VAL_FRACTION``) are held out for
validation; the cut falls inside Colossians 1:11, so validation is the rest of
Colossians through Revelation 22:21 (206,892 of 4,137,848 characters).

Usage as a script:  /usr/bin/python3 tools/kjv_text.py [OUT.txt]
writes the full text (or prints statistics if no file is given).
"""

import argparse
import subprocess
import sys

BIBLE_RANGE = "Gen1:1-Rev22:21"
EXPECTED_VERSES = 31102  # verses in the KJV (Protestant canon, 66 books)
VAL_FRACTION = 0.05


def kjv_verses(bible="bible"):
    """Return the list of verse texts (references stripped), in canonical order."""
    out = subprocess.run([bible, "-f", BIBLE_RANGE], check=True,
                         stdout=subprocess.PIPE, env={"PATH": "/usr/bin:/bin",
                                                      "LC_ALL": "C"}).stdout
    text = out.decode("ascii")
    verses = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        ref, _, body = line.partition(" ")
        if ":" not in ref:
            raise ValueError("unexpected line from bible: %r" % line[:80])
        verses.append(body.rstrip())
    if len(verses) != EXPECTED_VERSES:
        raise ValueError("expected %d verses, got %d" % (EXPECTED_VERSES, len(verses)))
    if not verses[-1].startswith("The grace of our Lord Jesus Christ"):
        raise ValueError("text does not end with Revelation 22:21")
    return verses


def kjv_text():
    """The whole training corpus as one string (verses joined by '\\n')."""
    return "\n".join(kjv_verses())


def split_text(text, val_fraction=VAL_FRACTION):
    """(train, val): val is the last ``val_fraction`` of the characters."""
    n_val = int(round(len(text) * val_fraction))
    cut = len(text) - n_val
    return text[:cut], text[cut:]


def vocabulary(text):
    """Sorted list of the unique characters of the text; id = index."""
    return sorted(set(text))


def main(argv):
    ap = argparse.ArgumentParser(
        prog="kjv_text.py",
        description="Write the King James training text (Debian's bible-kjv) "
                    "to OUT, or print its statistics only.")
    ap.add_argument("out", nargs="?", metavar="OUT.txt",
                    help="file to write the text to (omit: statistics only)")
    a = ap.parse_args(argv[1:])
    text = kjv_text()
    train, val = split_text(text)
    vocab = vocabulary(text)
    if a.out is not None:
        with open(a.out, "w", encoding="ascii", newline="\n") as f:
            f.write(text)
    print("chars %d  train %d  val %d  verses %d  vocab %d"
          % (len(text), len(train), len(val), text.count("\n") + 1, len(vocab)),
          file=sys.stderr)
    print("vocab: %r" % "".join(vocab), file=sys.stderr)
    print("val starts: %r" % val[:80], file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
