"""Packed SwiGLU workload: X (M, 2N) row-major, A = X[:, :N], B = X[:, N:], Y = silu(A) · B (M, N)."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x,): the gate half ~ N(0, 3²) (covers both tails of the sigmoid), the up half ~ N(0, 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n = shape["M"], shape["N"]
    gate = 3.0 * torch.randn((m, n), generator=g, device=device)
    up = torch.randn((m, n), generator=g, device=device)
    return (torch.cat((gate, up), dim=1).to(_DTYPES[dtype]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Accurate in float64, rounded once to X's dtype."""
    a, b = x.double().chunk(2, dim=-1)
    return (a * torch.sigmoid(a) * b).to(x.dtype)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: chunk, silu, multiply."""
    a, b = x.chunk(2, dim=-1)
    return torch.nn.functional.silu(a) * b


def flops(shape: dict) -> float:
    """About 5 operations per output element: negate, exp, add, divide, multiply."""
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X (2N columns) read once, Y (N columns) written once."""
    size = 4 if dtype == "fp32" else 2
    return float(3 * size * shape["M"] * shape["N"])
