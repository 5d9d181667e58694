"""Data-parallel training with DistributedDataParallel, launched by torchrun.

Backend: nccl when CUDA is available (one GPU per rank, LOCAL_RANK picks it), gloo otherwise.
Checks: every rank ends with identical weights (all-reduce of max - min of a checksum) and the
global loss fell by 5x. Any failed check exits 1 on every rank.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from model import make_data, make_model


def main() -> int:
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model().to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    x, y = (t.to(device) for t in make_data())
    shard = slice(rank * x.shape[0] // world, (rank + 1) * x.shape[0] // world)
    xs, ys = x[shard], y[shard]
    optimizer = torch.optim.Adam(ddp.parameters(), lr=3e-3)
    loss_fn = torch.nn.MSELoss()
    with torch.no_grad():
        first = loss_fn(model(x), y).item()
    per_rank = max(32, 256 // world)  # the global batch stays 256 whatever the world size
    for step in range(200):
        index = torch.randint(0, xs.shape[0], (per_rank,), generator=torch.Generator().manual_seed(step * world + rank))
        index = index.to(device)
        optimizer.zero_grad()
        loss_fn(ddp(xs[index]), ys[index]).backward()
        optimizer.step()
    with torch.no_grad():
        last = loss_fn(model(x), y).item()
        checksum = torch.stack([p.double().sum() for p in model.parameters()]).sum().reshape(1)
        high, low = checksum.clone(), checksum.clone()
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
    errors = []
    if (high - low).abs().item() > 1e-9:
        errors.append(f"ranks disagree on the weights (checksums {low.item()} .. {high.item()})")
    if not last < first / 5:
        errors.append(f"loss fell only from {first:.4f} to {last:.4f}")
    failed = torch.tensor([1.0 if errors else 0.0], device=device)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"{backend} x{world} on {device.type}: loss {first:.4f} -> {last:.4f} (torch {torch.__version__})")
    for error in errors:
        print(f"FAIL rank {rank}: {error}", file=sys.stderr)
    dist.destroy_process_group()
    if failed.item():
        return 1
    if rank == 0:
        print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
