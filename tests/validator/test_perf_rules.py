"""Which timed cases the performance gate times again (pure rules; no GPU needed)."""

from __future__ import annotations

from klineage.validator.perf import SPEEDUP_FLAG, SPREAD_LIMIT, suspect_case


def _stats(median: float, spread: float = 1.05) -> dict[str, float]:
    return {"median_ms": median, "p10_ms": median / spread ** 0.5, "p90_ms": median * spread ** 0.5}


def test_a_sound_case_is_not_timed_again() -> None:
    assert suspect_case(_stats(0.05), _stats(0.04), roofline_floor_ms=0.01) is None
    assert suspect_case(_stats(0.05), None, roofline_floor_ms=None) is None


def test_a_speedup_beyond_the_flag_is_timed_again() -> None:
    # measured on the H200: the vendor of a 50 us bmm timed at 15.7 ms while other threads held the GIL
    why = suspect_case(_stats(0.0535), _stats(15.73), roofline_floor_ms=None)
    assert why is not None and "294" in why
    assert suspect_case(_stats(1.0), _stats(SPEEDUP_FLAG * 0.99), None) is None


def test_a_time_under_the_roofline_floor_is_timed_again() -> None:
    assert suspect_case(_stats(0.009), _stats(0.02), roofline_floor_ms=0.01) == "faster than the roofline floor"


def test_a_time_that_moved_while_measured_is_timed_again_on_either_side() -> None:
    wide = SPREAD_LIMIT * 1.5
    assert "candidate" in (suspect_case(_stats(0.05, wide), _stats(0.05), None) or "")
    assert "baseline" in (suspect_case(_stats(0.05), _stats(0.05, wide), None) or "")
    assert suspect_case(_stats(0.05, SPREAD_LIMIT * 0.9), _stats(0.05, SPREAD_LIMIT * 0.9), None) is None
