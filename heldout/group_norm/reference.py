"""Group-norm workload: X (B, D, S) contiguous (batch, D channels, S = H·W spatial positions), G = 32
groups, per-channel affine weight and bias (D,), eps 1e-5; statistics (mean, population variance) over
each sample's group of D/32 channels × S positions. The shape keys are the search context's (B, D, S):
its vocabulary has no channel, spatial or group key."""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-5
GROUPS = 32


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (x, weight, bias, groups): X with a per-(sample, channel) offset and scale, weight around 1,
    bias ~ N(0, 0.1²), and the group count 32 (an int, the same for every seed)."""
    g = torch.Generator(device=device).manual_seed(seed)
    n, c, hw = shape["B"], shape["D"], shape["S"]
    if c % GROUPS:
        raise ValueError(f"group_norm: D = {c} channels is not a multiple of {GROUPS} groups")
    offset = torch.randn((n, c, 1), generator=g, device=device)
    scale = 0.5 + torch.rand((n, c, 1), generator=g, device=device)
    x = offset + scale * torch.randn((n, c, hw), generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn((c,), generator=g, device=device)
    b = 0.1 * torch.randn((c,), generator=g, device=device)
    t = _DTYPES[dtype]
    return x.to(t), w.to(t), b.to(t), GROUPS


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int) -> torch.Tensor:
    """Accurate group norm in float64, rounded once to X's dtype."""
    n, c, hw = x.shape
    xg = x.double().reshape(n, groups, (c // groups) * hw)
    mean = xg.mean(dim=-1, keepdim=True)
    var = (xg - mean).pow(2).mean(dim=-1, keepdim=True)
    y = ((xg - mean) / torch.sqrt(var + EPS)).reshape(n, c, hw)
    return (y * weight.double()[:, None] + bias.double()[:, None]).to(x.dtype)


def vendor(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return torch.nn.functional.group_norm(x, groups, weight, bias, EPS)


def flops(shape: dict) -> float:
    """About 8 operations per element: two reductions, normalize, scale, shift."""
    return 8.0 * shape["B"] * shape["D"] * shape["S"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """X read once, Y written once (the affine parameters are negligible)."""
    size = 4 if dtype == "fp32" else 2
    return float(2 * size * shape["B"] * shape["D"] * shape["S"] + 2 * size * shape["D"])
