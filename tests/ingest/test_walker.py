"""The walker's policy, on toy operators and a scripted validator (the real gates have their own tests,
and ``test_walk_rowsum_under_the_interpreter`` walks a real kernel through the real validator).

Toy kernels are sources with ``# OPT <name>`` marker lines; a toy operator removes its marker. The
scripted validator times a kernel as the product of the slowdowns of the markers it lacks, and fails
correctness when a marker listed in ``breaks`` is missing.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from klineage.ingest.replay import replay_report, replay_source
from klineage.ingest.walker import Walker, WalkOptions, accepted_path, cost, naive_end, start_kernel
from klineage.schema.gate_result import GateOutcome, GateResult
from klineage.schema.ids import kernel_sha
from klineage.transforms.operator import Anchor, Operator, Rewrite, make_rewrite

ROWSUM = Path(__file__).resolve().parents[1] / "validator" / "workloads" / "rowsum"
SHAPES = ({"rows": 64, "cols": 64}, {"rows": 4096, "cols": 4096})


class MarkerOperator(Operator):
    """Removes / adds the line ``# OPT <id>``."""

    name = intent = carrier = anchor_predicate = anchor_description = "toy"

    def __init__(self, op_id: str) -> None:
        self.id = op_id  # type: ignore[misc]
        self.line = f"# OPT {op_id}\n"

    def detect(self, source: str) -> list[Anchor]:
        return [Anchor("present", 1, 1, "marker")] if self.line in source else [Anchor("applicable", 1, 1, "x")]

    def simplify(self, source: str) -> Rewrite | None:
        return make_rewrite(source, source.replace(self.line, ""), self.id, {}, "simplify") if self.line in source \
            else None

    def apply(self, source: str, **params: Any) -> Rewrite | None:
        return None if self.line in source else make_rewrite(source, source + self.line, self.id, {}, "apply")


class ScriptedValidator:
    """Times = product of slowdowns of the missing markers (shape-dependent); counts jobs."""

    def __init__(self, slowdown: Mapping[str, tuple[float, float]], breaks: Sequence[str] = ()) -> None:
        self.slowdown = slowdown
        self.breaks = set(breaks)
        self.jobs: list[tuple[str, tuple[str, ...]]] = []
        self.cache: dict[tuple[str, tuple[str, ...]], GateResult] = {}

    def validate(self, source: str, workload_dir: Any, gates: Sequence[str] = (), shapes: Any = None) -> GateResult:
        key = (kernel_sha(source), tuple(gates))
        if key in self.cache:
            return self.cache[key]
        self.jobs.append(key)
        missing = [op for op in self.slowdown if f"# OPT {op}\n" not in source]
        outcomes = [GateOutcome("static", "pass")]
        if "correctness" in gates:
            broken = sorted(self.breaks & set(missing))
            outcomes.append(GateOutcome("correctness", "fail" if broken else "pass",
                                        f"wrong results without {broken}" if broken else ""))
        if "performance" in gates:
            rows = []
            for i, shape in enumerate(SHAPES):
                ms = 1.0
                for op in missing:
                    ms *= self.slowdown[op][i]
                rows.append({"shape": shape, "dtype": "fp32", "candidate": {"median_ms": ms},
                             "vendor": {"median_ms": 1.5}, "speedup": 1.5 / ms})
            outcomes.append(GateOutcome("performance", "pass", "timed", {"rows": rows}))
        result = GateResult(kernel_sha(source), "Toy GPU (sm_90)", {"torch": "x"}, tuple(outcomes), "rowsum")
        self.cache[key] = result
        return result


def _workload(tmp_path: Path, markers: Sequence[str]) -> Path:
    folder = tmp_path / "rowsum"
    shutil.copytree(ROWSUM, folder)
    source = (folder / "kernel.py").read_text(encoding="utf-8")
    (folder / "kernel.py").write_text(source + "".join(f"# OPT {m}\n" for m in markers), encoding="utf-8")
    return folder


