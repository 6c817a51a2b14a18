"""The optimization loop every method shares: plan, materialize, validate, keep the best, re-plan.

``optimize`` spends at most ``budget`` validator calls on candidates. Each call validates one
candidate with every gate; a candidate that fails a gate is reverted (the next move starts from the
best kernel that passed) and its failure goes back to the planner. A move that cannot be made on the
current kernel (its operators do not recognise the code) or that would produce a kernel already
validated costs no call. The returned best kernel has passed every gate; the starting kernel is
validated once, outside the budget, and is the answer when nothing better passed.

A verdict that failed only because the GPU ran out of memory beside other jobs (``crowded_out``: the
validator already retried it with the GPU to itself, and did not cache it) judges the crowd, not the
candidate: the candidate is asked for again, up to ``CROWDED_RETRIES`` times, before it counts as failed.

A start that fails before its kernels run (the static gate, or the compile gate's host-code run: a
forbidden import, ``run`` taking other arguments than the workload's inputs) is no kernel to optimize: when
``SAME_AS_START`` candidates in a row fail exactly as it did (same gate, same reason), the moves do not
touch what fails and the loop stops rather than spend the rest of the budget on it. A start failing later
(correctness on the large shapes, say) is not stopped: a move such as int64-offsets may fix it.

A validator that cannot judge a candidate (``ValidatorUnavailable``: a service gone mid-run, a cache-only
validator asked for a kernel it never measured) ends the run there: the report keeps every call judged
before and says where it stopped (``AgentReport.interrupted``). The start must be judged: without it the
error is raised.

Without a GPU the performance gate is skipped: candidates are kept when they pass the checking gates
and the planner expected them to help (expected gain ≥ 1), and every report line says that nothing
was measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from klineage.agent.moves import materialize
from klineage.agent.planners import Planner
from klineage.agent.problem import Problem
from klineage.agent.report import AgentReport, Measurement
from klineage.agent.state import AgentState, Attempt
from klineage.schema.gate_result import GATES, GateResult
from klineage.schema.ids import kernel_sha
from klineage.schema.records import skill_id
from klineage.transforms.features import changed_kernels
from klineage.validator import ValidatorUnavailable, crowded_out

#: A candidate is kept only when it beats the best by more than timing noise.
MIN_GAIN = 0.01
#: Times a candidate is judged again after a verdict the GPU's memory shortage made (see the docstring).
CROWDED_RETRIES = 2
#: Seconds between those tries (the other jobs' cases finish and give their memory back meanwhile).
CROWDED_PAUSE_S = 20.0
#: Candidates in a row failing exactly as a start that failed before its kernels ran, before the loop stops.
SAME_AS_START = 2
#: The gates whose failure of the start means the moves cannot help (the code never reached its kernels).
_BEFORE_KERNELS = frozenset({"static", "compile"})

Progress = Callable[[str], None]


def measure(result: GateResult) -> Measurement:
    """The measurement a gate result gives: verdict, first failed gate, and the speedup over the vendor
    when the performance gate ran and passed."""
    failed = next((g for g in result.gates if g.status == "fail"), None)
    perf = result.gate("performance")
    speedup = None
    rows: tuple[dict[str, Any], ...] = ()
    if perf is not None and perf.status == "pass":
        gm = perf.metrics.get("geomean_speedup")
        speedup = float(gm) if gm is not None else None
        rows = tuple({"shape": r["shape"], "dtype": r["dtype"], "speedup": r.get("speedup"),
                      "median_ms": r["candidate"]["median_ms"]} for r in perf.metrics.get("rows", ()))
    reason = failed.reason if failed is not None else (perf.reason if perf is not None else "")
    return Measurement(result.kernel_sha, result.verdict, failed.gate if failed is not None else None,
                       reason[:500], speedup, rows)


def optimize(problem: Problem, planner: Planner, validator: Any, budget: int = 10,
             shapes: Sequence[Mapping[str, int | bool]] | None = None, kb: Any = None,
             progress: Progress | None = None, arch: int | None = None) -> AgentReport:
    """Optimize ``problem`` with ``planner`` under ``budget`` validator calls (see the module docstring).

    ``validator`` is a ``klineage.validator.ValidatorClient``; ``shapes`` None validates on the manifest's
    grid; ``kb`` (a ``KnowledgeBase``), when given, records every attempt as an Application of the
    skills it used; ``progress`` receives one line per event.
    """
    if budget < 0:
        raise ValueError(f"budget: expected a number of calls >= 0, got {budget}")
    say = progress or (lambda line: None)
    workload = problem.manifest.directory

    def judge(source: str) -> GateResult:
        result = validator.validate(source, workload, GATES, shapes)
        for _ in range(CROWDED_RETRIES):
            if not crowded_out(result):
                break
            say(f"out of GPU memory beside other jobs (not the candidate's failure): judged again in "
                f"{CROWDED_PAUSE_S:.0f} s")
            time.sleep(CROWDED_PAUSE_S)
            result = validator.validate(source, workload, GATES, shapes)
        return result

    start_result = judge(problem.source)
    start = measure(start_result)
    # on a GPU every candidate is timed, even when the start failed a gate (then the first pass is kept)
    measured = start.speedup is not None or start_result.on_gpu
    tag = "" if measured else " [no performance measured: correctness only]"
    say(f"start: {start.verdict}" + (f", {start.speedup:.3f}x vendor" if start.speedup else "") + tag)
    notes = [] if measured else ["no performance was measured (no GPU): moves were "
                                 "ranked by the knowledge base's expected gain and kept when they passed the "
                                 "checking gates"]
    context_note = problem.context_note()
    if context_note:  # dims without a role: the knowledge base's conditions cannot see the shape
        notes.append(context_note)
        say(f"note: {context_note}")
    # planners reason about the GPU's grid: the shapes timed, or the manifest's grid when only correctness
    # runs (on the small CPU shapes)
    grid = tuple(shapes) if measured and shapes else None
    state = AgentState(problem, problem.source, arch=arch, grid=grid)
    best = start if start.verdict == "pass" else None
    best_source = problem.source if best is not None else None
    seen = {kernel_sha(problem.source)}
    like_start = 0  # candidates in a row failing exactly as a start that never reached its kernels
    interrupted: str | None = None
    while len(state.attempts) < budget:
        candidate = _next_candidate(planner, state, seen)
        if candidate is None:
            say("no move left to try")
            break
        move, made = candidate
        sha = kernel_sha(made.source)
        seen.add(sha)
        try:
            gate_result = judge(made.source)
        except ValidatorUnavailable as exc:  # what was judged so far is kept: the report says where it stopped
            interrupted = f"call {len(state.attempts) + 1} ({move.label}) could not be judged: {exc}"
            say(f"interrupted: {interrupted}")
            break
        result = measure(gate_result)
        changed = changed_kernels(state.source, made.source)
        unchecked = _unchecked_change(changed, gate_result)
        # A change no checked shape ran is no evidence: without timing a pass is all there is, so a move with
        # any such change is not kept; timed, a move that changed only code that never ran cannot be what moved
        # the time (the same shapes are checked and timed), so it is neither kept nor a trial of the skill.
        inert = bool(unchecked) and set(unchecked) == set(changed)
        accepted = (_better(result, best, move.expected_gain, measured)
                    and not (unchecked if not measured else inert))
        attempt = Attempt(len(state.attempts) + 1, move, made.applied, sha, result.verdict, result.failed_gate,
                          result.reason, result.speedup, result.per_shape, accepted)
        state.attempts.append(attempt)
        if kb is not None:
            _record(kb, made.source, attempt, best, gate_result, problem.search_context(arch), exercised=not inert)
        if accepted:
            best, best_source, state.source = result, made.source, made.source
            state.unusable.clear()
        say(_line(attempt, tag) + (f" [changed kernel(s) {', '.join(unchecked)} never ran on the checked shapes"
                                   f"{': not kept' if not measured or inert else ''}]" if unchecked else ""))
        failed_alike = (best is None and start.failed_gate in _BEFORE_KERNELS
                        and (attempt.failed_gate, attempt.reason) == (start.failed_gate, start.reason))
        like_start = like_start + 1 if failed_alike else 0
        if like_start >= SAME_AS_START:
            why = (f"stopped after call {attempt.call}: the start failed at {start.failed_gate} ({start.reason[:160]}) "
                   f"and the last {like_start} candidates failed the same way: no move reaches what fails; fix "
                   "the kernel or the workload first")
            notes.append(why)
            say(why)
            break
    return AgentReport(problem.name, planner.name, budget, measured, start, best, best_source,
                       tuple(state.attempts), tuple(notes), interrupted)


def _unchecked_change(changed: Sequence[str], result: GateResult) -> tuple[str, ...]:
    """Those of the kernels a move ``changed`` (``transforms.features.changed_kernels``) that the validator
    reports no checked call launched (the correctness gate's ``kernels_never_launched``): code the pass does not
    vouch for (a looped kernel behind a threshold the checked shapes never cross, say)."""
    gate = result.gate("correctness")
    never = set(gate.metrics.get("kernels_never_launched") or ()) if gate is not None else set()
    return tuple(name for name in changed if name in never)


def _next_candidate(planner: Planner, state: AgentState, seen: set[str]) -> tuple[Any, Any] | None:
    """The first planned move that materializes to a kernel not validated yet."""
    for move in planner.plan(state):
        made = materialize(state.source, move)
        if made is None or kernel_sha(made.source) in seen:
            state.unusable.add(move.key())
            continue
        return move, made
    return None


def _better(result: Measurement, best: Measurement | None, expected: float | None, measured: bool) -> bool:
    if result.verdict != "pass":
        return False
    if not measured:
        return expected is None or expected >= 1.0
    if result.speedup is None:
        return False
    return best is None or best.speedup is None or result.speedup > best.speedup * (1 + MIN_GAIN)


def _record(kb: Any, source: str, attempt: Attempt, best: Measurement | None, gate_result: GateResult | None = None,
            context: Mapping[str, Any] | None = None, exercised: bool = True) -> None:
    """One Application per skill the attempt used; the speedup is over the kernel it was applied to; the gate
    result that judged the candidate makes it verified, ``context`` is the problem's representative shape. A
    move that changed only kernels no checked call ran (not ``exercised``) is recorded as ``unexercised``
    without its gate result: no trial of the skill either way."""
    relative = None
    if attempt.speedup is not None and best is not None and best.speedup:
        relative = attempt.speedup / best.speedup
    if attempt.verdict != "pass":
        outcome = f"fail-{attempt.failed_gate}" if attempt.failed_gate else "fail"
    elif not exercised:
        outcome, gate_result = "unexercised", None
    elif relative is None:
        outcome = "pass"
    else:
        outcome = "improved" if attempt.accepted else "no-gain"
    if gate_result is not None and gate_result.kernel_sha != kernel_sha(source):
        gate_result = None  # a result on another text judges nothing recorded here
    for step in attempt.applied:
        if step.action == "simplify":
            continue  # the skill was re-applied by a later step of the move; one application is recorded
        sid = skill_id(step.operator)
        if kb.skill(sid) is not None:
            kb.record_application(sid, source, outcome, relative, gate_result=gate_result, context=context)


def _line(a: Attempt, tag: str) -> str:
    ops = "+".join(s.label() for s in a.applied)
    if a.verdict != "pass":
        what = f"FAIL at {a.failed_gate}: {a.reason[:120]}"
    elif a.speedup is not None:
        what = f"pass, {a.speedup:.3f}x vendor" + (" (kept)" if a.accepted else "")
    else:
        what = "pass" + (" (kept)" if a.accepted else "")
    return f"call {a.call}: {a.move.label} [{ops}] from {a.move.origin}: {what}{tag}"
