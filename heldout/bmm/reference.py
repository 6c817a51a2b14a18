"""Batched GEMM workload: C[b] = A[b] @ B[b] for contiguous A (B, M, K) and B (B, K, N)."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b): standard-normal A (B, M, K) and B (B, K, N) in ``dtype``."""
    g = torch.Generator(device=device).manual_seed(seed)
    bs, m, n, k = shape["B"], shape["M"], shape["N"], shape["K"]
    a = torch.randn((bs, m, k), generator=g, device=device)
    b = torch.randn((bs, k, n), generator=g, device=device)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Accurate product in float64, rounded once to the input dtype."""
    return torch.bmm(a.double(), b.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype (cuBLAS batched GEMM)."""
    return torch.bmm(a, b)


def flops(shape: dict) -> float:
    """2·B·M·N·K."""
    return 2.0 * shape["B"] * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, C written once."""
    size = 4 if dtype == "fp32" else 2
    bs, m, n, k = shape["B"], shape["M"], shape["N"], shape["K"]
    return float(size * bs * (m * k + k * n + m * n))
