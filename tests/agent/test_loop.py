"""The loop's contract: the budget, never a failed kernel returned, re-planning after a failure.

The validator here is scripted (a verdict and a speedup per candidate, decided by what the candidate's
source contains): these tests pin the loop's bookkeeping, not the gates, which have their own tests;
the end-to-end test at the bottom runs the real validator under the interpreter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klineage.agent import load_problem, optimize
from klineage.agent.moves import Move, single
from klineage.agent.state import AgentState
from klineage.schema.gate_result import GATES, NO_GPU, GateOutcome, GateResult
from klineage.schema.ids import kernel_sha

ROOT = Path(__file__).resolve().parents[2]
Rule = Callable[[str], tuple[str | None, float]]  # source -> (failing gate or None, speedup)


@dataclass
class ScriptedValidator:
    """Answers like the validator: every gate passes unless ``rule`` names a failing one."""

    rule: Rule
    calls: list[str] = field(default_factory=list)

    def validate(self, source: str, workload: Any, gates: Any = GATES, shapes: Any = None) -> GateResult:
        self.calls.append(source)
        failing, speedup = self.rule(source)
        outcomes, failed = [], False
        for gate in GATES:
            if failed:
                outcomes.append(GateOutcome(gate, "skipped", "earlier gate failed"))
            elif gate == failing:
                outcomes.append(GateOutcome(gate, "fail", f"{gate} failed (scripted)"))
                failed = True
            elif gate == "performance":
                rows = [{"shape": {"M": 64}, "dtype": "bf16", "speedup": speedup, "candidate": {"median_ms": 1.0}}]
                outcomes.append(GateOutcome(gate, "pass", "timed", {"geomean_speedup": speedup, "rows": rows}))
            else:
                outcomes.append(GateOutcome(gate, "pass", "ok"))
        return GateResult(kernel_sha(source), "scripted", {}, tuple(outcomes), "rmsnorm", "2026-12-04")


@dataclass
class ListPlanner:
    """Proposes the given moves in order (minus those tried), like the real planners' filtering."""

    moves: list[Move]
    name: str = "list"
    seen_failures: list[str] = field(default_factory=list)

    def plan(self, state: AgentState) -> list[Move]:
        self.seen_failures = [a.failed_gate for a in state.attempts if a.failed_gate]
        broken = state.broken_operators()
        return [m for m in self.moves if m.key() not in state.tried() and not set(m.operators) & broken]


def _problem() -> Any:
    return load_problem(None, ROOT / "heldout" / "rmsnorm")


def _speed(source: str) -> tuple[str | None, float]:
    if "eviction_policy" in source:
        return "correctness", 0.0
    return None, 1.0 + 0.2 * source.count("num_warps") + 0.1 * source.count("int64")


MOVES = [single("eviction-hints"), single("num-warps", {"num_warps": 8}), single("int64-offsets"),
         single("num-warps", {"num_warps": 16})]


def test_the_loop_keeps_the_best_passing_kernel_and_never_a_failed_one() -> None:
    validator = ScriptedValidator(_speed)
    planner = ListPlanner(list(MOVES))
    report = optimize(_problem(), planner, validator, budget=10)
    assert report.calls_used == len(validator.calls) - 1  # the start is validated outside the budget
    failed = [a for a in report.trajectory if a.verdict != "pass"]
    assert [a.failed_gate for a in failed] == ["correctness"]
    assert report.calls_wasted == 1
    assert report.best is not None and report.best.verdict == "pass"
    assert "eviction_policy" not in report.best_source
    assert report.best.speedup == max(a.speedup for a in report.trajectory if a.verdict == "pass")
    assert report.best_so_far()[0] == report.start.speedup
    assert report.best_so_far()[-1] == report.best.speedup
    # the failure went back to the planner, and the reverted kernel was the next move's base
    assert "correctness" in planner.seen_failures
    assert all("eviction_policy" not in s for s in validator.calls[2:])


