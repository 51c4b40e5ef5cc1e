"""Data-parallel training over MPI (transformer.distributed): 2 ranks, each
with half of every batch, end with the parameters of one process trained on
the whole batches, within 1e-5 relative (to each tensor's largest
magnitude), after 20 SGD steps with momentum (distributed_worker.py says
why not Adam).  Needs OpenMPI's mpirun and mpi4py
(Debian: openmpi-bin, python3-mpi4py; tools/install-deps.sh)."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("mpi4py")
MPIRUN = shutil.which("mpirun")
WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")


def _env():
    env = dict(os.environ)
    # CI runs as root; OpenMPI refuses that without these two
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    return env


@pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) missing")
def test_two_ranks_equal_one_process(tmp_path):
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    subprocess.run([sys.executable, WORKER, str(one)], check=True, env=_env(),
                   timeout=300)
    out = subprocess.run([MPIRUN, "-np", "2", sys.executable, WORKER,
                          str(two)], check=True, env=_env(), timeout=300,
                         stdout=subprocess.PIPE, text=True).stdout
    assert "ranks 2" in out
    a, b = np.load(one), np.load(two)
    assert sorted(a.files) == sorted(b.files)
    moved = 0
    for name in a.files:
        scale = max(np.max(np.abs(a[name])), 1e-30)
        err = np.max(np.abs(a[name].astype(np.float64) - b[name]))
        assert err <= 1e-5 * scale, f"{name}: {err / scale:.3g}"
    # and training moved the weights (the comparison is not of two copies
    # of the initialisation)
    import transformer
    transformer.manual_seed(5)
    init = transformer.Model(dict(architecture="decoder_only", vocab_size=23,
                                  d_model=32, n_heads=4, d_ff=64, n_layers=2,
                                  context_length=16, norm_first=True,
                                  activation="gelu",
                                  tied_embeddings=True)).state_dict()
    for name in a.files:
        moved += not np.array_equal(init[name], a[name])
    assert moved == len(a.files)


def test_shard_and_errors():
    mpi = pytest.importorskip("mpi4py.MPI")
    import transformer
    import transformer.distributed as dist
    comm = mpi.COMM_WORLD     # one process: the shard is the whole batch
    x = np.arange(12).reshape(6, 2)
    assert np.array_equal(dist.shard(x, comm), x)
    m = transformer.Linear(3, 2)
    with pytest.raises(transformer.InvalidArgumentError):
        dist.all_reduce_gradients(m, comm)     # before train()
    m.train()
    y = m(np.ones((4, 3), np.float32))
    m.backward(np.ones_like(y))
    before = m.grad("weight")
    dist.all_reduce_gradients(m, comm)         # one rank: unchanged
    assert np.array_equal(m.grad("weight"), before)


DISAGREE = os.path.join(os.path.dirname(__file__),
                        "distributed_disagree_worker.py")


@pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) missing")
def test_ranks_that_disagree_all_raise():
    """Issue 44 kind 2: models of different shapes on different ranks made
    all_reduce_gradients call Allreduce with mismatched counts (heap
    corruption); a rank failing alone (no gradients, closed module) left
    the other waiting in the collective.  Now every rank raises, naming
    the first difference and its rank, with nothing changed, and the ranks
    stay in step (the worker runs every case in one mpirun)."""
    out = subprocess.run([MPIRUN, "-np", "2", sys.executable, DISAGREE],
                         env=_env(), timeout=120, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()

    def said(case, r):
        got = [ln.split(": ", 1)[1] for ln in lines
               if ln.startswith(f"case {case} rank {r}: ")]
        assert got, f"no line for case {case} rank {r}:\n{out.stdout}"
        return got

    first = {
        # rank 1's linear1 is 32 wide (d_ff): the first C parameter that
        # differs, in the C table's order
        "shapes": "parameter 6: 'layers.0.linear1.weight' of shape (64, 32) "
                  "(float32) on rank 0, 'layers.0.linear1.weight' of shape "
                  "(32, 32) (float32) on rank 1",
        # rank 1's third layer where rank 0 has its final norm
        "count": "'norm.weight' of shape (32,) (float32) on rank 0, "
                 "'layers.2.self_attn.in_proj_weight' of shape (96, 32) "
                 "(float32) on rank 1",
        "untrained": "rank 1 failed (InvalidArgumentError: parameter ",
        "average": "arguments average=True on rank 0, average=False on "
                   "rank 1",
        "broadcast": "'layers.0.linear1.weight' of shape (32, 32)",
        "root": "arguments root=0 on rank 0, root=1 on rank 1",
    }
    for case, words in first.items():
        for r in (0, 1):
            msg, unchanged = said(case, r)
            assert msg.startswith("InvalidArgumentError: "), (case, r, msg)
            if not (case == "untrained" and r == 1):   # its own error
                assert words in msg, (case, r, msg)
            assert unchanged == "unchanged True", (case, r)
    assert said("closed", 0) == ["InvalidArgumentError: all_reduce_gradients:"
                                 " rank 1 failed (ClosedError: Model is "
                                 "closed); every rank raises"]
    assert said("closed", 1) == ["ClosedError: Model is closed"]
    # issue 44 follow-up: a broadcast the non-root rank refused (NaN) or
    # failed to load raised on that rank only
    for r in (0, 1):
        msg, unchanged = said("broadcast_nan", r)
        assert msg == ("NonFiniteError: broadcast_parameters: rank 0's "
                       "parameters hold NaN or infinity ('norm.weight'); no "
                       "rank changed"), (r, msg)
        assert unchanged == "unchanged True", r
        assert said("broadcast_late", r)[1] == "unchanged True", r
    assert said("broadcast_late", 0)[0] == (
        "InvalidArgumentError: broadcast_parameters: rank 1 failed "
        "(RuntimeError: injected failure after the write); every rank "
        "raises, no rank changed")
    assert said("broadcast_late", 1)[0] == ("RuntimeError: injected failure "
                                            "after the write")
    for r in (0, 1):   # equal gradients on both ranks: their mean is them
        assert said("same", r) == ["ok", "unchanged True"]
        assert said("same_broadcast", r) == ["ok", "unchanged True"]
        assert f"rank {r}: done" in lines
