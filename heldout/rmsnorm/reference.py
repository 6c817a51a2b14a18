"""RMSNorm workload: Y = X / sqrt(mean(X², dim=-1) + eps) * W, eps = 1e-6, output in X's dtype."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, weight): rows of N(0, 1) with per-row scales in [0.1, 10] and a weight around 1."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    scale = 10.0 ** (2.0 * torch.rand((rows, 1), generator=g, device=device) - 1.0)
    x = torch.randn((rows, cols), generator=g, device=device) * scale
    w = 1.0 + 0.1 * torch.randn((cols,), generator=g, device=device)
    return x.to(_DTYPES[dtype]), w.to(_DTYPES[dtype])


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Accurate RMSNorm in float64, rounded once to X's dtype."""
    xd = x.double()
    rms = torch.sqrt(xd.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (xd / rms * weight.double()).to(x.dtype)


def vendor(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, EPS)


def flops(shape: dict) -> float:
    """About 4 operations per element: square, sum, scale, weight."""
    return 4.0 * shape["rows"] * shape["cols"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once (the weight is negligible)."""
    size = 4 if dtype == "fp32" else 2
    return float(2 * size * shape["rows"] * shape["cols"] + size * shape["cols"])
