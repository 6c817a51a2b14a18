"""Cross-entropy forward workload: per-row loss = logsumexp(logits[r]) - logits[r, target[r]].

Inputs are (logits, target): logits (rows, vocab) in the workload dtype and int64 targets, of which
exactly rows // 16 (at seeded random positions) are ``ignore_index = -100``. The output is the per-row
loss in float32, 0 for ignored rows (F.cross_entropy with reduction="none").
"""

import torch
import torch.nn.functional as F

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
IGNORE_INDEX = -100


def n_ignored(rows: int) -> int:
    """How many rows make_inputs marks with ignore_index."""
    return rows // 16


def make_inputs(shape: dict, dtype: str, seed: int, device: str = "cpu") -> tuple:
    """Return (logits, target): logits ~ N(0, 3²), uniform targets, rows // 16 of them ignored."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows, vocab = shape["rows"], shape["vocab"]
    logits = 3.0 * torch.randn((rows, vocab), generator=g, device=device, dtype=torch.float32)
    target = torch.randint(0, vocab, (rows,), generator=g, device=device, dtype=torch.int64)
    ignored = torch.randperm(rows, generator=g, device=device)[: n_ignored(rows)]
    target[ignored] = IGNORE_INDEX
    return logits.to(_DTYPES[dtype]), target


def reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Accurate per-row loss in float64, returned as float32 (0 where target == -100)."""
    loss = F.cross_entropy(logits.double(), target, reduction="none", ignore_index=IGNORE_INDEX)
    return loss.float()


def vendor(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The standard PyTorch way at native dtype."""
    return F.cross_entropy(logits, target, reduction="none", ignore_index=IGNORE_INDEX)


def flops(shape: dict) -> float:
    """About 4 operations per logit: max, subtract, exp, sum."""
    return 4.0 * shape["rows"] * shape["vocab"]


def bytes_moved(shape: dict, dtype: str) -> float:
    """Logits of the non-ignored rows read once (ignored rows need not be read), targets read, losses written."""
    size = 4 if dtype == "fp32" else 2
    rows, vocab = shape["rows"], shape["vocab"]
    return float(size * (rows - n_ignored(rows)) * vocab + 8 * rows + 4 * rows)
