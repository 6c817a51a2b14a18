"""Row-sum test workload: y = x.sum(-1) in x's dtype; the reference sums in float64."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x,): N(0, 1) entries plus a small per-row offset N(0, 0.1²), so row sums differ in sign and size."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((shape["rows"], shape["cols"]), generator=g, device=device, dtype=torch.float32)
    x += 0.1 * torch.randn((shape["rows"], 1), generator=g, device=device, dtype=torch.float32)
    return (x.to(_DTYPES[dtype]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Accurate row sums in float64, rounded once to x's dtype."""
    return x.double().sum(dim=-1).to(x.dtype)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return x.sum(dim=-1)


def flops(shape: dict) -> float:
    """One add per element."""
    return float(shape["rows"] * shape["cols"])


def bytes_moved(shape: dict, dtype: str) -> float:
    """x read once, y written once."""
    size = 4 if dtype == "fp32" else 2
    return float(size * (shape["rows"] * shape["cols"] + shape["rows"]))
