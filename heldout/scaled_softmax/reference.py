"""Scaled softmax workload: Y = softmax(X · scale, dim=-1) for a row-major X (rows, cols).

``scale`` is passed as a Python float, D^-1/2 for the shape's head dim D (the same for every seed).
"""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, scale): raw scores N(0, 4·D) (so X · scale ~ N(0, 4)) and scale = 1/sqrt(D)."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols, d = shape["rows"], shape["cols"], shape["D"]
    x = 2.0 * math.sqrt(d) * torch.randn((rows, cols), generator=g, device=device)
    return x.to(_DTYPES[dtype]), 1.0 / math.sqrt(d)


def reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Accurate softmax of the scaled scores in float64, rounded once to X's dtype."""
    return torch.softmax(x.double() * scale, dim=-1).to(x.dtype)


def vendor(x: torch.Tensor, scale: float) -> torch.Tensor:
    """The standard PyTorch way at native dtype: scale, then softmax."""
    return torch.softmax(x * scale, dim=-1)


def flops(shape: dict) -> float:
    """About 6 operations per element: scale, max, subtract, exp, sum, divide."""
    return 6.0 * shape["rows"] * shape["cols"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once."""
    size = 4 if dtype == "fp32" else 2
    return float(2 * size * shape["rows"] * shape["cols"])
