"""close() while another thread is inside a call on the same object
(issue 13, fault 2).

The wrappers read the handle and then ran Python code (argument
conversion) before the C call, so a close() from another thread in between
freed the handle the C call then used (ASan: heap-use-after-free in the
module check).  Now every call holds the handle in use for its whole span
(_core._Handle.use) and close() waits for the calls in progress: a call
either completes, with the right result, or raises ClosedError.

The use-after-free is detected without ASan: the low-level free functions
and the calls under test are wrapped (the package looks them up in
_lowlevel at each call) to record a call made with a pointer already
freed.  sys.setswitchinterval(1e-6) makes the threads switch between
nearly every bytecode, so the window between reading the handle and the C
call is hit within a few trials.
"""

import ast
import pathlib
import sys
import threading
import time

import numpy as np
import pytest

import transformer
from transformer import _lowlevel as ll

TRIALS = 40


@pytest.fixture
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


class FreedWatch:
    """Wraps free functions, constructors and calls of _lowlevel: a call
    whose first argument (a handle), or the handle that argument was made
    from (a generator's model), was freed before it is recorded.  A
    constructor's result is no longer "freed" (addresses are reused)."""

    def __init__(self, monkeypatch, frees, calls, creates=()):
        self.freed = set()
        self.made_from = {}
        self.bad = []
        for name in frees:
            self._wrap_free(monkeypatch, name)
        for name in calls:
            self._wrap_call(monkeypatch, name)
        for name in creates:
            self._wrap_create(monkeypatch, name)

    def _wrap_free(self, monkeypatch, name):
        real = getattr(ll, name)

        def free(ptr):
            self.freed.add(int(ptr))
            return real(ptr)
        monkeypatch.setattr(ll, name, free)

    def _check(self, name, ptr):
        p = int(ptr)
        if p in self.freed or self.made_from.get(p) in self.freed:
            self.bad.append(name)
            raise AssertionError(f"{name} called on a freed handle")

    def _wrap_call(self, monkeypatch, name):
        real = getattr(ll, name)

        def call(ptr, *args):
            self._check(name, ptr)
            return real(ptr, *args)
        monkeypatch.setattr(ll, name, call)

    def _wrap_create(self, monkeypatch, name):
        real = getattr(ll, name)

        def create(ptr, *args):
            self._check(name, ptr)
            made = real(ptr, *args)
            self.freed.discard(int(made))
            self.made_from[int(made)] = int(ptr)
            return made
        monkeypatch.setattr(ll, name, create)


def hammer(watch, make, call, check, close, trials):
    """Per trial: obj = make(); a thread runs call(obj) in a loop until it
    raises ClosedError, while this thread runs close(obj) after a short
    delay.  Every result must pass check(); any exception but ClosedError
    fails, and so does a call on a handle freed during the trial.  Returns
    how many calls completed in all."""
    done = 0
    for trial in range(trials):
        obj = make()
        watch.freed.clear()      # addresses of earlier trials are reused
        errors = []
        completed = [0]
        started = threading.Event()

        def loop():
            started.set()
            try:
                while True:
                    check(call(obj))
                    completed[0] += 1
            except transformer.ClosedError:
                pass
            except BaseException as e:          # noqa: B902
                errors.append(e)

        t = threading.Thread(target=loop)
        t.start()
        started.wait()
        time.sleep(0.0005 * (trial % 4))
        close(obj)
        t.join(30)
        assert not t.is_alive(), "the calling thread hangs after close()"
        if errors:
            raise errors[0]
        done += completed[0]
    assert watch.bad == [], f"{len(watch.bad)} calls on freed handles"
    return done


def test_mha_close_during_forward(monkeypatch, fast_switching):
    watch = FreedWatch(monkeypatch, ["tfm_module_free"], ["tfm_mha_forward"])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    proto = transformer.MultiheadAttention(8, 2, batch_first=True)
    state = {k: rng.standard_normal(v.shape).astype(np.float32)
             for k, v in proto.state_dict().items()}
    proto.load_state_dict(state)
    ref = proto(x, x, x)[0]

    def make():
        m = transformer.MultiheadAttention(8, 2, batch_first=True)
        m.load_state_dict(state)
        return m

    total = hammer(watch, make, lambda m: m(x, x, x)[0],
                   lambda out: np.testing.assert_array_equal(out, ref),
                   lambda m: m.close(), TRIALS)
    assert total > 0


