"""Transposed-first-operand GEMM workload: C = Aᵀ @ B for row-major A (K, M) and B (K, N)."""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b): A ~ N(0, 1/K) of shape (K, M) and B ~ N(0, 1) of shape (K, N), in ``dtype``."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = torch.randn((k, m), generator=g, device=device) / math.sqrt(k)
    b = torch.randn((k, n), generator=g, device=device)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Accurate product in float64, rounded once to the input dtype."""
    return (a.double().t() @ b.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype (cuBLAS with a transposed operand)."""
    return torch.matmul(a.t(), b)


def flops(shape: dict) -> float:
    """2·M·N·K."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, C written once."""
    size = 4 if dtype == "fp32" else 2
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * (k * m + k * n + m * n))
