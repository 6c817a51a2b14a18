"""LayerNorm workload: Y = (X - mean) / sqrt(var + eps) * weight + bias over the last dim, eps = 1e-5."""

import torch
import torch.nn.functional as F

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-5


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, weight, bias): X with a non-zero mean per row (tests a stable variance), affine params."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    x = 1.5 * torch.randn((rows, cols), generator=g, device=device, dtype=torch.float32)
    x += 3.0 * torch.randn((rows, 1), generator=g, device=device, dtype=torch.float32)
    w = 1.0 + 0.5 * torch.randn((cols,), generator=g, device=device, dtype=torch.float32)
    b = 0.5 * torch.randn((cols,), generator=g, device=device, dtype=torch.float32)
    t = _DTYPES[dtype]
    return x.to(t), w.to(t), b.to(t)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Accurate layer norm in float64, rounded once to X's dtype."""
    cols = x.shape[-1]
    y = F.layer_norm(x.double(), (cols,), weight.double(), bias.double(), EPS)
    return y.to(x.dtype)


def vendor(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, EPS)


def flops(shape: dict) -> float:
    """About 8 operations per element: two sums, centre, square, scale, affine."""
    return 8.0 * shape["rows"] * shape["cols"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once, weight and bias read once."""
    size = 4 if dtype == "fp32" else 2
    rows, cols = shape["rows"], shape["cols"]
    return float(size * (2 * rows * cols + 2 * cols))
