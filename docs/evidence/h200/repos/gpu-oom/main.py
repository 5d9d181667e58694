"""Asks the GPU for more memory than it has: a real CUDA out-of-memory error for the classifier."""
import sys

import torch

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
if device == "cpu":
    print("cpu path: nothing to allocate")
    sys.exit(0)
free, total = torch.cuda.mem_get_info()
print(f"free {free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB; asking for {2 * total / 2**30:.0f} GiB")
blob = torch.empty(2 * total, dtype=torch.uint8, device="cuda")
print("allocated?!", blob.numel())
