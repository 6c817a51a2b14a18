"""GEMM workload: C = A @ B for row-major A (M, K) and B (K, N), output in the input dtype."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b): standard-normal A (M, K) and B (K, N) in ``dtype`` on ``device``."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = torch.randn((m, k), generator=g, device=device, dtype=torch.float32)
    b = torch.randn((k, n), generator=g, device=device, dtype=torch.float32)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Accurate product: fp32 operands and fp32 accumulation (no TF32), rounded once to the input dtype."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    out = torch.matmul(a.float(), b.float())
    torch.backends.cuda.matmul.allow_tf32 = prev
    return out.to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype (cuBLAS / cuBLASLt)."""
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    """2·M·N·K multiply-adds counted as two operations."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, C written once."""
    size = 4 if dtype == "fp32" else 2
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * (m * k + k * n + m * n))