def test_accepts_least_cost_first_and_records_rejections(tmp_path: Path) -> None:
    ops = [MarkerOperator(i) for i in ("big", "small", "mixed", "unsafe")]
    validator = ScriptedValidator({"big": (1.5, 2.0), "small": (1.01, 1.02), "mixed": (0.9, 1.3),
                                   "unsafe": (1.0, 1.0)}, breaks=["unsafe"])
    doc = Walker(_workload(tmp_path, ["big", "small", "mixed", "unsafe"]), validator, ops).run()
    order = [s["operator"] for s in accepted_path(doc)]
    assert order == ["small", "mixed", "big"]  # geomean costs 1.015, 1.082, 1.732
    rejected = [s for s in doc["steps"] if not s["accepted"]]
    assert [(s["operator"], s["gate"]) for s in rejected] == [("unsafe", "correctness")]
    assert "unsafe" in rejected[0]["reason"]
    assert doc["complete"] is True and doc["sample"] is False
    assert "# OPT" not in naive_end(doc).replace("# OPT unsafe", "")
    big = accepted_path(doc)[-1]
    assert [round(t["to_ms"] / t["from_ms"], 6) for t in big["timings"]] == [1.5, 2.0]
    # every kernel a step points at is in the document, with its hash
    shas = {k["sha"] for k in doc["kernels"]}
    assert all(s["from"] in shas and s["to"] in shas for s in doc["steps"])


def test_lazy_remeasurement_only_for_the_cheapest(tmp_path: Path) -> None:
    ops = [MarkerOperator(f"op{i}") for i in range(5)]
    slow = {f"op{i}": (1.0 + 0.1 * i, 1.0 + 0.1 * i) for i in range(5)}
    validator = ScriptedValidator(slow)
    doc = Walker(_workload(tmp_path, list(slow)), validator, ops).run()
    assert [s["operator"] for s in accepted_path(doc)] == [f"op{i}" for i in range(5)]
    perf_jobs = [k for k in validator.jobs if "performance" in k[1]]
    # start + 5 candidates at the expert + one re-measurement per later step (independent costs)
    assert len(perf_jobs) == 1 + 5 + 4


class RaisingOperator(MarkerOperator):
    """A buggy operator: its simplify raises."""

    def simplify(self, source: str) -> Rewrite | None:
        raise ValueError("overlapping edits at 7")


def test_an_operator_that_raises_is_reported_and_dropped_not_fatal(tmp_path: Path) -> None:
    ops = [MarkerOperator("good"), RaisingOperator("buggy")]
    events = []
    doc = Walker(_workload(tmp_path, ["good", "buggy"]), ScriptedValidator({"good": (1.2, 1.2), "buggy": (1, 1)}),
                 ops, on_event=events.append).run()
    assert [s["operator"] for s in doc["steps"]] == ["good"] and doc["complete"] is True
    errors = [e.message for e in events if e.kind == "error"]
    assert errors == ["buggy: simplify raised ValueError: overlapping edits at 7"]  # once, then dropped


def test_budget_stops_incomplete_and_the_cache_resumes(tmp_path: Path) -> None:
    ops = [MarkerOperator(i) for i in ("a", "b", "c")]
    validator = ScriptedValidator({"a": (1.1, 1.1), "b": (1.2, 1.2), "c": (1.3, 1.3)})
    folder = _workload(tmp_path, ["a", "b", "c"])
    partial = Walker(folder, validator, ops, options=WalkOptions(budget_s=0.0)).run()
    assert partial["complete"] is False and not accepted_path(partial)
    full = Walker(folder, validator, ops).run()
    jobs_before = len(validator.jobs)
    again = Walker(folder, validator, ops).run()
    assert len(validator.jobs) == jobs_before, "a resumed walk must come entirely from the cache"
    assert [s["operator"] for s in accepted_path(again)] == [s["operator"] for s in accepted_path(full)]
    assert full["complete"] is True


def test_a_walk_starts_from_the_given_kernel_and_the_document_records_it(tmp_path: Path) -> None:
    """``start_source`` (a lineage's recorded start) wins over the workload's kernel file, which may
    have moved on since; ``start_kernel`` reads it back from the document."""
    ops = [MarkerOperator(i) for i in ("a", "b")]
    folder = _workload(tmp_path, ["a"])  # the kernel file today: only marker a
    earlier = (folder / "kernel.py").read_text(encoding="utf-8") + "# OPT b\n"
    doc = Walker(folder, ScriptedValidator({"a": (1.1, 1.1), "b": (1.2, 1.2)}), ops, start_source=earlier).run()
    assert doc["start"] == kernel_sha(earlier) and start_kernel(doc) == earlier
    assert [s["operator"] for s in accepted_path(doc)] == ["a", "b"]
    with pytest.raises(KeyError, match="does not hold its starting kernel"):
        start_kernel({**doc, "kernels": [k for k in doc["kernels"] if k["sha"] != doc["start"]]})


