"""A small MLP and a seeded synthetic regression task."""

from __future__ import annotations

import torch
from torch import nn


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def make_data(n: int = 4096, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(x . w) + 0.5 * (x . v)^2 with fixed w, v: smooth and learnable by a small MLP."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=generator)
    w = torch.randn(16, generator=generator) / 4
    v = torch.randn(16, generator=generator) / 4
    y = torch.sin(x @ w) + 0.5 * (x @ v) ** 2
    return x, y.unsqueeze(1)
