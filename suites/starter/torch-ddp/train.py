"""Single-process training (CPU and single-GPU entrypoints)."""

from __future__ import annotations

import argparse
import sys
import time

import torch

from model import make_data, make_model


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("FAIL: --device cuda but torch.cuda.is_available() is False "
              f"(torch {torch.__version__}, CUDA build {torch.version.cuda})", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    torch.set_num_threads(1)  # tiny matrices: more threads only add overhead
    model = make_model().to(device)
    x, y = (t.to(device) for t in make_data())
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.MSELoss()
    started = time.perf_counter()
    with torch.no_grad():
        first = loss_fn(model(x), y).item()
    for step in range(args.steps):
        index = torch.randint(0, x.shape[0], (256,), generator=torch.Generator().manual_seed(step)).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        last = loss_fn(model(x), y).item()
    elapsed = time.perf_counter() - started
    print(f"device {device}: loss {first:.4f} -> {last:.4f} in {args.steps} steps, {elapsed:.2f}s "
          f"(torch {torch.__version__})")
    if not last < first / 5:
        print(f"FAIL: loss fell only from {first:.4f} to {last:.4f}", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
