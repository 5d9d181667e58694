"""A few seconds of bf16 matrix products on the GPU, with no CPU fallback: the driver must show this
process on its leased GPU while it runs (C3's GPU-use evidence)."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)  # raises when no GPU is visible
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
end, products = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    products += 20
print(f"{products} products in {seconds:.0f} s on {torch.cuda.get_device_name(0)}, "
      f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB allocated at peak")
