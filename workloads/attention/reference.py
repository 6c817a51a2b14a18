"""Attention forward workload: O = softmax(Q Kᵀ / sqrt(D) [+ causal mask]) V, tensors laid out (B, H, S, D).

Inputs are (q, k, v, causal): three contiguous (B, H, S, D) tensors and a plain Python bool.
The causal mask is top-left aligned (query i sees keys 0..i), as SDPA's ``is_causal=True``.
"""

import math

import torch
import torch.nn.functional as F

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (q, k, v, causal): standard-normal Q, K, V, so that Q·K/sqrt(D) has unit variance."""
    g = torch.Generator(device=device).manual_seed(seed)
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    t = _DTYPES[dtype]
    q = torch.randn(dims, generator=g, device=device, dtype=torch.float32).to(t)
    k = torch.randn(dims, generator=g, device=device, dtype=torch.float32).to(t)
    v = torch.randn(dims, generator=g, device=device, dtype=torch.float32).to(t)
    return q, k, v, bool(shape["causal"])


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Accurate attention in fp32 (no TF32), one batch entry at a time to bound memory."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    scale = 1.0 / math.sqrt(q.shape[-1])
    s_len = q.shape[2]
    out = torch.empty_like(q)
    mask = None
    if causal:
        mask = torch.ones((s_len, s_len), dtype=torch.bool, device=q.device).tril()
    for b in range(q.shape[0]):
        scores = torch.matmul(q[b].float(), k[b].float().transpose(-1, -2)) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out[b] = torch.matmul(torch.softmax(scores, dim=-1), v[b].float()).to(q.dtype)
        del scores
    torch.backends.cuda.matmul.allow_tf32 = prev
    return out


def vendor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The standard PyTorch way at native dtype (SDPA picks flash / cuDNN / efficient)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def flops(shape: dict) -> float:
    """4·B·H·S²·D (two matmuls), halved when causal."""
    f = 4.0 * shape["B"] * shape["H"] * shape["S"] * shape["S"] * shape["D"]
    return f / 2.0 if shape["causal"] else f


def bytes_moved(shape: dict, dtype: str) -> float:
    """Q, K, V read once, O written once."""
    size = 4 if dtype == "fp32" else 2
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])
