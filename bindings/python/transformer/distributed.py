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

import hashlib

import numpy as np

from . import _lowlevel as _ll
from ._errors import InvalidArgumentError, NonFiniteError

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


def _describe(layout):
    """The readable layout every rank must share: [(name, shape, dtype)]
    (the C parameters are float32; the name is the part's C name, unique
    within a part, with the part's index)."""
    parts = {}
    out = []
    for mod, name, shape in layout:
        k = parts.setdefault(id(mod), len(parts))
        out.append((f"{name}" if k == 0 else f"[part {k}] {name}",
                    tuple(int(d) for d in shape), "float32"))
    return out


def _first_difference(a, b):
    """Words for the first difference of descriptions a (rank 0's) and b:
    (arguments, [(name, shape, dtype)])."""
    if a[0] != b[0]:
        return f"arguments {a[0]} on rank 0, {b[0]} on rank {{r}}"
    a, b = a[1], b[1]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return (f"parameter {i}: {x[0]!r} of shape {x[1]} ({x[2]}) on "
                    f"rank 0, {y[0]!r} of shape {y[1]} ({y[2]}) on rank {{r}}")
    if len(a) > len(b):
        return (f"rank 0 has {len(a)} parameters, rank {{r}} {len(b)} (the "
                f"first missing on rank {{r}}: {a[len(b)][0]!r})")
    return (f"rank 0 has {len(a)} parameters, rank {{r}} {len(b)} (the "
            f"first missing on rank 0: {b[len(a)][0]!r})")


def _agree(comm, what, local):
    """Makes every rank of comm agree before a collective, so that a rank
    that differs (another parameter layout, other arguments) or failed on
    its own (a closed module, no gradients) makes every rank raise, never a
    collective with mismatched counts (heap corruption) or one that some
    ranks never join (a hang).  local() returns (description, value) or
    raises; the descriptions (picklable) must be equal on every rank.
    Returns this rank's value.  Two small collectives when all agree (an
    allgather of a digest and of the errors; the descriptions themselves
    travel only when they differ)."""
    error = None
    try:
        desc, value = local()
        digest = hashlib.sha256(repr(desc).encode()).hexdigest()
    except Exception as e:           # raised on every rank below
        error, desc, value, digest = e, None, None, None
    everyone = comm.allgather((digest, None if error is None
                               else f"{type(error).__name__}: {error}"))
    failed = [(r, msg) for r, (_, msg) in enumerate(everyone) if msg]
    if failed:
        if error is not None:
            raise error
        r, msg = failed[0]
        raise InvalidArgumentError(f"{what}: rank {r} failed ({msg}); "
                                   "every rank raises")
    if len({d for d, _ in everyone}) == 1:
        return value
    # They differ: every rank takes the same path (it saw the same digests)
    descs = comm.allgather(desc)
    r = next(r for r, (d, _) in enumerate(everyone) if d != everyone[0][0])
    raise InvalidArgumentError(
        f"{what}: the ranks disagree on the parameter layout or the "
        f"arguments ({_first_difference(descs[0], descs[r]).format(r=r)}); "
        "every rank must call it with the same module structure")


def all_reduce_gradients(module, comm=None, average=True):
    """Sums every parameter gradient of ``module`` over the ranks of
    ``comm`` (an mpi4py communicator; default MPI.COMM_WORLD) in one
    all-reduce, in float64, and divides by the number of ranks when
    ``average`` (DistributedDataParallel's mean).  Every rank must call it
    with the same module structure and ``average``: the ranks first agree
    on the parameter layout (count, names, shapes, dtypes), and when one
    differs, or a rank fails on its own (InvalidArgumentError before
    ``module.train()``, ClosedError), every rank raises (naming the first
    difference and its rank) with its gradients unchanged.  A sum that is
    not finite raises NonFiniteError on every rank, the gradients
    unchanged.  (Names that share one gradient, as tied embeddings, are
    each given the same reduced value.)"""
    comm = _world(comm)

    def local():
        layout = _parameters(module)
        parts = []
        for mod, name, shape in layout:
            g = np.empty(shape, np.float32)
            mod._call(_ll.tfm_module_get_grad, name, g)
            parts.append(g.reshape(-1))
        desc = (f"average={bool(average)}", _describe(layout))
        return desc, (layout, parts)

    layout, parts = _agree(comm, "all_reduce_gradients", local)
    if not parts:
        return
    send = np.concatenate(parts).astype(np.float64)
    recv = np.empty_like(send)
    comm.Allreduce(send, recv)
    if average:
        recv /= comm.Get_size()
    reduced = recv.astype(np.float32)
    if not np.isfinite(reduced).all():  # the same on every rank
        raise NonFiniteError("all_reduce_gradients: the reduced gradients "
                             "hold NaN or infinity; unchanged")
    offset = 0
    for (mod, name, shape), g in zip(layout, parts):
        value = reduced[offset:offset + g.size].reshape(shape)
        mod._call(_ll.tfm_module_set_grad, name, value)
        offset += g.size


def broadcast_parameters(module, comm=None, root=0):
    """Copies rank ``root``'s parameters into every rank's ``module``
    (torch.distributed's broadcast of the initial state), so that
    data-parallel training starts from one set of weights.  The ranks first
    agree on the parameter layout and on ``root``: when they differ, or a
    rank fails on its own (a closed module), every rank raises
    InvalidArgumentError and no parameter changes.  The broadcast values
    are checked on every rank before any rank writes them (NaN or infinity
    on the root: NonFiniteError on every rank), and a load that fails on
    one rank all the same makes every rank raise, the ranks that loaded
    putting their parameters back."""
    comm = _world(comm)

    def local():
        desc = (f"root={int(root)}", _describe(_parameters(module)))
        return desc, None

    _agree(comm, "broadcast_parameters", local)
    state = module.state_dict() if comm.Get_rank() == root else None
    state = comm.bcast(state, root=root)

    def check():
        # what load_state_dict refuses, checked on every rank (the root
        # too: it holds the same values) before any rank writes
        bad = [k for k, v in state.items() if not np.isfinite(v).all()]
        if bad:
            raise NonFiniteError(
                f"broadcast_parameters: rank {root}'s parameters hold NaN "
                f"or infinity ({bad[0]!r}); no rank changed")
        return None, None

    _agree(comm, "broadcast_parameters", check)
    # a load that still fails on one rank: every rank raises, and the
    # ranks that had loaded put their parameters back
    before = error = None
    if comm.Get_rank() != root:
        try:
            before = {k: np.array(v, copy=True)     # not views
                      for k, v in module.state_dict().items()}
            module.load_state_dict(state)
        except Exception as e:
            error = e
    failed = comm.allgather(None if error is None
                            else f"{type(error).__name__}: {error}")
    bad = [(r, msg) for r, msg in enumerate(failed) if msg]
    if not bad:
        return
    if before is not None:      # the failing rank too: never half-loaded
        module.load_state_dict(before)
    if error is not None:
        raise error
    r, msg = bad[0]
    raise InvalidArgumentError(f"broadcast_parameters: rank {r} failed "
                               f"({msg}); every rank raises, no rank changed")


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
