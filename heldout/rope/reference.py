"""Rotary position embedding workload (rotate-half layout, as GPT-NeoX / Llama in HF).

X (rows, H, D) contiguous (rows = tokens), positions (rows,) int64 in [0, rows), cos and sin (rows, D/2)
float32 tables indexed by position: with x1 = X[t, h, :D/2], x2 = X[t, h, D/2:], c = cos[positions[t]],
s = sin[positions[t]], Y[t, h] = concat(x1·c − x2·s, x2·c + x1·s), output in X's dtype.
"""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, positions, cos, sin): X ~ N(0, 1), positions uniform over the table, and the tables for
    frequencies 10000^(−2i/D)."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, h, d = shape["rows"], shape["H"], shape["D"]
    x = torch.randn((rows, h, d), generator=g, device=device)
    positions = torch.randint(0, rows, (rows,), generator=g, device=device)
    inv_freq = 10000.0 ** (-torch.arange(0, d // 2, device=device, dtype=torch.float64) * 2.0 / d)
    angles = torch.arange(rows, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return x.to(_DTYPES[dtype]), positions, torch.cos(angles).float(), torch.sin(angles).float()


def reference(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Accurate rotation in float64, rounded once to X's dtype."""
    c = cos.double()[positions][:, None, :]
    s = sin.double()[positions][:, None, :]
    x1, x2 = x.double().chunk(2, dim=-1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def vendor(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype (the HF rotate_half formulation: gather, multiply, cat)."""
    c = cos[positions][:, None, :].to(x.dtype)
    s = sin[positions][:, None, :].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def flops(shape: dict) -> float:
    """Three operations per element (two multiplies and an add)."""
    return 3.0 * shape["rows"] * shape["H"] * shape["D"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once, one cos and sin row (float32) per token."""
    size = 4 if dtype == "fp32" else 2
    rows, h, d = shape["rows"], shape["H"], shape["D"]
    return float(2 * size * rows * h * d + 4 * rows * d + 8 * rows)
