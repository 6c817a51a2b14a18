"""Causal sliding-window attention workload for contiguous Q, K, V of shape (B, H, S, D).

Query i attends to keys j with i − W < j ≤ i, W = S // 4 (a run argument, fixed by the shape: the
search context vocabulary has no key for a window); O = softmax(Q Kᵀ / sqrt(D) over the window) V, output
in the input dtype.
"""

import functools
import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: float64 scores made at once (2^26 elements, 512 MiB): the whole score tensor of a long sequence would take
#: tens of GB, and the validator runs several jobs' references on one GPU.
_SCORES_LIMIT = 1 << 26


def _allowed(seq: int, window: int, device: torch.device, rows: slice = slice(None)) -> torch.Tensor:
    """(S, S) boolean mask, True where query i may attend to key j; only the query rows ``rows`` when given."""
    i = torch.arange(seq, device=device)[rows][:, None]
    j = torch.arange(seq, device=device)[None, :]
    return (j <= i) & (j > i - window)


def window_of(shape: dict) -> int:
    """The window W = S // 4 (at least 1)."""
    return max(1, shape["S"] // 4)


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (q, k, v, window): standard-normal (B, H, S, D) tensors in ``dtype`` and the window W."""
    g = torch.Generator(device=device).manual_seed(seed)
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    q, k, v = (torch.randn(dims, generator=g, device=device).to(_DTYPES[dtype]) for _ in range(3))
    return q, k, v, window_of(shape)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Accurate: float64 scores, window mask, softmax and product, rounded once to the input dtype; a block of
    query rows at a time (each row's softmax is its own, so the blocks give the same answer as one pass)."""
    b, h, s, d = q.shape
    kt, vd = k.double().transpose(-1, -2), v.double()
    out = torch.empty_like(q)
    step = max(1, _SCORES_LIMIT // (b * h * s))
    for start in range(0, s, step):
        rows = slice(start, min(s, start + step))
        scores = q[:, :, rows].double() @ kt / math.sqrt(d)
        scores = scores.masked_fill(~_allowed(s, window, q.device, rows), float("-inf"))
        out[:, :, rows] = (torch.softmax(scores, dim=-1) @ vd).to(q.dtype)
    return out


@functools.lru_cache(maxsize=1)
def _vendor_mask(seq: int, window: int, device: torch.device) -> torch.Tensor:
    """The (S, S) window mask, made once per shape as a model keeps it."""
    return _allowed(seq, window, device)


def vendor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """The standard PyTorch way at native dtype: SDPA with the window as a boolean mask (made once per
    shape, not per call)."""
    mask = _vendor_mask(q.shape[2], window, q.device)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def flops(shape: dict) -> float:
    """4·B·H·D·(keys seen): each query sees min(i + 1, W) keys."""
    s, w = shape["S"], window_of(shape)
    keys = s * w - w * (w - 1) / 2 if s >= w else s * (s + 1) / 2
    return 4.0 * shape["B"] * shape["H"] * shape["D"] * keys


def bytes_moved(shape: dict, dtype: str) -> float:
    """Q, K, V read once and O written once."""
    size = 4 if dtype == "fp32" else 2
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])
