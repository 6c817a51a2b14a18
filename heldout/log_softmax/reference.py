"""Row log-softmax workload: Y = X - logsumexp(X, dim=-1) for a row-major X (rows, cols)."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x,): logits drawn from N(0, 3²) plus a per-row offset, so rows differ in shift."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    x = 3.0 * torch.randn((rows, cols), generator=g, device=device)
    x += 8.0 * torch.randn((rows, 1), generator=g, device=device)
    return (x.to(_DTYPES[dtype]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Accurate log-softmax in float64, rounded once to X's dtype."""
    return torch.log_softmax(x.double(), dim=-1).to(x.dtype)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return torch.log_softmax(x, dim=-1)


def flops(shape: dict) -> float:
    """About 5 operations per element: max, subtract, exp, sum, subtract."""
    return 5.0 * shape["rows"] * shape["cols"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once (the compulsory traffic; the naive kernel reads X three times)."""
    size = 4 if dtype == "fp32" else 2
    return float(2 * size * shape["rows"] * shape["cols"])
