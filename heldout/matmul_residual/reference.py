"""GEMM + residual workload: Y = A @ B + R for row-major A (M, K), B (K, N), R (M, N)."""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b, r): A ~ N(0, 1), B ~ N(0, 1/K) (unit-scale product), residual R ~ N(0, 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = torch.randn((m, k), generator=g, device=device)
    b = torch.randn((k, n), generator=g, device=device) / math.sqrt(k)
    r = torch.randn((m, n), generator=g, device=device)
    t = _DTYPES[dtype]
    return a.to(t), b.to(t), r.to(t)


def reference(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Accurate: float64 product plus residual, rounded once to the input dtype."""
    return (a.double() @ b.double() + r.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: addmm with the residual as the added matrix."""
    return torch.addmm(r, a, b)


def flops(shape: dict) -> float:
    """2·M·N·K for the product (the add is negligible)."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A, B and R read once, Y written once."""
    size = 4 if dtype == "fp32" else 2
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * (m * k + k * n + 2 * m * n))
