"""The evaluation's arithmetic: re-basing runs whose vendor timings were stalled, budget-5 answers,
and the gain a skill made on the kernel it was applied to (pure functions of the result rows)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from . import load_bench

evaluation = load_bench("evaluate_agent")
profitability = load_bench("profitability")


def _case(shape: int, dtype: str, vendor_ms: float, ms: float) -> dict:
    return {"shape": {"M": shape}, "dtype": dtype, "speedup": vendor_ms / ms, "median_ms": ms}


def _row(method: str, start: list[dict], attempts: list[list[dict]], accepted: list[bool]) -> dict:
    trajectory = [{"call": i + 1, "verdict": "pass", "per_shape": cases, "accepted": ok,
                   "steps": [{"operator": "num-warps", "params": {}}]}
                  for i, (cases, ok) in enumerate(zip(attempts, accepted, strict=True))]
    return {"instance": "k", "method": method, "start": {"verdict": "pass", "per_shape": start},
            "trajectory": trajectory, "options": {}}


def test_a_stalled_vendor_timing_is_replaced_by_the_least_one_measured_for_the_case() -> None:
    clean = _row("a", [_case(1, "bf16", 1.0, 2.0)], [[_case(1, "bf16", 1.0, 0.5)]], [True])
    stalled = _row("b", [_case(1, "bf16", 1.0, 2.0)], [[_case(1, "bf16", 300.0, 1.0)]], [True])
    floor = evaluation.vendor_floor([clean, stalled])
    assert floor == {evaluation._case("k", {"M": 1}, "bf16"): pytest.approx(1.0)}
    assert evaluation.rebased_speedup(stalled, floor) == pytest.approx(1.0)  # 1 ms vendor / 1 ms kernel
    assert evaluation.rebased_speedup(clean, floor) == pytest.approx(2.0)


def test_the_budget_5_answer_is_the_best_so_far_after_call_5() -> None:
    row = {"best_so_far": [0.5, 0.6, 0.6, 0.7, 0.7, 0.8, 1.2], "budget": 10}
    assert evaluation.speedup_within(row, 5) == pytest.approx(0.8)
    assert evaluation.speedup_within(row, 10) == pytest.approx(1.2)
    only = _row("a", [_case(1, "bf16", 1.0, 2.0)], [[_case(1, "bf16", 1.0, 1.0)]] * 6, [False] * 6)
    only["trajectory"][5]["per_shape"] = [_case(1, "bf16", 1.0, 0.25)]
    floor = evaluation.vendor_floor([only])
    assert evaluation.rebased_speedup(only, floor, calls=5) == pytest.approx(1.0)
    assert evaluation.rebased_speedup(only, floor) == pytest.approx(4.0)


def test_a_skills_gain_is_measured_against_the_kernel_it_was_applied_to() -> None:
    before = {"per_shape": [_case(1, "bf16", 1.0, 2.0), _case(2, "bf16", 1.0, 4.0)]}
    after = {"per_shape": [_case(1, "bf16", 9.0, 1.0), _case(2, "bf16", 9.0, 4.0), _case(3, "bf16", 1, 1)]}
    assert profitability.grid_gain(before, after) == pytest.approx(math.sqrt(2.0))  # cases both timed
    assert profitability.grid_gain(before, {"per_shape": []}) is None


def test_the_walk_follows_the_kernels_the_agent_kept(tmp_path: Path) -> None:
    from klineage.kb.embedded_store import EmbeddedStore

    row = _row("a", [_case(1, "bf16", 1.0, 4.0)],
               [[_case(1, "bf16", 1.0, 2.0)], [_case(1, "bf16", 1.0, 3.0)], [_case(1, "bf16", 1.0, 1.0)]],
               [True, False, True])
    row["shapes"] = None

    gains = [o.gain for o in profitability.observations([{**row, "instance": "rmsnorm"}], EmbeddedStore(tmp_path))]
    assert gains == pytest.approx([2.0, 2 / 3, 2.0])  # 4->2 kept; 2->3 not kept; 2->1


def test_the_validator_cost_of_an_evaluation_is_split_by_gate_and_period(tmp_path: Path) -> None:
    import json
    import sqlite3
    from datetime import datetime

    validator_bench = load_bench("validator")
    path = tmp_path / "cache.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE results (key TEXT PRIMARY KEY, created TEXT NOT NULL, kernel_sha TEXT NOT NULL, "
                   "workload TEXT NOT NULL, doc TEXT NOT NULL)")
        for i, (created, wall, wait) in enumerate((("2026-12-05T10:00:00+00:00", 60.0, None),
                                                   ("2026-12-06T10:00:00+00:00", 10.0, 4.0),
                                                   ("2026-12-06T10:01:00+00:00", 20.0, 6.0))):
            metrics = {"gate_wall_s": wall, "worker_round_trip_s": wall / 2, "worker_busy_s": wall / 4}
            if wait is not None:
                metrics["lock_wait_s"] = wait
                metrics["held_alone_s"] = wait / 2
            doc = {"gpu": "G", "gates": [{"gate": "integrity", "status": "pass", "metrics": metrics},
                                         {"gate": "performance", "status": "skipped", "metrics": {}}]}
            db.execute("INSERT INTO results VALUES (?, ?, ?, ?, ?)", (str(i), created, "s", "w", json.dumps(doc)))
        # a job that also ran performance is stored a second time as its checks-only answer: not a candidate
        job = {"gpu": "G", "kernel_sha": "s", "date": "2026-12-06T10:02:00Z",
               "gates": [{"gate": "integrity", "status": "pass", "metrics": {"gate_wall_s": 30.0}},
                         {"gate": "performance", "status": "pass", "metrics": {"gate_wall_s": 6.0}}]}
        copy = {**job, "gates": [job["gates"][0], {"gate": "performance", "status": "skipped", "metrics": {}}]}
        for key, doc in (("full", job), ("checks", copy)):
            db.execute("INSERT INTO results VALUES (?, ?, ?, ?, ?)",
                       (key, "2026-12-06T10:02:00+00:00", "s", "w", json.dumps(doc)))
    before = validator_bench.from_cache(path, until=datetime.fromisoformat("2026-12-06T00:00:00+00:00"))
    after = validator_bench.from_cache(path, since=datetime.fromisoformat("2026-12-06T00:00:00+00:00"),
                                       until=datetime.fromisoformat("2026-12-06T10:02:00+00:00"))
    copied = validator_bench.from_cache(path, since=datetime.fromisoformat("2026-12-06T10:02:00+00:00"))
    assert copied["candidates"] == 1 and copied["gate_p50_s"] == {"integrity": 30.0, "performance": 6.0}
    assert before["candidates"] == 1 and before["gate_p50_s"] == {"integrity": 60.0}
    assert "integrity" not in before["lock_wait_p50_s"]  # not recorded then: not shown as zero
    assert after["candidates"] == 2 and after["gate_p50_s"] == {"integrity": 15.0}
    assert after["lock_wait_p50_s"] == {"integrity": 5.0}
    assert after["worker_round_trip_p50_s"] == {"integrity": 7.5} and after["worker_busy_p50_s"] == {"integrity": 3.75}
    assert after["candidates_per_minute"] == 2.0  # two results written 60 s apart
    assert after["held_alone_p50_s"] == {"integrity": 2.5} and after["alone_per_candidate_p50_s"] == 2.5
    assert after["alone_share_of_span"] == pytest.approx(5.0 / 60.0)  # 2 + 3 s alone over 60 s
    assert before["alone_per_candidate_p50_s"] is None  # not recorded then
    with pytest.raises(SystemExit, match="in that period"):
        validator_bench.from_cache(path, since=datetime.fromisoformat("2027-01-01T00:00:00+00:00"))


def test_plots_name_the_card_their_rows_were_measured_on() -> None:
    rows = [{"gpu": "NVIDIA H100 80GB HBM3 (sm_90)"}, {"gpu": "NVIDIA H100 80GB HBM3 (sm_90)"}]
    assert evaluation._card(rows) == "h100"
    assert evaluation._card([{"gpu": "NVIDIA H200 (sm_90)"}]) == "h200"
    assert evaluation._card([*rows, {"gpu": "NVIDIA H200 (sm_90)"}]) == "mixed"
    assert evaluation._card([{"gpu": "none (CPU)"}]) == "gpu"


def test_the_default_instance_order_takes_each_family_in_turn() -> None:
    from klineage.agent import load_problem

    order = evaluation.instances(None)
    families = [load_problem(None, folder).family for folder in order]
    kinds = sorted(set(families))
    assert len(order) >= 22 and len(set(order)) == len(order)
    assert families[:len(kinds)] == kinds  # the first round: one instance of every family
    assert [p.name for p in evaluation.instances("rmsnorm,bmm")] == ["rmsnorm", "bmm"]
    with pytest.raises(SystemExit, match="nope"):
        evaluation.instances("rmsnorm,nope")


def test_the_table_keeps_one_agent_versions_rows_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import argparse
    import json

    def row(instance: str, method: str, agent: str, speedup: float) -> dict:
        return {"instance": instance, "family": "f", "method": method, "options": {"agent": agent, "timing_method": 2},
                "start": {"speedup": 0.5}, "best": {"speedup": speedup}, "calls_used": 1, "calls_wasted": 0,
                "calls_to_95pct": 1, "best_so_far": [speedup], "trajectory": []}

    results = tmp_path / "rows.jsonl"
    rows = [row("a", "none", "old0", 2.0), row("a", "klineage", "old0", 1.0), row("b", "none", "new1", 3.0),
            row("b", "klineage", "new1", 4.0)]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evaluation.table(argparse.Namespace(results=results, no_plots=True, agent=None, partial=None))
    mixed = capsys.readouterr().out
    assert "2 agent version(s)" in mixed and "| a |" in mixed
    evaluation.table(argparse.Namespace(results=results, no_plots=True, agent="last", partial=None))
    newest = capsys.readouterr().out
    assert "1 agent version(s) (new1)" in newest and "| a |" not in newest and "| b |" in newest
    with pytest.raises(SystemExit, match="no row"):
        evaluation.table(argparse.Namespace(results=results, no_plots=True, agent="zzz", partial=None))


def test_runs_the_validator_stopped_count_only_as_lower_bounds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run a cache-only validator could not finish (its row in --partial) fills only the cells without a
    result, marked ≥, and its method's geomean is then a lower bound too."""
    import argparse

    def row(instance: str, method: str, speedup: float, interrupted: str | None = None) -> dict:
        return {"instance": instance, "family": "f", "method": method, "options": {"agent": "v1", "timing_method": 2},
                "start": {"speedup": 0.5}, "best": {"speedup": speedup}, "calls_used": 1, "calls_wasted": 0,
                "calls_to_95pct": 1, "best_so_far": [0.5, speedup], "trajectory": [], "interrupted": interrupted}

    results, partial = tmp_path / "rows.jsonl", tmp_path / "rows.partial.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in [row("a", "none", 2.0), row("b", "none", 1.0)]))
    partial.write_text("".join(json.dumps(r) + "\n" for r in [row("a", "none", 9.0, "call 2 never measured"),
                                                                row("c", "none", 4.0, "call 3 never measured")]))
    evaluation.table(argparse.Namespace(results=results, no_plots=True, agent=None, partial=partial))
    out = capsys.readouterr().out
    assert "| a | f | 0.50 | 2.00 |" in out and "| c | f | 0.50 | ≥4.00 |" in out
    assert "| none | 3 | ≥ 2.000 |" in out  # (2 · 1 · 4) ** (1/3)
    evaluation.table(argparse.Namespace(results=results, no_plots=True, agent=None, partial=None))
    assert "| c |" not in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no such results file"):
        evaluation.table(argparse.Namespace(results=results, no_plots=True, agent=None, partial=tmp_path / "x"))


def test_runs_finished_in_earlier_calls_count_as_done(tmp_path: Path) -> None:
    options = {"agent": "abc", "rep_ms": 25.0}
    committed, warm = tmp_path / "committed.jsonl", tmp_path / "warm.jsonl"
    committed.write_text(json.dumps({"instance": "bmm", "method": "none", "budget": 10, "options": options}) + "\n")
    warm.write_text(json.dumps({"instance": "rope", "method": "klineage", "budget": 10,
                                "options": {"rep_ms": 25.0, "agent": "abc"}}) + "\n")
    done = evaluation._done(committed, warm, tmp_path / "not-there.jsonl")
    key = json.dumps(options, sort_keys=True)
    assert done == {("bmm", "none", 10, key), ("rope", "klineage", 10, key)}  # option order does not matter
