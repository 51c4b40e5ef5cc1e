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
