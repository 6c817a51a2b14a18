"""Linear + ReLU workload: Y = relu(X @ W + b) for row-major X (M, K), W (K, N), bias (N,)."""

import math

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, w, bias): X ~ N(0, 1), W ~ N(0, 1/K) (unit-scale outputs), bias ~ N(0, 0.5²)."""
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    x = torch.randn((m, k), generator=g, device=device)
    w = torch.randn((k, n), generator=g, device=device) / math.sqrt(k)
    b = 0.5 * torch.randn((n,), generator=g, device=device)
    t = _DTYPES[dtype]
    return x.to(t), w.to(t), b.to(t)


def reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Accurate: float64 product, bias and ReLU, rounded once to the input dtype."""
    return torch.relu(x.double() @ w.double() + bias.double()).to(x.dtype)


def vendor(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype: addmm (bias fused in cuBLAS) then relu."""
    return torch.relu(torch.addmm(bias, x, w))


def flops(shape: dict) -> float:
    """2·M·N·K for the product (the epilogue is negligible)."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X, W and the bias read once, Y written once."""
    size = 4 if dtype == "fp32" else 2
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * (m * k + k * n + m * n + n))
