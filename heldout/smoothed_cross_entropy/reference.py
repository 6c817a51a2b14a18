"""Label-smoothed cross-entropy workload with ignore_index, per row (no reduction).

logits (rows, vocab) row-major, targets (rows,) int64, smoothing eps = 0.1, ignore_index = -100:
loss_r = (1 − eps)·(lse_r − x[r, t_r]) + eps·(lse_r − mean_j x[r, j]) where lse_r = logsumexp_j x[r, j],
and loss_r = 0 where t_r = -100 (as torch.nn.functional.cross_entropy with reduction="none"). The output
is float32 whatever the logits' dtype.
"""

import torch

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SMOOTHING = 0.1
IGNORE_INDEX = -100


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (logits, targets): logits N(0, 3²) plus a per-row offset, targets uniform over the vocabulary with
    about one row in eight (and always the first) set to -100."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, v = shape["rows"], shape["vocab"]
    x = 3.0 * torch.randn((rows, v), generator=g, device=device)
    x += 8.0 * torch.randn((rows, 1), generator=g, device=device)
    t = torch.randint(0, v, (rows,), generator=g, device=device)
    ignored = torch.rand((rows,), generator=g, device=device) < 0.125
    ignored[0] = True
    t = t.masked_fill(ignored, IGNORE_INDEX)
    return x.to(_DTYPES[dtype]), t


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Accurate in float64 (logsumexp, target logit, row mean), rounded once to float32."""
    x = logits.double()
    lse = torch.logsumexp(x, dim=-1)
    keep = targets != IGNORE_INDEX
    picked = x.gather(1, torch.where(keep, targets, 0)[:, None])[:, 0]
    loss = (1.0 - SMOOTHING) * (lse - picked) + SMOOTHING * (lse - x.mean(dim=-1))
    return torch.where(keep, loss, 0.0).to(torch.float32)


def vendor(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype, widened to float32."""
    loss = torch.nn.functional.cross_entropy(logits, targets, reduction="none", ignore_index=IGNORE_INDEX,
                                             label_smoothing=SMOOTHING)
    return loss.to(torch.float32)


def flops(shape: dict) -> float:
    """About 5 operations per logit: max, subtract, exp, two sums."""
    return 5.0 * shape["rows"] * shape["vocab"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """The logits read once (targets and losses are negligible)."""
    size = 4 if dtype == "fp32" else 2
    return float(size * shape["rows"] * shape["vocab"] + 12 * shape["rows"])
