"""Trains a small model on whatever device torch offers, as much research code does. With a working
CUDA it runs on the GPU; in an environment whose CUDA is broken or hidden it silently runs on the CPU
and still exits 0, which is what C3's GPU-use rule must catch (`no_gpu_use`)."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"training on {device}")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(512, 1024, device=device), torch.randn(512, 1, device=device)
end, steps = time.monotonic() + seconds, 0
while time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
print(f"{steps} steps on {device}, loss {loss.item():.4f}")