class ClockedValidator(ScriptedValidator):
    """A performance job (alone or with the checks) takes ``perf_s`` on a fake clock; checks are free."""

    def __init__(self, clock: list[float], perf_s: float, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock, self.perf_s, self.perf_ends = clock, perf_s, []

    def validate(self, source: str, workload_dir: Any, gates: Sequence[str] = (), shapes: Any = None) -> GateResult:
        fresh = (kernel_sha(source), tuple(gates)) not in self.cache
        result = super().validate(source, workload_dir, gates, shapes)
        if fresh and "performance" in gates:
            self.clock[0] += self.perf_s
            self.perf_ends.append(self.clock[0])
        return result


def test_budget_never_starts_a_job_that_would_end_past_it(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A device call has a hard limit: a batch of performance jobs stops before the one that would
    overrun the budget (the call-2 walk of 2026-12-03 ran 55 s past it and was killed)."""
    import klineage.ingest.walker as walker_module

    clock = [0.0]
    monkeypatch.setattr(walker_module.time, "monotonic", lambda: clock[0])
    ops = [MarkerOperator(i) for i in ("a", "b", "c")]
    validator = ClockedValidator(clock, 10.0, {"a": (1.1, 1.1), "b": (1.2, 1.2), "c": (1.3, 1.3)})
    folder = _workload(tmp_path, ["a", "b", "c"])
    partial = Walker(folder, validator, ops, options=WalkOptions(budget_s=35.0)).run()
    # start job ends at 10 s; the batch times a (20 s) and b (30 s); c would end at 40 s > 35 s.
    assert validator.perf_ends == [10.0, 20.0, 30.0]
    assert partial["complete"] is False and not accepted_path(partial)
    full = Walker(folder, validator, ops).run()
    assert [s["operator"] for s in accepted_path(full)] == ["a", "b", "c"] and full["complete"] is True


def test_failing_start_is_an_error(tmp_path: Path) -> None:
    from klineage.ingest.walker import WalkError

    validator = ScriptedValidator({"x": (1.0, 1.0)}, breaks=["x"])
    with pytest.raises(WalkError, match="correctness"):
        Walker(_workload(tmp_path, []), validator, [MarkerOperator("x")]).run()


def test_replay_rebuilds_the_start_and_compares_per_case(tmp_path: Path) -> None:
    ops = {i: MarkerOperator(i) for i in ("a", "b")}
    validator = ScriptedValidator({"a": (1.2, 1.1), "b": (1.4, 1.3)})
    folder = _workload(tmp_path, ["a", "b"])
    doc = Walker(folder, validator, list(ops.values())).run()
    import klineage.ingest.replay as replay_module

    original = replay_module.get_operator
    replay_module.get_operator = lambda op_id: ops[op_id]  # type: ignore[assignment]
    try:
        source, steps = replay_source(doc)
    finally:
        replay_module.get_operator = original  # type: ignore[assignment]
    assert [s.operator for s in steps] == ["b", "a"] and all(s.applied for s in steps)
    start = next(k["source"] for k in doc["kernels"] if k["sha"] == doc["start"])
    assert sorted(source.splitlines()) == sorted(start.splitlines())
    expert = validator.validate(start, folder, ("static", "performance"))
    rebuilt = validator.validate(source, folder, ("static", "performance"))
    report = replay_report("rowsum", steps, expert, rebuilt)
    assert report.passed and len(report.cases) == 2
    naive = validator.validate(naive_end(doc), folder, ("static", "performance"))
    slow = replay_report("rowsum", steps, expert, naive)
    assert not slow.passed and slow.worst is not None and slow.worst.ratio < 0.9


# Which skills generic ``apply`` puts back on each committed naive end. The H200 generic replays of
# 2026-12-03 found no place for online-softmax on cross_entropy and softmax (a scaled exponent) and for
# num-warps and persistent on gemm (a tensor-descriptor kernel; grid functions), num-warps and pipelining
# on attention (loop in a jit helper); those apply now. The rest is the gap of lineages/README.md. On attention,
# generic autotune comes after generic num-warps, whose launch computes ``num_warps=...``: every triton.Config sets
# num_warps too, and Triton refuses the pair ("got multiple values"), so autotune refuses that launch (until
# 2026-12-07 it emitted the pair, a kernel that fails on the GPU).
GENERIC_NOT_APPLIED = {
    "cross_entropy": set(),
    "gemm": set(),
    "layernorm": {"multi-row"},
    "softmax": {"multi-row"},
    "attention": {"mask-elision", "autotune"},
}


@pytest.mark.parametrize("workload", sorted(GENERIC_NOT_APPLIED))
def test_replays_of_the_committed_h200_lineages(workload: str) -> None:
    """Recorded parameters rebuild the expert byte for byte (and the report says identical instead of
    claiming a timing); generic ``apply`` gives another kernel, which is what the GPU replay times."""
    import json

    path = Path(__file__).resolve().parents[2] / "lineages" / f"{workload}.lineage.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    recorded, steps = replay_source(doc)
    assert kernel_sha(recorded) == doc["start"] and all(s.applied for s in steps)
    generic, generic_steps = replay_source(doc, recorded=False)
    assert kernel_sha(generic) != doc["start"]
    assert [s.operator for s in generic_steps] == [s.operator for s in steps]
    assert {s.operator for s in generic_steps if not s.applied} == GENERIC_NOT_APPLIED[workload]
    result = GateResult(doc["start"], "H200", {}, (GateOutcome("static", "pass"),))
    report = replay_report(workload, steps, result, result)
    assert report.identical and report.to_json()["identical"] is True and report.mode == "recorded"


def test_cost_is_the_geomean_of_time_ratios() -> None:
    from klineage.ingest.walker import Measurement

    def m(times: dict[str, float]) -> Measurement:
        result = GateResult("0" * 64, "g", {}, (GateOutcome("static", "pass"),))
        return Measurement("0" * 64, result, None, times)

    assert cost(m({"a": 1.0, "b": 2.0}), m({"a": 2.0, "b": 2.0})) == pytest.approx(2**0.5)
    assert cost(m({"a": 1.0}), m({"b": 1.0})) is None


class _Recording:
    """A validator that records the gates of every job it did not answer from its cache."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.ran = inner, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def validate(self, source: str, workload_dir: Any, gates: Sequence[str] = (), shapes: Any = None) -> Any:
        result = self.inner.validate(source, workload_dir, gates, shapes)
        if not self.inner.last_cached:
            self.ran.append(tuple(gates))
        return result


@pytest.fixture(scope="module")
def rowsum_walk(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], _Recording, Path]:
    """One real walk of rowsum through the real validator under the interpreter, two real operators, on a
    cache of its own that starts empty: the document, the recording validator, the cache. Both tests
    below read this one walk (it takes most of their time)."""
    from klineage.transforms.registry import get_operator
    from klineage.validator import LocalValidator

    cache = tmp_path_factory.mktemp("rowsum-walk") / "cache.sqlite"
    ops = [get_operator("num-warps"), get_operator("int64-offsets")]
    first = _Recording(LocalValidator(cache=cache, device="cpu", seeds=1, timing={"rep_ms": 50.0}))
    doc = Walker(ROWSUM, first, ops, options=WalkOptions(parallel=2)).run()
    return doc, first, cache


def test_walk_rowsum_under_the_interpreter(rowsum_walk: tuple[dict[str, Any], _Recording, Path]) -> None:
    """A real walk through the real validator (interpreter mode: no timings), two real operators."""
    from klineage.schema.lineage_document import parse_lineage_document

    doc = rowsum_walk[0]
    assert [s["operator"] for s in accepted_path(doc)] == ["num-warps", "int64-offsets"]
    assert doc["complete"] is True
    naive = naive_end(doc)
    assert "num_warps" not in naive and "tl.int64" not in naive
    for step in doc["steps"]:
        ran = [(g["gate"], g["status"]) for run in step["gate_runs"] for g in run["gates"]]
        assert ("correctness", "pass") in ran and ("performance", "pass") not in ran
    assert all(not s["timings"] for s in doc["steps"]), "the interpreter never invents a timing"
    parse_lineage_document(doc)  # the document the walker writes is a valid lineage document


def test_a_walk_under_new_timing_options_checks_nothing_again(
        rowsum_walk: tuple[dict[str, Any], _Recording, Path]) -> None:
    """Re-walking with other timing options (e.g. a host lead) replays every cached checking job and
    runs only performance jobs: the checks do not depend on how the times are taken."""
    from klineage.ingest.walker import PERF_GATES
    from klineage.transforms.registry import get_operator
    from klineage.validator import LocalValidator

    _, first, cache = rowsum_walk
    ops = [get_operator("num-warps"), get_operator("int64-offsets")]
    assert any("correctness" in gates for gates in first.ran)
    again = _Recording(LocalValidator(cache=cache, device="cpu", seeds=1,
                                      timing={"rep_ms": 50.0, "host_lead_us": 200.0}))
    doc = Walker(ROWSUM, again, ops, options=WalkOptions(parallel=2)).run()
    assert again.ran and all(tuple(gates) == PERF_GATES for gates in again.ran), again.ran
    assert [s["operator"] for s in accepted_path(doc)] == ["num-warps", "int64-offsets"]
