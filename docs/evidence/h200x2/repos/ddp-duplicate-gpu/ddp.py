"""A DDP script with a real bug: every rank picks GPU 0, so NCCL refuses the communicator
(duplicate GPU). Evidence for the `nccl` category on a two-GPU machine."""
import os

import torch
import torch.distributed as dist

torch.cuda.set_device(0)  # the bug: should be int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
value = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(value)
print(f"rank {dist.get_rank()} all_reduce {value.item()}")
dist.destroy_process_group()
