"""Column-sum workload: S = X.sum(dim=0) for a row-major X (M, N), output (N,) in X's dtype."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x,): N(0.5, 1) entries (a non-zero column mean keeps sums away from cancellation)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = 0.5 + torch.randn((shape["M"], shape["N"]), generator=g, device=device)
    return (x.to(_DTYPES[dtype]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Accurate sum in float64, rounded once to X's dtype."""
    return x.double().sum(dim=0).to(x.dtype)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype (fp32 accumulation inside)."""
    return x.sum(dim=0)


def flops(shape: dict) -> float:
    """One add per element."""
    return float(shape["M"] * shape["N"])


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, one value per column written."""
    size = 4 if dtype == "fp32" else 2
    return float(size * (shape["M"] + 1) * shape["N"])