def tiny_model(state=None):
    m = transformer.Model(architecture="decoder_only", vocab_size=11,
                          d_model=8, n_heads=2, d_ff=16, n_layers=1,
                          context_length=16)
    if state is None:
        rng = np.random.default_rng(2)
        state = {k: 0.5 * rng.standard_normal(v.shape).astype(np.float32)
                 for k, v in m.state_dict().items()}
    m.load_state_dict(state)
    return m


def test_model_close_during_generate_and_decode(monkeypatch,
                                                fast_switching):
    watch = FreedWatch(monkeypatch,
                       ["tfm_module_free", "tfm_kv_cache_free",
                        "tfm_generator_free"],
                       ["tfm_generator_next", "tfm_kv_cache_decode"],
                       ["tfmpy_generator_create"])
    ref_model = tiny_model()
    ref_gen = ref_model.generate([1, 2, 3], max_new_tokens=6, greedy=True)
    ref_logits = ref_model.kv_cache().decode([1, 2, 3])
    state = ref_model.state_dict()

    def same_ids(out):
        assert out == ref_gen

    hammer(watch, lambda: tiny_model(state),
           lambda m: m.generate([1, 2, 3], max_new_tokens=6, greedy=True),
           same_ids, lambda m: m.close(), TRIALS // 2)

    def make_cache():
        m = tiny_model(state)
        return m, m.kv_cache()

    def decode(mc):
        mc[1].reset()
        return mc[1].decode([1, 2, 3])

    def close_model(mc):
        mc[0].close()                # closes its cache too
        assert mc[1].closed

    hammer(watch, make_cache, decode,
           lambda out: np.testing.assert_array_equal(out, ref_logits),
           close_model, TRIALS // 2)


def test_close_waits_for_the_call_in_progress():
    """A call in progress holds the handle: close() from another thread
    returns only after it ends, and the handle is freed then."""
    m = transformer.MultiheadAttention(8, 2)
    base = transformer.live_handles("module")
    closed = threading.Event()
    entered = threading.Event()
    release = threading.Event()

    def closer():
        entered.wait()
        m.close()
        closed.set()

    t = threading.Thread(target=closer)
    t.start()
    with m._use() as ptr:
        entered.set()
        assert not closed.wait(0.2), "close() did not wait for the call"
        assert ll.tfm_module_parameter_count(ptr) == 4  # still valid
        release.set()
    t.join(10)
    assert closed.is_set()
    assert m.closed
    assert transformer.live_handles("module") == base - 1
    with pytest.raises(transformer.ClosedError):
        m(np.ones((1, 2, 8), np.float32), np.ones((1, 2, 8), np.float32),
          np.ones((1, 2, 8), np.float32))


def test_close_from_inside_own_call_frees_at_its_end():
    """close() from the thread that holds the handle in use does not wait
    for itself (no deadlock): the handle is freed when that use ends."""
    m = transformer.LayerNorm(4)
    base = transformer.live_handles("module")
    with m._use() as ptr:
        m.close()
        assert m.closed
        assert transformer.live_handles("module") == base   # not yet freed
        assert ll.tfm_module_parameter_count(ptr) == 2
    assert transformer.live_handles("module") == base - 1


def test_package_never_reads_raw_pointers():
    """Every call into C in the package goes through _use() / _call(): the
    raw _ptr accessor (no in-use count) is left to tests.  Allowed only in
    _core.py's _Handle and _Use (the pointer's owner) and the accessor."""
    pkg = pathlib.Path(transformer.__file__).parent
    offenders = []
    for path in sorted(pkg.glob("*.py")):
        if path.name == "_lowlevel.py":
            continue
        tree = ast.parse(path.read_text())
        allowed = set()
        for node in ast.walk(tree):
            if (isinstance(node, ast.ClassDef) and
                    node.name in ("_Handle", "_Use")) or (
                    isinstance(node, ast.FunctionDef) and node.name == "_ptr"):
                allowed.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "_ptr" and
                    id(node) not in allowed):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
