"""Decode attention workload: q (B, H, D) against a KV cache K, V (B, H, S, D), every cached key
visible; o = softmax(q Kᵀ / sqrt(D)) V of shape (B, H, D) in the input dtype."""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (q, k, v): standard-normal q (B, H, D) and K, V (B, H, S, D) in ``dtype``."""
    g = torch.Generator(device=device).manual_seed(seed)
    b, h, s, d = shape["B"], shape["H"], shape["S"], shape["D"]
    t = _DTYPES[dtype]
    q = torch.randn((b, h, d), generator=g, device=device).to(t)
    k = torch.randn((b, h, s, d), generator=g, device=device).to(t)
    v = torch.randn((b, h, s, d), generator=g, device=device).to(t)
    return q, k, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Accurate: float64 scores, softmax and product, rounded once to the input dtype."""
    scores = torch.einsum("bhd,bhsd->bhs", q.double(), k.double()) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", torch.softmax(scores, dim=-1), v.double()).to(q.dtype)


def vendor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: SDPA with a single query position."""
    return torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v).squeeze(2)


def flops(shape: dict) -> float:
    """4·B·H·S·D for the two products."""
    return 4.0 * shape["B"] * shape["H"] * shape["S"] * shape["D"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """The KV cache read once (q and o are negligible)."""
    size = 4 if dtype == "fp32" else 2
    b, h, s, d = shape["B"], shape["H"], shape["S"], shape["D"]
    return float(size * b * h * d * (2 * s + 2))
