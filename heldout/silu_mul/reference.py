"""SwiGLU gate workload: Y = silu(A) * B = A * sigmoid(A) * B over N contiguous elements."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (a, b): A ~ N(0, 3²) (covers both tails of the sigmoid), B ~ N(0, 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    n = shape["N"]
    a = 3.0 * torch.randn((n,), generator=g, device=device)
    b = torch.randn((n,), generator=g, device=device)
    return a.to(_DTYPES[dtype]), b.to(_DTYPES[dtype])


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Accurate in float64, rounded once to the input dtype."""
    ad = a.double()
    return (ad * torch.sigmoid(ad) * b.double()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return torch.nn.functional.silu(a) * b


def flops(shape: dict) -> float:
    """About 5 operations per element: negate, exp, add, divide, two multiplies."""
    return 5.0 * shape["N"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """A and B read once, Y written once."""
    size = 4 if dtype == "fp32" else 2
    return float(3 * size * shape["N"])
