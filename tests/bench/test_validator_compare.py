"""``bench/validator.py --compare``: the before/after of a change, read from two reports of the same candidates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from . import load_bench

bench = load_bench("validator")


def _report(p50: float, integrity: float, speedups: dict[str, float | None]) -> dict[str, Any]:
    rows = [{"label": k, "speedup": v, "wall_s": p50} for k, v in speedups.items()]
    return {"modes": {"batched": {"candidate_p50_s": p50, "candidate_p90_s": p50 + 1, "rows": rows,
                                  "gate_p50_s": {"compile": 1.3, "integrity": integrity}}}}


def test_compare_gives_each_side_and_how_far_speedups_moved(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(_report(8.2, 4.4, {"a": 1.50, "b": 0.30, "c": None})))
    after.write_text(json.dumps(_report(5.1, 1.3, {"a": 1.53, "b": 0.30, "c": 0.9})))
    found = bench.compare_solo(before, after)["modes"]["batched"]
    assert found["candidate_p50_s"] == [8.2, 5.1]
    assert found["gate_p50_s"]["integrity"] == [4.4, 1.3]
    assert set(found["speedup_moved_pct"]) == {"a", "b"}  # c was not timed before: nothing to compare
    assert found["speedup_moved_max_pct"] == pytest.approx(2.0)


def test_compare_names_a_missing_report(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such file"):
        bench.compare_solo(tmp_path / "none.json", tmp_path / "none.json")
