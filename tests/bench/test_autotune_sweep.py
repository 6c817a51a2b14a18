"""The shortened-sweep comparison's arithmetic (``bench/autotune_sweep.py``): medians per side, the ratio
read against the 2 % target, the worst case, and the run that says it measured nothing without a GPU."""

from __future__ import annotations

import pytest

from . import load_bench

sweep = load_bench("autotune_sweep")


def _run(side: str, speedups: list[float], alone: float) -> dict:
    cases = {f"case{i}": s for i, s in enumerate(speedups)}
    geomean = 1.0
    for s in speedups:
        geomean *= s
    return {"label": "x", "side": side, "speedup": geomean ** (1 / len(speedups)), "cases": cases,
            "held_alone_s": alone, "verdict": "pass", "failed_gate": None}


def test_compare_takes_medians_per_side_and_the_worst_case():
    runs = [_run("default", [1.0, 2.0], 10.0), _run("short", [1.0, 2.1], 2.0),
            _run("default", [1.02, 2.0], 12.0), _run("short", [1.0, 2.1], 3.0)]
    s = sweep.compare(runs)
    assert s["measured"]
    assert s["median_speedup"]["short"] / s["median_speedup"]["default"] == pytest.approx(s["ratio"])
    assert s["ratio"] == pytest.approx((2.1 ** 0.5) / ((2.0 ** 0.5 + (2.04) ** 0.5) / 2))
    assert s["worst_case_deviation"] == pytest.approx(0.05)  # case 1: 2.1 against 2.0
    assert s["own_spread"]["short"] == pytest.approx(0.0)
    assert s["held_alone_p50_s"] == {"default": 11.0, "short": 2.5}


def test_a_side_without_a_timed_run_is_not_measured():
    runs = [_run("default", [1.0], 1.0), {**_run("short", [1.0], 1.0), "speedup": None}]
    assert sweep.compare(runs) == {"measured": False}


def _found(cuda: bool, summary: dict, runs: list[dict]) -> dict:
    return {"autotune_rep_ms": 20.0, "repeats": 1, "device": "gpu" if cuda else "none", "cuda": cuda,
            "summary": summary, "runs": runs}


def test_report_flags_a_candidate_outside_two_percent():
    inside = sweep.compare([_run("default", [1.0], 9.0), _run("short", [1.01], 2.0)])
    outside = sweep.compare([_run("default", [1.0], 9.0), _run("short", [0.95], 2.0)])
    lines, ok = sweep.report(_found(True, {"a": inside}, []))
    assert ok and not any("OUTSIDE" in line for line in lines)
    lines, ok = sweep.report(_found(True, {"a": inside, "b": outside}, []))
    assert not ok and sum("OUTSIDE" in line for line in lines) == 1


def test_report_without_a_gpu_prints_no_figure_and_does_not_pass():
    runs = [{**_run("default", [1.0], 0.0), "speedup": None, "label": "gemm:expert"}]
    lines, ok = sweep.report(_found(False, {"gemm:expert": {"measured": False}}, runs))
    assert not ok
    assert "no speedup was measured" in lines[-1] and "x " not in lines[-1]


def test_a_missing_workload_is_named():
    with pytest.raises(SystemExit, match=r"workloads/nope/expert\.py"):
        sweep.candidates(["nope"], [], 4)