def test_the_budget_is_never_exceeded() -> None:
    validator = ScriptedValidator(_speed)
    report = optimize(_problem(), ListPlanner(list(MOVES)), validator, budget=2)
    assert report.calls_used == 2 and len(validator.calls) == 3
    none = optimize(_problem(), ListPlanner(list(MOVES)), ScriptedValidator(_speed), budget=0)
    assert none.calls_used == 0 and none.best_source == _problem().source
    with pytest.raises(ValueError, match="budget"):
        optimize(_problem(), ListPlanner([]), ScriptedValidator(_speed), budget=-1)


def test_a_validator_that_stops_answering_mid_run_leaves_the_report_of_what_was_judged() -> None:
    """Call 2 cannot be judged (a service gone, a cache-only validator that never measured it): the report
    keeps the start and call 1, says where it stopped, and an unjudgeable start still raises."""
    from klineage.validator import ValidatorUnavailable

    class GoneAfter(ScriptedValidator):
        def validate(self, source: str, workload: Any, gates: Any = GATES, shapes: Any = None) -> GateResult:
            if len(self.calls) == 2:
                raise ValidatorUnavailable("validator at http://gpu:8100 unreachable")
            return super().validate(source, workload, gates, shapes)

    validator = GoneAfter(_speed)
    report = optimize(_problem(), ListPlanner(list(MOVES)), validator, budget=4)
    assert report.calls_used == 1 and len(validator.calls) == 2
    assert report.interrupted is not None and report.interrupted.startswith("call 2 (")
    assert "unreachable" in report.interrupted and report.to_dict()["interrupted"] == report.interrupted
    assert report.trajectory[0].failed_gate == "correctness" and report.best_so_far() == [1.0, 1.0]
    assert report.best is not None and report.best_source == _problem().source
    complete = optimize(_problem(), ListPlanner(list(MOVES)), ScriptedValidator(_speed), budget=1)
    assert complete.interrupted is None
    with pytest.raises(ValidatorUnavailable):
        optimize(_problem(), ListPlanner(list(MOVES)), GoneAfter(_speed, calls=["x", "y"]), budget=1)


def test_a_failed_start_is_never_returned() -> None:
    always_wrong = ScriptedValidator(lambda source: ("correctness", 0.0))
    report = optimize(_problem(), ListPlanner(list(MOVES)), always_wrong, budget=3)
    assert report.best is None and report.best_source is None
    assert report.calls_wasted == report.calls_used == 3  # a correctness failure: a move may still fix it


def test_a_start_that_never_reaches_its_kernels_stops_the_loop_once_moves_fail_alike() -> None:
    """run() cannot take the workload's inputs: every candidate fails at compile exactly like the start, so
    after SAME_AS_START of them the loop stops and says why instead of spending the budget."""
    from klineage.agent.loop import SAME_AS_START

    never_runs = ScriptedValidator(lambda source: ("compile", 0.0))
    report = optimize(_problem(), ListPlanner(list(MOVES)), never_runs, budget=len(MOVES))
    assert report.best is None and report.calls_used == SAME_AS_START < len(MOVES)
    assert any("failed the same way" in note and "compile" in note for note in report.notes)
    start = _problem().source  # the start fails at compile, a candidate fails differently: the loop goes on
    mixed = ScriptedValidator(lambda source: ("compile", 0.0) if source == start else ("correctness", 0.0))
    assert optimize(_problem(), ListPlanner(list(MOVES)), mixed, budget=3).calls_used == 3


def test_on_a_gpu_a_failed_start_still_leaves_every_candidate_timed() -> None:
    start = _problem().source
    validator = ScriptedValidator(lambda source: ("correctness", 0.0) if source == start else _speed(source))
    report = optimize(_problem(), ListPlanner(list(MOVES)), validator, budget=3)
    assert report.measured is True  # the start failing says nothing about whether candidates can be timed
    passed = [a for a in report.trajectory if a.verdict == "pass"]
    assert passed and all(a.speedup is not None for a in passed)
    assert report.best is not None and report.best.speedup == max(a.speedup for a in passed)
    assert next(a for a in report.trajectory if a.accepted) is passed[0]  # the first pass is kept: nothing to beat


