"""Small GEMM test workload: C = A @ B; the reference multiplies in float64."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b) with N(0, 1) entries."""
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((shape["M"], shape["K"]), generator=g, device=device, dtype=torch.float32)
    b = torch.randn((shape["K"], shape["N"]), generator=g, device=device, dtype=torch.float32)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Float64 product rounded once to the input dtype."""
    return (a.double() @ b.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul at native dtype."""
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    """2 M N K."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, C written once."""
    size = 4 if dtype == "fp32" else 2
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))
