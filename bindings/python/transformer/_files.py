"""The one door through which the Python layer opens a file to read it, as
the library's (src/base/file.c, src/base/json_check.c; docs/USAGE.md,
"Files that are read").

``open_regular(path, cap)`` opens without blocking (O_NONBLOCK, cleared
once open, so a FIFO never blocks the open) and with O_CLOEXEC, then
fstat's: anything but a regular file after following links (a FIFO, a
directory, a device such as /dev/zero, a socket) is refused with
TransformerIOError (an OSError) naming the path and what it is; a file
larger than cap bytes likewise.

``read_json(path, cap)`` reads the whole file through that door (at most
cap bytes, checked against st_size and against the bytes read: a file can
grow) and parses it as the library's JSON readers do, refusing with
FormatError (a ValueError) naming the path:
  - bytes that are not valid UTF-8, named by byte offset;
  - malformed JSON, or bytes after the value;
  - ``NaN``, ``Infinity`` and numbers too large for a double (Python's
    json takes them, JSON and the library do not);
  - a key twice in one object, at any depth (readers disagree on which
    value counts: Python's json keeps the last, cJSON the first);
  - a NUL in a key or string value (the C string would end there), or an
    escaped lone UTF-16 surrogate (not a character);
  - a value other than an object.

Nothing else in the package opens a file by its path to read it
(tests/test_binding_files.py checks so)."""

import json
import math
import os
import stat

from ._errors import FormatError, TransformerIOError

__all__ = ["MAX_CONFIG_BYTES", "MAX_TOKENIZER_BYTES", "open_regular",
           "present", "read_bytes", "read_json"]

# The caps of whole-file reads, by kind of file (src/base/file.h): the
# small JSON files of a checkpoint directory (config.json,
# generation_config.json, preprocessor_config.json, ...): 16 MiB;
# tokenizer files: 256 MiB.
MAX_CONFIG_BYTES = 16 << 20
MAX_TOKENIZER_BYTES = 256 << 20


def _kind_of(mode):
    """What a file of mode is, for the messages (file.c's kind_of)."""
    return ("a directory" if stat.S_ISDIR(mode) else
            "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a character device" if stat.S_ISCHR(mode) else
            "a block device" if stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else
            "not a regular file")


def present(path):
    """Whether something other than a directory is at path, after
    following links (src/tokenizers/tokenizer_files.c's is_file), without
    opening it: a FIFO or a device named like a file counts, so that
    reading it refuses it by name rather than the file being taken for
    missing."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _too_large(path, cap):
    return TransformerIOError(f"{path}: larger than {cap} bytes, the limit "
                              f"for this kind of file")


def open_regular(path, cap=None):
    """path opened for binary reading through the door above (the caller
    closes it).  TransformerIOError when it is not a regular file after
    following links or is larger than cap bytes (cap None: no limit, for
    files that are not read whole); os.open's OSError (naming path) when
    it cannot be opened."""
    path = os.fspath(path)
    # A path that cannot be opened raises os.open's own OSError
    # (FileNotFoundError, PermissionError ...), which names it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TransformerIOError(f"{path} is {_kind_of(st.st_mode)}, "
                                     f"not a regular file: refused")
        if cap is not None and st.st_size > cap:
            raise _too_large(path, cap)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_gguf(path):
    """Whether path is a regular file that begins with GGUF's magic
    "GGUF" (as the library tells a GGUF file from a model file)."""
    try:
        with open_regular(path) as f:
            return f.read(4) == b"GGUF"
    except (OSError, ValueError):
        return False


def read_bytes(path, cap):
    """The whole file at path (open_regular), at most cap bytes."""
    path = os.fspath(path)
    with open_regular(path, cap) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise _too_large(path, cap)
    return data


def _check_strings(path, key, value):
    """FormatError when string value (or a string in list value), the
    member key's, holds a NUL or a lone surrogate."""
    if isinstance(value, list):
        for v in value:
            _check_strings(path, key, v)
    elif isinstance(value, str):
        if "\0" in value:
            raise FormatError(f'{path}: the value of "{key[:100]}" holds an '
                              f'escaped NUL (\\u0000): it would be cut there')
        if not _encodable(value):
            raise FormatError(f'{path}: the value of "{key[:100]}" holds an '
                              f'escaped lone UTF-16 surrogate (not a '
                              f'character)')


def _encodable(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def read_json(path, cap=MAX_CONFIG_BYTES):
    """The JSON object (a dict) in the file at path, read and checked as
    described above: TransformerIOError or FormatError naming path."""
    path = os.fspath(path)
    data = read_bytes(path, cap)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{path}: not valid UTF-8 at byte {e.start} "
                          f"({e.reason})") from None

    def pairs(items):
        seen = {}
        for k, v in items:
            if "\0" in k:   # named as C sees it: cut at the NUL
                raise FormatError(f'{path}: the name or key '
                                  f'"{k.split(chr(0))[0][:100]}" holds '
                                  f'an escaped NUL (\\u0000): it would be cut '
                                  f'there')
            if not _encodable(k):
                raise FormatError(f"{path}: a key holds an escaped lone "
                                  f"UTF-16 surrogate (not a character)")
            if k in seen:
                raise FormatError(f'{path}: the key "{k[:100]}" appears twice '
                                  f'in one object (JSON readers disagree on '
                                  f'which value counts)')
            _check_strings(path, k, v)
            seen[k] = v
        return seen

    def constant(name):
        raise FormatError(f"{path}: not valid JSON ({name} is not a JSON "
                          f"value)")

    def number(s):
        x = float(s)
        if not math.isfinite(x):
            raise FormatError(f"{path}: the number {s[:40]} is too large "
                              f"for a double")
        return x

    try:
        value = json.loads(text, object_pairs_hook=pairs,
                           parse_constant=constant, parse_float=number)
    except FormatError:
        raise
    except json.JSONDecodeError as e:
        at = len(text[:e.pos].encode("utf-8"))
        raise FormatError(f"{path}: not valid JSON ({e.msg} near byte "
                          f"{at})") from None
    except ValueError as e:   # an integer of too many digits
        raise FormatError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise FormatError(f"{path}: not valid JSON (nested too deeply)") \
            from None
    if not isinstance(value, dict):
        raise FormatError(f"{path}: not a JSON object")
    return value
