"""Keeps one GPU busy for a while with bf16 matrix products, for the telemetry evidence."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
if not torch.cuda.is_available():
    print("no GPU visible: CPU check only")
    a = torch.randn(256, 256)
    assert torch.allclose(a @ torch.eye(256), a)
    sys.exit(0)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end, products = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    products += 20
tflops = products * 2 * 8192**3 / seconds / 1e12
print(f"{products} products in {seconds:.0f} s: {tflops:.0f} TFLOP/s on {torch.cuda.get_device_name(0)}")
