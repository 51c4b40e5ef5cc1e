"""Worker of test_distributed.py's test_ranks_that_disagree_all_raise: under
``mpirun -np 2``, each case gives the two ranks modules (or arguments) that
differ, calls the collective, and prints one line per rank and case:
"case NAME rank R: TYPE: MESSAGE" (or "... ok").  Every rank must raise,
none may hang or crash, and the gradients and parameters stay as they were;
the ranks stay in step for the next case (every rank raised)."""

import numpy as np
from mpi4py import MPI

import transformer
import transformer.distributed as dist

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
transformer.set_num_threads(1)
log = []        # this rank's lines, printed by rank 0 at the end


def say(line):
    log.append(line)


def model(d_ff=64, n_layers=2, train=True, seed=5):
    transformer.manual_seed(seed)
    m = transformer.Model(dict(architecture="decoder_only", vocab_size=23,
                               d_model=32, n_heads=4, d_ff=d_ff,
                               n_layers=n_layers, context_length=16))
    if train:
        m.train()
        ids = np.arange(8, dtype=np.int32).reshape(1, 8) % 23
        m.loss(ids, (ids + 1) % 23)
        m.backward()
    return m


def run(name, fn, m):
    before = {k: v.copy() for k, v in m.state_dict().items()}
    grads = {k: m.grad(k).copy() for k in before} if m.training else {}
    try:
        fn()
        say(f"case {name} rank {rank}: ok")
    except Exception as e:
        say(f"case {name} rank {rank}: {type(e).__name__}: {e}")
    after = m.state_dict()
    same = all(np.array_equal(before[k], after[k]) for k in before) and all(
        np.array_equal(grads[k], m.grad(k)) for k in grads)
    say(f"case {name} rank {rank}: unchanged {same}")
    comm.Barrier()


m = model(d_ff=64 if rank == 0 else 32)
run("shapes", lambda: dist.all_reduce_gradients(m, comm), m)
m = model(n_layers=2 if rank == 0 else 3)
run("count", lambda: dist.all_reduce_gradients(m, comm), m)
m = model(train=rank == 0)
run("untrained", lambda: dist.all_reduce_gradients(m, comm), m)
m = model()
run("average", lambda: dist.all_reduce_gradients(m, comm, average=rank == 0), m)
m = model()
if rank == 1:
    m.close()
run_closed = (lambda: dist.all_reduce_gradients(m, comm))
try:
    run_closed()
    say(f"case closed rank {rank}: ok")
except Exception as e:
    say(f"case closed rank {rank}: {type(e).__name__}: {e}")
comm.Barrier()
m = model(d_ff=64 if rank == 0 else 32, train=False)
run("broadcast", lambda: dist.broadcast_parameters(m, comm), m)
m = model(train=False)
run("root", lambda: dist.broadcast_parameters(m, comm, root=rank), m)
# the root's values refused by load_state_dict (NaN): checked on every
# rank before any writes, every rank raises
m = model(train=False, seed=5 + rank)


def nan_broadcast(m):
    if rank == 0:       # the state the root sends, not its parameters
        nan_state = {k: np.full_like(v, np.nan) if k == "norm.weight" else v
                     for k, v in m.state_dict().items()}
        m.state_dict = lambda: nan_state
    try:
        dist.broadcast_parameters(m, comm)
    finally:
        m.__dict__.pop("state_dict", None)


run("broadcast_nan", lambda: nan_broadcast(m), m)
# a load that fails on rank 1 after writing: every rank raises, rank 1
# puts its parameters back
m = model(train=False, seed=5 + rank)
if rank == 1:
    real_load = m.load_state_dict

    def failing_load(state, _n=[0]):
        real_load(state)
        _n[0] += 1
        if _n[0] == 1:          # the broadcast's; not the restore
            raise RuntimeError("injected failure after the write")
    m.load_state_dict = failing_load
run("broadcast_late", lambda: dist.broadcast_parameters(m, comm), m)
# and agreeing ranks still work
m = model()
run("same", lambda: dist.all_reduce_gradients(m, comm), m)
m = model(train=False)
run("same_broadcast", lambda: dist.broadcast_parameters(m, comm), m)
say(f"rank {rank}: done")
everyone = comm.gather(log, root=0)
if rank == 0:
    print("\n".join(ln for lines in everyone for ln in lines), flush=True)
