"""Key-padding masked softmax workload: attention scores X (B, H, S, S) contiguous and lengths (B,) int32.

Row (b, h, i) is a softmax over its first lengths[b] keys; keys at j >= lengths[b] are padding, masked
out, and their output is exactly 0. Every length is at least 1 (no fully masked row).
"""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, lengths): scores from N(0, 3²) and lengths uniform in [1, S] (the last one is S)."""
    g = torch.Generator(device=device).manual_seed(seed)
    b, h, s = shape["B"], shape["H"], shape["S"]
    x = 3.0 * torch.randn((b, h, s, s), generator=g, device=device)
    lengths = torch.randint(1, s + 1, (b,), generator=g, device=device)
    lengths[-1] = s
    return x.to(_DTYPES[dtype]), lengths.to(torch.int32)


def _padding(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1, S) boolean mask, True where a key is padding."""
    return torch.arange(x.shape[-1], device=x.device)[None, None, None, :] >= lengths[:, None, None, None]


def reference(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Accurate masked softmax in float64, rounded once to X's dtype."""
    scores = x.double().masked_fill(_padding(x, lengths), float("-inf"))
    return torch.softmax(scores, dim=-1).to(x.dtype)


def vendor(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: masked_fill with -inf, then softmax."""
    return torch.softmax(x.masked_fill(_padding(x, lengths), float("-inf")), dim=-1)


def flops(shape: dict) -> float:
    """About 5 operations per element: mask, max, subtract, exp, sum, divide."""
    return 5.0 * shape["B"] * shape["H"] * shape["S"] ** 2


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once (the lengths are negligible)."""
    size = 4 if dtype == "fp32" else 2
    return float(2 * size * shape["B"] * shape["H"] * shape["S"] ** 2)
