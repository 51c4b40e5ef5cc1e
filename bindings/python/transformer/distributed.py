"""Data-parallel training over MPI (mpi4py, Debian's python3-mpi4py on
OpenMPI), as torch.nn.parallel.DistributedDataParallel does it: every rank
holds the same model, computes the gradients of its own shard of the batch,
the gradients are averaged across the ranks (one all-reduce), and every
rank applies the same optimizer step, so the models stay equal.

    from mpi4py import MPI
    import transformer, transformer.distributed as dist

    comm = MPI.COMM_WORLD
    model = transformer.load_model(...)          # or any Module
    dist.broadcast_parameters(model, comm)       # rank 0's weights everywhere
    model.train()
    opt = transformer.optim.AdamW(model, lr=3e-4)
    for ids, targets in batches:                 # the whole batch, [B, L]
        mine = dist.shard(ids, comm), dist.shard(targets, comm)
        opt.zero_grad()
        model.loss(*mine)
        model.backward()
        dist.all_reduce_gradients(model, comm)   # the mean over the ranks
        opt.step()

Run it with ``mpirun -np 2 /usr/bin/python3 train.py`` on one machine, or
across machines with ``mpirun --hostfile hosts -np 8 ...`` (docs/TRAINING.md).
With equal shards and a mean loss, the mean of the ranks' gradients is the
gradient of the whole batch, so N ranks train as one process on the whole
batch does (the sums differ only in rounding: test_distributed.py checks
1e-5 after 20 SGD steps).
"""

import numpy as np

from . import _lowlevel as _ll

__all__ = ["all_reduce_gradients", "broadcast_parameters", "shard"]


def _world(comm):
    if comm is not None:
        return comm
    from mpi4py import MPI   # imported only when used
    return MPI.COMM_WORLD


def _parameters(module):
    """[(module part, C name, C shape)] of every C parameter of module."""
    out = []
    for _, mod in module._components():
        with mod._use() as ptr:
            for i in range(_ll.tfm_module_parameter_count(ptr)):
                name = _ll.tfm_module_parameter_name(ptr, i)
                out.append((mod, name,
                            tuple(_ll.tfm_module_parameter_shape(ptr, name))))
    return out


def all_reduce_gradients(module, comm=None, average=True):
    """Sums every parameter gradient of ``module`` over the ranks of
    ``comm`` (an mpi4py communicator; default MPI.COMM_WORLD) in one
    all-reduce, in float64, and divides by the number of ranks when
    ``average`` (DistributedDataParallel's mean).  Every rank must call it
    with the same module structure.  (Names that share one gradient, as
    tied embeddings, are each given the same reduced value.)  Raises
    InvalidArgumentError before ``module.train()``."""
    comm = _world(comm)
    layout = _parameters(module)
    parts = []
    for mod, name, shape in layout:
        g = np.empty(shape, np.float32)
        mod._call(_ll.tfm_module_get_grad, name, g)
        parts.append(g.reshape(-1))
    if not parts:
        return
    send = np.concatenate(parts).astype(np.float64)
    recv = np.empty_like(send)
    comm.Allreduce(send, recv)
    if average:
        recv /= comm.Get_size()
    offset = 0
    for (mod, name, shape), g in zip(layout, parts):
        value = recv[offset:offset + g.size].astype(np.float32).reshape(shape)
        mod._call(_ll.tfm_module_set_grad, name, value)
        offset += g.size


def broadcast_parameters(module, comm=None, root=0):
    """Copies rank ``root``'s parameters into every rank's ``module``
    (torch.distributed's broadcast of the initial state), so that
    data-parallel training starts from one set of weights."""
    comm = _world(comm)
    state = module.state_dict() if comm.Get_rank() == root else None
    state = comm.bcast(state, root=root)
    if comm.Get_rank() != root:
        module.load_state_dict(state)


def shard(batch, comm=None):
    """This rank's equal share of ``batch`` along its first axis (rank r of
    R gets rows [r B / R, (r + 1) B / R)); B must be a multiple of R so that
    the mean of the ranks' mean losses is the whole batch's mean."""
    comm = _world(comm)
    batch = np.asarray(batch)
    size, rank = comm.Get_size(), comm.Get_rank()
    if batch.shape[0] % size != 0:
        raise ValueError(f"a batch of {batch.shape[0]} rows does not split "
                         f"evenly over {size} ranks")
    n = batch.shape[0] // size
    return batch[rank * n:(rank + 1) * n]
