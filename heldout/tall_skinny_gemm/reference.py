"""Tall-skinny GEMM workload: C = A @ B for row-major A (M, K), M large, and B (K, N), N small."""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b): A ~ N(0, 1) of shape (M, K) and B ~ N(0, 1/K) of shape (K, N), in ``dtype``."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = torch.randn((m, k), generator=g, device=device)
    b = torch.randn((k, n), generator=g, device=device) / math.sqrt(k)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Accurate product in float64, rounded once to the input dtype."""
    return (a.double() @ b.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype (cuBLAS)."""
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    """2·M·N·K."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, C written once (dominated by A: the kernel is memory-bound for small N)."""
    size = 4 if dtype == "fp32" else 2
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * (m * k + k * n + m * n))
