"""The backward walk: from an expert kernel, remove one optimization at a time, each step gated.

Policy (``least-cost, lazily re-checked``):

1. Gate the starting kernel (static, compile, correctness, integrity on the whole grid; performance
   on every shape, with the vendor timed beside it). A starting kernel that fails is an error.
2. At the current kernel, every operator whose optimization is present and whose ``simplify``
   recognises it proposes one simplified candidate. A candidate is *measured* by two jobs: the
   checking gates (compile, correctness on the whole grid, integrity; these jobs run ``parallel`` at a
   time, since they only compile and compare) and then, one at a time so that timings never overlap,
   the performance gate on every shape. Its *cost* is the geometric mean over shapes × dtypes of
   ``simplified ms / current ms``: how much slower removing the optimization made the kernel.
3. Accept the candidate of least cost, so that the big wins stand last at the naive end. Costs
   measured at an earlier kernel are estimates: the cheapest candidate is re-measured at the current
   kernel before it is accepted (lazy greedy: a candidate is only ever accepted on figures taken at
   the kernel it is applied to; the others are re-measured only when they come up as cheapest).
   Without a GPU (interpreter mode) there is no cost: candidates are taken in operator order.
4. A candidate that fails a gate is a rejected attempt, recorded with the gate and its reason; its
   operator is not proposed again in this walk (its failure is evidence: it becomes a VALID_WHEN or a
   risk). A candidate whose source is a kernel already in the walk is rejected by policy (a cycle).
   Under the interpreter, a failure that is the interpreter's own limitation (``InterpreterError``:
   e.g. bf16 constants it cannot build) says nothing about the kernel: the step is recorded as
   ``skipped`` (neither accepted nor rejected) and the operator is not proposed again.
5. Repeat until no operator can remove anything, ``max_steps`` is reached or the time budget runs
   out (the document then says ``"complete": false``; run again with the same cache to resume: every
   gate result is cached by kernel hash, so the walk replays to where it stopped without new jobs).

The walker only talks to a ``ValidatorClient`` (in process or HTTP) and the operators of
``klineage.transforms``; it writes nothing itself (the CLI writes the document it returns). A walk
that timed nothing (CPU) writes ``"measured": false``: ingest never counts its steps as evidence of an
effect.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klineage.kb.features import FeatureError, manifest_roles
from klineage.schema.errors import KLineageError
from klineage.schema.gate_result import GateResult
from klineage.schema.ids import canonical_json, kernel_sha
from klineage.schema.lineage_document import FORMAT, FORMAT_VERSION
from klineage.schema.manifest import WorkloadManifest, load_manifest
from klineage.transforms.features import kernel_features, kernel_summary
from klineage.transforms.operator import Operator, Rewrite
from klineage.transforms.registry import all_operators

CHECK_GATES: tuple[str, ...] = ("static", "compile", "correctness", "integrity")
PERF_GATES: tuple[str, ...] = ("static", "performance")
POLICY = "least-cost, lazily re-checked"
#: Failure reasons that are the Triton interpreter's limitation, not the kernel's (only under the interpreter).
_INTERPRETER_LIMITATION = re.compile(r"InterpreterError|InterpreterBuilder|not supported (?:by|in) the interpreter")


class WalkError(KLineageError, RuntimeError):
    """The walk cannot start (for example: the starting kernel fails its gates)."""


@dataclass(frozen=True)
class WalkOptions:
    """Knobs of one walk. ``budget_s``: stop (incomplete) when this much wall time has passed."""

    max_steps: int = 40
    parallel: int = 4
    budget_s: float | None = None


@dataclass(frozen=True)
class Measurement:
    """One kernel version gated: the checking result, the performance result, and its times per case."""

    sha: str
    check: GateResult
    perf: GateResult | None
    times_ms: Mapping[str, float] = field(default_factory=dict)
    vendor_ms: Mapping[str, float] = field(default_factory=dict)
    cases: Mapping[str, tuple[dict[str, Any], str]] = field(default_factory=dict)

    @property
    def failed(self) -> tuple[str, str] | None:
        """(gate, reason) of the first failing gate of either job, or None."""
        for result in (self.check, self.perf):
            gate = result.failed_gate if result is not None else None
            if gate is not None:
                return gate.gate, gate.reason
        return None

    def gate_runs(self) -> list[dict[str, Any]]:
        """Both gate result documents, as the lineage document stores them."""
        return [r.to_dict() for r in (self.check, self.perf) if r is not None]


@dataclass(frozen=True)
class WalkEvent:
    """Progress of a walk, for progress bars and logs."""

    kind: str  # "measure" | "measured" | "accept" | "reject" | "skip" | "error" | "stop"
    message: str
    step: int = 0


def case_key(shape: Mapping[str, Any], dtype: str) -> str:
    """A stable key for one shape × dtype case."""
    return canonical_json({"shape": dict(shape), "dtype": dtype})


def timed_cases(perf: GateResult | None) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[dict, str]]]:
    """From a performance gate result: median ms per case, vendor ms per case, and each case's
    (shape, dtype); all empty when the gate did not pass."""
    times: dict[str, float] = {}
    vendor: dict[str, float] = {}
    cases: dict[str, tuple[dict, str]] = {}
    gate = perf.gate("performance") if perf is not None else None
    if gate is None or gate.status != "pass":
        return times, vendor, cases
    for row in gate.metrics.get("rows", ()):
        key = case_key(row["shape"], row["dtype"])
        times[key] = float(row["candidate"]["median_ms"])
        base = row.get("vendor") or row.get("reference")
        if base:
            vendor[key] = float(base["median_ms"])
        cases[key] = (dict(row["shape"]), str(row["dtype"]))
    return times, vendor, cases


def _split(result: GateResult) -> tuple[GateResult, GateResult | None]:
    """Split an all-gates result into the checking part and the performance part."""
    from dataclasses import replace

    check = replace(result, gates=tuple(g for g in result.gates if g.gate != "performance"))
    perf_gates = tuple(g for g in result.gates if g.gate in PERF_GATES)
    ran = any(g.gate == "performance" and g.status != "skipped" for g in perf_gates)
    return check, (replace(result, gates=perf_gates) if ran or check.verdict == "pass" else None)


def interpreter_limitation(result: GateResult, reason: str) -> bool:
    """True when a failure ``reason`` of a job run under the Triton interpreter (no GPU) is the
    interpreter's own limitation (for example bf16, which its builder cannot make), not the kernel's."""
    return "interpreter" in result.gpu.lower() and bool(_INTERPRETER_LIMITATION.search(reason))


def cost(current: Measurement, candidate: Measurement) -> float | None:
    """Geometric mean over common cases of candidate ms / current ms (None when either was not timed)."""
    common = [k for k in candidate.times_ms if k in current.times_ms]
    if not common:
        return None
    return statistics.geometric_mean(candidate.times_ms[k] / current.times_ms[k] for k in common)


def step_timings(current: Measurement, candidate: Measurement) -> list[dict[str, Any]]:
    """The ``timings`` of a step from ``current`` (optimized) to ``candidate`` (simplified)."""
    rows = []
    for key, ms in candidate.times_ms.items():
        if key not in current.times_ms:
            continue
        shape, dtype = candidate.cases[key]
        vendor = candidate.vendor_ms.get(key, current.vendor_ms.get(key))
        rows.append({"shape": shape, "dtype": dtype, "from_ms": current.times_ms[key], "to_ms": ms,
                     "vendor_ms": vendor})
    return rows


@dataclass
class _Candidate:
    operator: Operator
    rewrite: Rewrite
    sha: str
    measured_at: str | None = None
    measurement: Measurement | None = None
    cost: float | None = None


class Walker:
    """One backward walk of one workload through one validator.

    ``validator``: a ValidatorClient whose performance gate (on a GPU) may skip the vendor;
    ``baseline_validator``: the one that gates the starting kernel (vendor timed), default the same;
    ``start_source``: the kernel to walk from, default the workload's kernel file (a lineage's recorded
    start replays a walk of an earlier version of the expert).
    """

    def __init__(self, workload_dir: Path | str, validator: Any, operators: Sequence[Operator] | None = None,
                 options: WalkOptions | None = None, baseline_validator: Any = None,
                 on_event: Callable[[WalkEvent], None] | None = None, start_source: str | None = None) -> None:
        self.workload_dir = Path(workload_dir)
        self.start_source = start_source
        self.manifest: WorkloadManifest = load_manifest(self.workload_dir)
        self.validator = validator
        self.baseline_validator = baseline_validator or validator
        self.operators = tuple(operators if operators is not None else all_operators())
        self.options = options or WalkOptions()
        self.on_event = on_event or (lambda event: None)
        self._started = time.monotonic()
        self._longest_job_s = 0.0

    # -- measuring -------------------------------------------------------------------------------
    def _out_of_time(self) -> bool:
        """True when the next job would end past the budget: a job as long as the longest one so far
        (one device call has a hard limit; a job cut off by it loses its result)."""
        budget = self.options.budget_s
        return budget is not None and time.monotonic() - self._started + self._longest_job_s > budget

    def _timed(self, job: Callable[[], Any]) -> Any:
        """Run ``job``; remember its wall time if it is the longest so far (``_out_of_time``'s estimate)."""
        t0 = time.monotonic()
        try:
            return job()
        finally:
            self._longest_job_s = max(self._longest_job_s, time.monotonic() - t0)

    def _check(self, source: str) -> GateResult:
        return self.validator.validate(source, self.workload_dir, CHECK_GATES)

    def _perf(self, source: str, validator: Any) -> GateResult:
        return validator.validate(source, self.workload_dir, PERF_GATES)

    def measure_many(self, sources: Sequence[str], validator: Any = None) -> list[Measurement]:
        """Gate ``sources``: checking jobs ``parallel`` at a time, then performance jobs one by one.

        A single source is gated in one job (all gates): nothing runs beside it, and one worker start
        and one compilation are saved. Several sources may come back fewer: when the time budget
        would be spent by the next performance job, the measurements so far are returned (the
        checks are cached, so a resumed walk picks up there).
        """
        validator = validator or self.validator
        if len(sources) == 1 and not self._split_cached(validator, sources[0]):
            result = self._timed(lambda: validator.validate(sources[0], self.workload_dir,
                                                            (*CHECK_GATES, "performance")))
            check, perf = _split(result)
            times, vendor, cases = timed_cases(perf)
            return [Measurement(kernel_sha(sources[0]), check, perf, times, vendor, cases)]
        with ThreadPoolExecutor(max_workers=max(1, self.options.parallel)) as pool:
            checks = self._timed(lambda: list(pool.map(self._check, sources)))
        out: list[Measurement] = []
        for source, check in zip(sources, checks, strict=True):
            if check.verdict == "pass" and self._out_of_time():
                break
            perf = self._timed(functools.partial(self._perf, source, validator)) if check.verdict == "pass" else None
            times, vendor, cases = timed_cases(perf)
            out.append(Measurement(kernel_sha(source), check, perf, times, vendor, cases))
        return out

    def _split_cached(self, validator: Any, source: str) -> bool:
        """True when the validator's cache holds this source's checking job (a walk that measured it
        as two jobs before, or under other timing options) and no combined one: then the checks are
        replayed and at most a performance job runs, instead of one combined job that would check
        again. A cached combined job wins, so that a resumed walk sees the figures the first run saw
        even when a later replay measured the same kernel again as two jobs."""
        prepare, cached = getattr(validator, "prepare", None), getattr(validator, "cached", None)
        if prepare is None or cached is None:
            return False
        if cached(prepare(source, self.workload_dir, (*CHECK_GATES, "performance"), None)[-1]) is not None:
            return False
        return cached(prepare(source, self.workload_dir, CHECK_GATES, None)[-1]) is not None

    # -- the walk --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Walk backward from the starting kernel; return the lineage document's data (skills empty)."""
        start_source = self.start_source
        if start_source is None:
            start_source = self.manifest.kernel_path.read_text(encoding="utf-8")
        self.on_event(WalkEvent("measure", f"gating the starting kernel {self.manifest.kernel}"))
        start = self.measure_many([start_source], self.baseline_validator)[0]
        if start.failed:
            gate, reason = start.failed
            raise WalkError(f"{self.manifest.kernel_path}: the starting kernel fails the {gate} gate: {reason}")
        kernels: dict[str, str] = {start.sha: start_source}
        steps: list[dict[str, Any]] = []
        current_source, current = start_source, start
        first_runs = start.gate_runs()
        rejected_ops: set[str] = set()
        candidates: dict[str, _Candidate] = {}
        complete = True
        while True:
            if sum(1 for s in steps if s["accepted"]) >= self.options.max_steps:
                complete = False
                self.on_event(WalkEvent("stop", f"max_steps={self.options.max_steps} reached", len(steps)))
                break
            proposals = self._propose(current_source, rejected_ops, kernels, candidates)
            candidates = {c.operator.id: c for c in proposals}
            if not candidates:
                self.on_event(WalkEvent("stop", "no operator can simplify the kernel further", len(steps)))
                break
            accepted: _Candidate | None = None
            while candidates:
                cheapest = self._cheapest(candidates)
                never = [c for c in candidates.values() if c.measurement is None]
                pending = never or ([cheapest] if cheapest.measured_at != current.sha else [])
                if not pending:
                    accepted = cheapest
                    break
                if self._out_of_time():
                    complete = False
                    break
                names = ", ".join(c.operator.id for c in pending)
                self.on_event(WalkEvent("measure", f"measuring {len(pending)} candidate(s): {names}", len(steps)))
                # strict=False: measure_many may stop early at the budget; the rest stay unmeasured.
                for cand, m in zip(pending, self.measure_many([c.rewrite.source for c in pending]), strict=False):
                    cand.measurement, cand.measured_at = m, current.sha
                    failure = m.failed
                    if failure is not None:
                        gate, reason = failure
                        skipped = interpreter_limitation(m.check, reason)
                        kernels[cand.sha] = cand.rewrite.source
                        steps.append(self._step(len(steps), cand, current, False, gate, reason, first_runs,
                                                skipped=skipped))
                        first_runs = []
                        rejected_ops.add(cand.operator.id)
                        del candidates[cand.operator.id]
                        kind, what = ("skip", "not judged (interpreter limitation)") if skipped else ("reject", gate)
                        self.on_event(WalkEvent(kind, f"{cand.operator.id}: {what}: {reason[:160]}", len(steps)))
                        continue
                    cand.cost = cost(current, m)
                    shown = f"{cand.cost:.3f}x" if cand.cost is not None else "not timed"
                    self.on_event(WalkEvent("measured", f"{cand.operator.id}: cost {shown}", len(steps)))
            if not complete:
                self.on_event(WalkEvent("stop", "time budget spent; resume with the same cache", len(steps)))
                break
            if accepted is None:
                self.on_event(WalkEvent("stop", "every remaining simplification was rejected", len(steps)))
                break
            assert accepted.measurement is not None
            kernels[accepted.sha] = accepted.rewrite.source
            steps.append(self._step(len(steps), accepted, current, True, None, "", first_runs))
            first_runs = []
            shown = f"{accepted.cost:.3f}x" if accepted.cost is not None else "not timed"
            self.on_event(WalkEvent("accept", f"{accepted.operator.id} (cost {shown})", len(steps)))
            current_source, current = accepted.rewrite.source, accepted.measurement
            del candidates[accepted.operator.id]
        return self._document(start, kernels, steps, complete)

    def _propose(self, source: str, rejected: set[str], kernels: Mapping[str, str],
                 previous: Mapping[str, _Candidate]) -> list[_Candidate]:
        out = []
        for op in self.operators:
            if op.id in rejected:
                continue
            try:
                rewrite = op.simplify(source) if op.present(source) else None
            except Exception as exc:  # an operator bug must not end the walk: report it, drop the operator
                rejected.add(op.id)
                self.on_event(WalkEvent("error", f"{op.id}: simplify raised {type(exc).__name__}: {exc}"))
                continue
            if rewrite is None:
                continue
            sha = kernel_sha(rewrite.source)
            if sha in kernels:
                continue  # a cycle: this kernel is already in the walk
            old = previous.get(op.id)
            cand = _Candidate(op, rewrite, sha)
            if old is not None:  # keep the last figures as an estimate
                cand.measurement, cand.measured_at, cand.cost = old.measurement, old.measured_at, old.cost
            out.append(cand)
        return out

    def _cheapest(self, candidates: Mapping[str, _Candidate]) -> _Candidate:
        order = {op.id: i for i, op in enumerate(self.operators)}
        return min(candidates.values(),
                   key=lambda c: (c.cost if c.cost is not None else math.inf, order[c.operator.id]))

    def _step(self, index: int, cand: _Candidate, current: Measurement, accepted: bool, gate: str | None,
              reason: str, extra_runs: list[dict[str, Any]], skipped: bool = False) -> dict[str, Any]:
        m = cand.measurement
        assert m is not None
        step: dict[str, Any] = {
            "index": index, "operator": cand.operator.id, "params": dict(cand.rewrite.params),
            "from": current.sha, "to": cand.sha, "diff": cand.rewrite.diff, "accepted": accepted,
            "gate": gate, "reason": reason, "timings": step_timings(current, m),
            "gate_runs": [*extra_runs, *m.gate_runs()],
        }
        if skipped:
            step["skipped"] = True
        return step

    def _document(self, start: Measurement, kernels: Mapping[str, str], steps: list[dict[str, Any]],
                  complete: bool) -> dict[str, Any]:
        gpu, versions = start.check.gpu, dict(start.check.versions)
        arch = re.search(r"\((sm_\d+a?)\)", gpu)
        name = re.sub(r"\s*\(sm_\d+a?\)\s*$", "", gpu) or "cpu"
        try:
            from importlib.metadata import version

            versions["klineage"] = version("klineage")
        except Exception:  # not installed as a package (a source checkout on the GPU box)
            versions["klineage"] = "source"
        m = self.manifest
        workload: dict[str, Any] = {"name": m.name, "family": m.family, "description": m.description}
        # the roles extraction computes portable features with; a dim with no declared or inferable role
        # leaves them out (extraction then leaves that workload's portable features unknown)
        with contextlib.suppress(FeatureError):
            workload["roles"] = manifest_roles(m)
        return {
            "format": FORMAT, "version": FORMAT_VERSION, "sample": False, "measured": bool(start.times_ms),
            "complete": complete,
            "workload": workload,
            "gpu": {"name": name, "arch": arch.group(1) if arch else "sm_0", "sm_count": None,
                    "smem_per_sm": None},
            "versions": versions,
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "policy": POLICY,
            "start": start.sha,
            "kernels": [{"sha": sha, "source": src, "features": kernel_features(src), "summary": kernel_summary(src)}
                        for sha, src in kernels.items()],
            "steps": steps,
            "skills": [],
        }


def accepted_path(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The accepted steps of a walk, in walk order (expert first, naive last)."""
    return [s for s in doc["steps"] if s["accepted"]]


def start_kernel(doc: Mapping[str, Any]) -> str:
    """The source of the kernel a walk started from (what resuming that walk must start from again,
    whatever the workload's kernel file holds today); KeyError when the document lacks it."""
    for k in doc["kernels"]:
        if k["sha"] == doc["start"]:
            return k["source"]
    raise KeyError(f"the lineage document does not hold its starting kernel {doc['start'][:12]}")


def naive_end(doc: Mapping[str, Any]) -> str:
    """The source of the most simplified kernel of a walk (the start when nothing was accepted)."""
    sources = {k["sha"]: k["source"] for k in doc["kernels"]}
    path = accepted_path(doc)
    return sources[path[-1]["to"] if path else doc["start"]]
