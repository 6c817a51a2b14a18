"""Grouped-query attention workload (non-causal): Q (B, H, S, D), K and V (B, H/4, S, D) (GROUP = 4 query
heads per KV head, H a multiple of 4); query head h attends with KV head h // 4;
O = softmax(Q Kᵀ / sqrt(D)) V in the input dtype. The shape names H (query heads) only: the search
context vocabulary has no key for the KV heads."""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
GROUP = 4

#: float64 scores made at once (2^26 elements, 512 MiB): the whole score tensor of a long sequence would take
#: tens of GB, and the validator runs several jobs' references on one GPU.
_SCORES_LIMIT = 1 << 26


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (q, k, v): standard-normal Q (B, H, S, D) and K, V (B, H/4, S, D) in ``dtype``."""
    g = torch.Generator(device=device).manual_seed(seed)
    b, h, s, d = shape["B"], shape["H"], shape["S"], shape["D"]
    if h % GROUP:
        raise ValueError(f"gqa_attention: H = {h} is not a multiple of {GROUP}")
    hkv = h // GROUP
    t = _DTYPES[dtype]
    q = torch.randn((b, h, s, d), generator=g, device=device).to(t)
    k = torch.randn((b, hkv, s, d), generator=g, device=device).to(t)
    v = torch.randn((b, hkv, s, d), generator=g, device=device).to(t)
    return q, k, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Accurate: KV heads repeated, float64 scores, softmax and product, rounded once to the input dtype; a
    block of query rows at a time (each row's softmax is its own, so the blocks give the same answer as one
    pass)."""
    b, h, s, d = q.shape
    group = h // k.shape[1]
    kt = k.double().repeat_interleave(group, dim=1).transpose(-1, -2)
    vd = v.double().repeat_interleave(group, dim=1)
    out = torch.empty_like(q)
    step = max(1, _SCORES_LIMIT // (b * h * s))
    for start in range(0, s, step):
        rows = slice(start, min(s, start + step))
        scores = q[:, :, rows].double() @ kt / math.sqrt(d)
        out[:, :, rows] = (torch.softmax(scores, dim=-1) @ vd).to(q.dtype)
    return out


def vendor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: SDPA with enable_gqa."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def flops(shape: dict) -> float:
    """4·B·H·S²·D for the two products."""
    return 4.0 * shape["B"] * shape["H"] * shape["S"] ** 2 * shape["D"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """Q read and O written once, K and V read once per KV head."""
    size = 4 if dtype == "fp32" else 2
    b, h, s, d = shape["B"], shape["H"], shape["S"], shape["D"]
    return float(size * b * s * d * (2 * h + 2 * (h // GROUP)))
