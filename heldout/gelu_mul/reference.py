"""GEGLU gate workload: Y = gelu(A) · B (exact erf GELU) for row-major A, B (M, N)."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b): A ~ N(0, 3²) (both tails of the GELU), B ~ N(0, 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n = shape["M"], shape["N"]
    a = 3.0 * torch.randn((m, n), generator=g, device=device)
    b = torch.randn((m, n), generator=g, device=device)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Accurate in float64, rounded once to the input dtype."""
    return (torch.nn.functional.gelu(a.double()) * b.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return torch.nn.functional.gelu(a) * b


def flops(shape: dict) -> float:
    """About 6 operations per element: scale, erf, add, two multiplies, multiply by B."""
    return 6.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, Y written once."""
    size = 4 if dtype == "fp32" else 2
    return float(3 * size * shape["M"] * shape["N"])
