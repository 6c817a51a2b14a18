"""int64-offsets casts indices, never data: a loaded value times a scalar argument is not an offset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from klineage.transforms.registry import get_operator

ROOT = Path(__file__).resolve().parents[2]


def test_a_loaded_value_times_a_float_argument_is_never_cast(cpu_validator: Any) -> None:
    source = (ROOT / "heldout/scaled_softmax/naive.py").read_text()
    rewrite = get_operator("int64-offsets").apply(source)
    assert rewrite is not None
    assert "tl.cast(x, tl.int64)" not in rewrite.source
    assert "tl.cast(row, tl.int64) * stride_x" in rewrite.source
    result = cpu_validator(seeds=1).validate(rewrite.source, ROOT / "heldout/scaled_softmax",
                                             gates=("static", "compile", "correctness"))
    assert result.verdict == "pass", [g.reason for g in result.gates if g.status == "fail"]
