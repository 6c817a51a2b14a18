"""Row absmax workload: S = max(|X|, dim=-1) for a row-major X (rows, cols), output in X's dtype."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x,): N(0, 1) rows with per-row scales spanning four decades."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    scale = 10.0 ** (4.0 * torch.rand((rows, 1), generator=g, device=device) - 2.0)
    x = torch.randn((rows, cols), generator=g, device=device) * scale
    return (x.to(_DTYPES[dtype]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Exact: the maximum of absolute values is one of the inputs."""
    return x.double().abs().amax(dim=-1).to(x.dtype)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return x.abs().amax(dim=-1)


def flops(shape: dict) -> float:
    """Two operations per element: abs and max."""
    return 2.0 * shape["rows"] * shape["cols"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, one value per row written."""
    size = 4 if dtype == "fp32" else 2
    return float(size * shape["rows"] * (shape["cols"] + 1))
