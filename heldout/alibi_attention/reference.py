"""Causal ALiBi attention workload for contiguous Q, K, V of shape (B, H, S, D).

Scores are Q Kᵀ / sqrt(D) − slope_h · (i − j) for keys j ≤ i (query i), masked above the diagonal,
with per-head slopes slope_h = 2^(−8(h+1)/H) (Press et al.); output in the input dtype.
"""

import functools
import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: float64 scores made at once (2^26 elements, 512 MiB): the whole score tensor of a long sequence would take
#: tens of GB, and the validator runs several jobs' references on one GPU.
_SCORES_LIMIT = 1 << 26


def slopes(heads: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """ALiBi slopes 2^(−8(h+1)/H) for h = 0..H−1, float32."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], device=device)


def _bias(heads: int, seq: int, device: torch.device, rows: slice = slice(None)) -> torch.Tensor:
    """(H, S, S) additive bias: −slope·(i − j) on and below the diagonal, −inf above it (float64); only the
    query rows ``rows`` when given."""
    i = torch.arange(seq, device=device)[rows][:, None]
    j = torch.arange(seq, device=device)[None, :]
    dist = (i - j).double()
    bias = -slopes(heads, device).double()[:, None, None] * dist
    return bias.masked_fill(j > i, float("-inf"))


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (q, k, v): standard-normal (B, H, S, D) tensors in ``dtype``."""
    g = torch.Generator(device=device).manual_seed(seed)
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    return tuple(torch.randn(dims, generator=g, device=device).to(_DTYPES[dtype]) for _ in range(3))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Accurate: float64 scores, bias, softmax and product, rounded once to the input dtype; a block of query
    rows at a time (each row's softmax is its own, so the blocks give the same answer as one pass)."""
    b, h, s, d = q.shape
    kt, vd = k.double().transpose(-1, -2), v.double()
    out = torch.empty_like(q)
    step = max(1, _SCORES_LIMIT // (b * h * s))
    for start in range(0, s, step):
        rows = slice(start, min(s, start + step))
        scores = q[:, :, rows].double() @ kt / math.sqrt(d) + _bias(h, s, q.device, rows)
        out[:, :, rows] = (torch.softmax(scores, dim=-1) @ vd).to(q.dtype)
    return out


@functools.lru_cache(maxsize=1)
def _vendor_bias(heads: int, seq: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The (H, S, S) bias in the input dtype, made once per shape as a model keeps it (the float64 tensor
    this starts from costs more than the attention itself: timing it each call made SDPA look 10x slow)."""
    return _bias(heads, seq, device).to(dtype)


def vendor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: SDPA with the ALiBi + causal bias as a float mask (the
    bias made once per shape, not per call)."""
    bias = _vendor_bias(q.shape[1], q.shape[2], q.device, q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def flops(shape: dict) -> float:
    """4·B·H·S²·D for the two products, halved by the causal mask."""
    return 2.0 * shape["B"] * shape["H"] * shape["S"] ** 2 * shape["D"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """Q, K, V read once and O written once."""
    size = 4 if dtype == "fp32" else 2
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])
