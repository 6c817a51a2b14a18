"""Row argmax workload: I = X.argmax(dim=-1) for a row-major X (rows, cols); the first maximal index
on ties; output (rows,) int64 (integer outputs are compared exactly, the tolerance is unused)."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x,): logits from N(0, 3²) plus a per-row offset, with every row's maximum repeated in its
    last column (a tie, usually with an earlier column block: the first index must win)."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    x = 3.0 * torch.randn((rows, cols), generator=g, device=device)
    x += 4.0 * torch.randn((rows, 1), generator=g, device=device)
    x = x.to(_DTYPES[dtype])
    x[:, -1] = x.amax(dim=-1)
    return (x,)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Exact: the index of the first maximum of each row (comparisons are exact in any dtype)."""
    return torch.argmax(x.double(), dim=-1)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return torch.argmax(x, dim=-1)


def flops(shape: dict) -> float:
    """One comparison per element."""
    return float(shape["rows"] * shape["cols"])


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, one int64 per row written."""
    size = 4 if dtype == "fp32" else 2
    return float(size * shape["rows"] * shape["cols"] + 8 * shape["rows"])
