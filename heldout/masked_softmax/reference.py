"""Key-padding masked softmax workload: X (B, R, L) contiguous scores and lengths (B,) int32.

Row (b, r) is a softmax over its first lengths[b] entries; entries at j >= lengths[b] are masked out
and their output is exactly 0. Every length is at least 1 (no fully masked row).
"""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, lengths): scores from N(0, 3²) and lengths uniform in [1, L] (the last one is L)."""
    g = torch.Generator(device=device).manual_seed(seed)
    b, r, n = shape["B"], shape["R"], shape["L"]
    x = 3.0 * torch.randn((b, r, n), generator=g, device=device)
    lengths = torch.randint(1, n + 1, (b,), generator=g, device=device)
    lengths[-1] = n
    return x.to(_DTYPES[dtype]), lengths.to(torch.int32)


def _padding(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, 1, L) boolean mask, True where a key is padding."""
    return torch.arange(x.shape[-1], device=x.device)[None, None, :] >= lengths[:, None, None]


def reference(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Accurate masked softmax in float64, rounded once to X's dtype."""
    scores = x.double().masked_fill(_padding(x, lengths), float("-inf"))
    return torch.softmax(scores, dim=-1).to(x.dtype)


def vendor(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: masked_fill with -inf, then softmax."""
    return torch.softmax(x.masked_fill(_padding(x, lengths), float("-inf")), dim=-1)


def flops(shape: dict) -> float:
    """About 5 operations per element: mask, max, subtract, exp, sum, divide."""
    return 5.0 * shape["B"] * shape["R"] * shape["L"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once (the lengths are negligible)."""
    size = 4 if dtype == "fp32" else 2
    return float(2 * size * shape["B"] * shape["R"] * shape["L"])