def test_a_verdict_the_gpu_memory_shortage_made_is_asked_again_not_blamed_on_the_candidate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from klineage.agent import loop

    monkeypatch.setattr(loop, "CROWDED_PAUSE_S", 0.0)
    shortage = "correctness could not complete: OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"
    tries: dict[str, int] = {}

    @dataclass
    class Crowded(ScriptedValidator):
        """Runs out of device memory on the first try of every int64 candidate, and always on num_warps 16."""

        def validate(self, source: str, workload: Any, gates: Any = GATES, shapes: Any = None) -> GateResult:
            tries[source] = tries.get(source, 0) + 1
            if ("int64" in source and tries[source] == 1) or "num_warps=16" in source:
                self.calls.append(source)
                gates_ = (GateOutcome("static", "pass", "ok"), GateOutcome("compile", "pass", "ok"),
                          GateOutcome("correctness", "fail", shortage))
                return GateResult(kernel_sha(source), "scripted", {}, gates_, "rmsnorm", "2026-12-07")
            return super().validate(source, workload, gates, shapes)

    validator = Crowded(_speed)
    report = optimize(_problem(), ListPlanner([single("int64-offsets"), single("num-warps", {"num_warps": 16})]),
                      validator, budget=5)
    first, second = report.trajectory
    assert first.verdict == "pass" and first.accepted  # judged again after the shortage: it passed
    assert second.verdict == "fail" and second.failed_gate == "correctness"  # short every time: counted failed
    assert report.calls_used == 2  # the retries are the same call of the budget
    assert [tries[s] for s in tries if "int64" in s and "num_warps=16" not in s] == [2]
    assert max(tries.values()) == 1 + loop.CROWDED_RETRIES


def test_crowded_out_reads_only_a_memory_shortage() -> None:
    from klineage.validator import crowded_out

    def result(reason: str, status: str = "fail") -> GateResult:
        return GateResult("0" * 64, "g", {}, (GateOutcome("static", "pass", "ok"),
                                              GateOutcome("integrity", status, reason)), "w", "2026-12-07")

    assert crowded_out(result("integrity could not complete: OutOfMemoryError: CUDA out of memory."))
    assert not crowded_out(result("run modified its input 0"))
    assert not crowded_out(result("CUDA out of memory", status="pass"))


def test_a_move_that_changes_nothing_costs_no_call() -> None:
    validator = ScriptedValidator(_speed)
    nothing = single("causal-skip")  # an attention move: no place for it in an RMSNorm kernel
    report = optimize(_problem(), ListPlanner([nothing, *MOVES[1:2]]), validator, budget=5)
    assert [a.move.label for a in report.trajectory] == ["num-warps"]
    assert len(validator.calls) == 2


