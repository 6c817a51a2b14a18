"""Operators compose in the order an agent happens to apply them: a parameter one operator adds does not stop
the next one (each case failed before: the second operator refused, and the planner lost the move)."""

from __future__ import annotations

from pathlib import Path

import torch

from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check

ROOT = Path(__file__).resolve().parents[2]
BMM = (ROOT / "heldout" / "bmm" / "naive.py").read_text()


def test_mask_elision_after_grouped_order_keeps_the_defaulted_parameter_last() -> None:
    """grouped-order adds ``GROUP_SIZE_M: tl.constexpr = 8``; mask-elision's flags go before it (after it
    the signature would not parse), the kernel stays correct on even and uneven shapes, and each operator's
    simplify still takes back exactly its own change."""
    grouped = get_operator("grouped-order").apply(BMM)
    assert grouped is not None and "GROUP_SIZE_M: tl.constexpr = 8" in grouped.source
    elided = get_operator("mask-elision").apply(grouped.source)
    assert elided is not None
    signature = elided.source[elided.source.index("def bmm_kernel"):elided.source.index("):")]
    assert signature.rstrip().endswith("GROUP_SIZE_M: tl.constexpr = 8")
    g = torch.Generator().manual_seed(11)
    case = Case("bmm-grouped-elided", elided.source,
                lambda: [(torch.randn(b, m, k, generator=g), torch.randn(b, k, n, generator=g))
                         for b, m, n, k in ((2, 64, 64, 64), (1, 96, 64, 128), (2, 37, 45, 50))],
                torch.bmm, rtol=1e-3, atol=1e-3)
    assert check(case, elided.source) <= 1.0
    back = get_operator("mask-elision").simplify(elided.source)
    assert back is not None and back.source == grouped.source
    ungrouped = get_operator("grouped-order").simplify(elided.source)  # its simplify sets the group to 1
    assert ungrouped is not None and "GROUP_SIZE_M: tl.constexpr = 1" in ungrouped.source
    assert "EVEN_K_M" in ungrouped.source
