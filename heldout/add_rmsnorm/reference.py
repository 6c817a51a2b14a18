"""Fused add + RMSNorm workload: H = X + R, Y = H / sqrt(mean(H², dim=-1) + 1e-6) · W, eps = 1e-6.

Contract: the sum H is formed in (at least) float32 and not rounded to X's dtype before the norm; only
Y is returned, in X's dtype.
"""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, residual, weight): X rows with per-row scales in [0.1, 10], R ~ N(0, 1), W around 1."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    scale = 10.0 ** (2.0 * torch.rand((rows, 1), generator=g, device=device) - 1.0)
    x = torch.randn((rows, cols), generator=g, device=device) * scale
    r = torch.randn((rows, cols), generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn((cols,), generator=g, device=device)
    t = _DTYPES[dtype]
    return x.to(t), r.to(t), w.to(t)


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Accurate: float64 sum and RMSNorm, rounded once to X's dtype."""
    h = x.double() + residual.double()
    rms = torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (h / rms * weight.double()).to(x.dtype)


def vendor(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: add, then rms_norm (two kernels; H rounded once)."""
    return torch.nn.functional.rms_norm(x + residual, (x.shape[-1],), weight, EPS)


def flops(shape: dict) -> float:
    """About 5 operations per element: add, square, sum, scale, weight."""
    return 5.0 * shape["rows"] * shape["cols"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X and R read once, Y written once (the weight is negligible)."""
    size = 4 if dtype == "fp32" else 2
    return float(3 * size * shape["rows"] * shape["cols"] + size * shape["cols"])