@pytest.mark.real("embedder")
def test_klineage_optimize_runs_end_to_end_on_cpu(kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   cpu_validator: Any) -> None:
    from klineage.cli.main import app

    monkeypatch.setenv("KLINEAGE_DATA_DIR", str(kb_dir))
    best = tmp_path / "best.py"
    result = CliRunner().invoke(app, ["optimize", str(ROOT / "heldout/rmsnorm/naive.py"), "-w",
                                      str(ROOT / "heldout/rmsnorm"), "--budget", "2", "--cpu", "--json",
                                      "--no-record", "--cache", str(tmp_path / "cache.sqlite"), "-o", str(best)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["measured"] is False and report["calls_used"] >= 1
    assert all(a["speedup"] is None for a in report["trajectory"])
    assert report["best"]["verdict"] == "pass"
    again = cpu_validator(seeds=1).validate(best.read_text(), ROOT / "heldout/rmsnorm",
                                            gates=("static", "compile", "correctness"))
    assert again.verdict == "pass" and again.kernel_sha == report["best"]["kernel_sha"]


@pytest.mark.real("embedder")
def test_klineage_optimize_plan_prints_the_moves_without_validating(kb_dir: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``--plan``: the planner's moves for the kernel as it is, first the gemm lineage's config set on a naive
    batched matmul; nothing validated (no cache file appears), nothing recorded."""
    from klineage.cli.main import app

    monkeypatch.setenv("KLINEAGE_DATA_DIR", str(kb_dir))
    cache = tmp_path / "cache.sqlite"
    args = ["optimize", str(ROOT / "heldout/bmm/naive.py"), "-w", str(ROOT / "heldout/bmm"), "--plan",
            "--cache", str(cache)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    moves = json.loads(result.stdout)
    assert moves[0]["label"] == "launch config set" and "gemm" in moves[0]["origin"] and moves[0]["materializes"]
    assert all(m["steps"] and m["origin"] for m in moves)
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "planned moves" in table.output
    assert not cache.exists()
    plain = tmp_path / "plain.py"  # nothing for an operator to rewrite: the empty plan says why
    plain.write_text("def run(x):\n    return x\n")
    empty = CliRunner().invoke(app, ["optimize", str(plain), "-w", str(ROOT / "heldout/rmsnorm"), "--plan"])
    assert empty.exit_code == 0 and "no @triton.jit kernel was found" in empty.output, empty.output


def test_klineage_optimize_says_what_is_wrong(tmp_path: Path) -> None:
    from klineage.cli.main import app

    runner = CliRunner()
    missing = runner.invoke(app, ["optimize", str(tmp_path / "nope.py"), "-w", str(ROOT / "heldout/rmsnorm")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    method = runner.invoke(app, ["optimize", str(ROOT / "heldout/rmsnorm/naive.py"), "-w",
                                 str(ROOT / "heldout/rmsnorm"), "--method", "magic"])
    assert method.exit_code == 2 and "expected one of" in method.output
    kernel_args = ["optimize", str(ROOT / "heldout/rmsnorm/naive.py"), "-w", str(ROOT / "heldout/rmsnorm")]
    plan = runner.invoke(app, [*kernel_args, "--plan", "--method", "none", "--no-record", "--json"])
    assert plan.exit_code == 0, plan.output
    made = {m["label"]: m["materializes"] for m in json.loads(plan.stdout)}
    assert made["num-warps"] is True and made["split-k"] is False  # a row kernel has no K loop to split
    empty = tmp_path / "empty.py"
    empty.write_text("\n")
    for kernel, needle in [(ROOT / "heldout/rmsnorm", "is a folder; expected the kernel's .py file"),
                           (empty, "empty.py' is empty; expected a module defining run(*inputs)")]:
        result = runner.invoke(app, ["optimize", str(kernel), "-w", str(ROOT / "heldout/rmsnorm"), "--plan"])
        assert result.exit_code == 2 and needle in " ".join(result.output.split()), result.output
    for bad, needle in [(tmp_path / "no_folder" / "best.py", "does not exist"), (tmp_path, "is a folder")]:
        result = runner.invoke(app, [*kernel_args, "-o", str(bad)])  # refused before any validator call
        assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output, result.output


def test_planners_see_the_shapes_that_are_timed_or_the_gpu_grid_when_nothing_is() -> None:
    """The grid census reasons about the shapes the performance gate times: the loop's ``shapes`` when a GPU
    measured the start, the manifest's GPU grid otherwise (the CPU run's small shapes say nothing of a GPU)."""
    problem = _problem()
    small = list(problem.manifest.cpu_shapes)
    seen: list[Any] = []

    @dataclass
    class Watching(ListPlanner):
        def plan(self, state: AgentState) -> list[Move]:
            seen.append(state.timed_shapes())
            return super().plan(state)

    optimize(problem, Watching(MOVES[:1]), ScriptedValidator(_speed), budget=1, shapes=small)
    assert seen and seen[0] == tuple(small)  # the scripted validator times: the loop's shapes
    seen.clear()
    scripted = ScriptedValidator(_speed)

    class Cpu:
        """Answers as on a machine without a GPU: the performance gate skipped."""

        def validate(self, *args: Any, **kwargs: Any) -> GateResult:
            result = scripted.validate(*args, **kwargs)
            gates = tuple(g if g.gate != "performance" else GateOutcome("performance", "skipped", "no GPU")
                          for g in result.gates)
            return GateResult(result.kernel_sha, NO_GPU, {}, gates, result.workload, result.date)

    optimize(problem, Watching(MOVES[:1]), Cpu(), budget=1, shapes=small)
    assert seen and seen[0] == tuple(problem.manifest.shapes)


def test_a_change_no_checked_shape_ran_is_not_kept_with_or_without_timing() -> None:
    """The validator names the kernels no checked call launched; a move whose changed kernels are all among
    them passed on evidence of nothing: on CPU (nothing timed) it is not kept; on a GPU neither, since the
    shapes timed are the shapes checked and a time that moved was noise (seen on the H100: exp2 on the looped
    kernel of a softmax whose every shape took the single-pass one, 'faster' by 1 %), and it is no trial of the
    skill. A kernel that never ran but that the move left alone changes nothing."""
    problem = _problem()
    kernel = next(line.split("def ")[1].split("(")[0] for line in problem.source.splitlines()
                  if line.startswith("def ") and "_kernel" in line)
    scripted = ScriptedValidator(_speed)

    def never_ran(result: GateResult, gpu: bool) -> GateResult:
        gates = []
        for g in result.gates:
            if g.gate == "correctness" and result.kernel_sha != kernel_sha(problem.source):
                g = GateOutcome(g.gate, g.status, g.reason + "; unchecked", {"kernels_never_launched": [kernel]})
            elif g.gate == "performance" and not gpu:
                g = GateOutcome("performance", "skipped", "no GPU")
            gates.append(g)
        return GateResult(result.kernel_sha, result.gpu if gpu else NO_GPU, {}, tuple(gates), result.workload,
                          result.date)

    class Validator:
        def __init__(self, gpu: bool) -> None:
            self.gpu = gpu

        def validate(self, *args: Any, **kwargs: Any) -> GateResult:
            return never_ran(scripted.validate(*args, **kwargs), self.gpu)

    lines: list[str] = []
    cpu = optimize(problem, ListPlanner([single("int64-offsets")]), Validator(gpu=False), budget=1,
                   progress=lines.append)
    assert cpu.trajectory[0].verdict == "pass" and not cpu.trajectory[0].accepted
    assert cpu.best_source == problem.source
    assert any(f"changed kernel(s) {kernel} never ran on the checked shapes: not kept" in line for line in lines)
    lines.clear()
    recorded: list[tuple[str, Any]] = []

    class Recorder:
        """Takes the loop's record calls (what a KnowledgeBase would be told)."""

        def skill(self, sid: str) -> object:
            return object()

        def record_application(self, sid: str, source: str, outcome: str, speedup: Any, **kw: Any) -> None:
            recorded.append((outcome, kw.get("gate_result")))

    gpu = optimize(problem, ListPlanner([single("int64-offsets")]), Validator(gpu=True), budget=1,
                   progress=lines.append, kb=Recorder())
    assert recorded == [("unexercised", None)]  # no trial: no gate result goes with it
    assert gpu.trajectory[0].verdict == "pass" and gpu.trajectory[0].speedup is not None
    assert not gpu.trajectory[0].accepted and gpu.best_source == problem.source
    assert any(f"changed kernel(s) {kernel} never ran on the checked shapes: not kept" in line for line in lines)
    kernel = "some_other_kernel"  # named as never launched, but the move did not change it: kept as timed
    lines.clear()
    recorded.clear()
    other = optimize(problem, ListPlanner([single("int64-offsets")]), Validator(gpu=True), budget=1,
                     progress=lines.append, kb=Recorder())
    assert other.trajectory[0].accepted and not any("never ran" in line for line in lines)
    assert [outcome for outcome, _ in recorded] == ["improved"] and recorded[0][1] is not None
