"""Files that are not regular files, for the tests of the file doors
(test_binding_files.py, test_image_files.py): what a hostile or careless
checkpoint directory can hold under a file's name, and a guard that turns
a read that blocks (a FIFO opened without O_NONBLOCK) into a failure."""

import contextlib
import os
import signal

# The words the library's door (src/base/file.c) and the Python layer's
# (transformer/_files.py) use for each kind.
KINDS = ["a FIFO", "a character device", "a directory"]


def make_odd(path, kind):
    """Something of kind (one of KINDS) at path: a FIFO, a symlink to
    /dev/zero (endless bytes), or a directory."""
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a character device":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)


@contextlib.contextmanager
def no_hang(seconds):
    """Raises TimeoutError in the body when it runs past seconds (a read
    that blocked), instead of holding the suite."""
    def hung(*_):
        raise TimeoutError("a read blocked")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
