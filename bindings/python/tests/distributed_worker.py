"""Worker of test_distributed.py: 20 SGD steps (momentum 0.9) of a small decoder-only
model on 20 fixed batches of 8 sequences.  Under mpirun each rank trains on
its shard of every batch and the gradients are averaged
(transformer.distributed); alone it trains on the whole batches.  Rank 0
writes the final weights to argv[1] (.npz) and the ranks' step times.

SGD, not Adam: Adam divides each step by sqrt(v), so a parameter whose
true gradient is zero (the key bias of attention: softmax ignores it) or
tiny moves by about lr on rounding noise alone, and the two runs' sums,
equal to 1e-7, would differ there by whole steps.  SGD's update is linear
in the gradient, so the comparison measures the reduction itself."""

import sys
import time

import numpy as np
from mpi4py import MPI

import transformer
import transformer.distributed as dist
from transformer.optim import SGD

comm = MPI.COMM_WORLD
transformer.set_num_threads(1)
transformer.manual_seed(5)
model = transformer.Model(dict(architecture="decoder_only", vocab_size=23,
                               d_model=32, n_heads=4, d_ff=64, n_layers=2,
                               context_length=16, norm_first=True,
                               activation="gelu", tied_embeddings=True))
if comm.Get_rank() == 1:
    # another rank's own initialisation: broadcast_parameters must replace it
    transformer.manual_seed(6)
    model.load_state_dict(transformer.Model(model.config).state_dict())
dist.broadcast_parameters(model, comm)
model.train()
opt = SGD(model, lr=0.1, momentum=0.9, weight_decay=0.01)
rng = np.random.default_rng(3)
t0 = time.perf_counter()
tokens = 0
for step in range(20):
    seq = rng.integers(0, 23, (8, 17)).astype(np.int32)
    ids, targets = seq[:, :-1].copy(), seq[:, 1:].astype(np.int64)
    if comm.Get_size() > 1:
        ids, targets = dist.shard(ids, comm), dist.shard(targets, comm)
    opt.zero_grad()
    model.loss(ids, targets)
    model.backward()
    if comm.Get_size() > 1:
        dist.all_reduce_gradients(model, comm)
    opt.step()
    tokens += ids.size
elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
tokens = comm.allreduce(tokens)
if comm.Get_rank() == 0:
    np.savez(sys.argv[1], **model.state_dict())
    print("ranks %d: %.0f tokens/s" % (comm.Get_size(), tokens / elapsed))
