"""The replay check: rebuild a kernel forward from a lineage's naive end with its skills' ``apply``.

``replay_source`` is pure: it starts from the most simplified kernel of a walk and applies the
operators of the accepted steps in reverse walk order (the last optimization removed is the first one
added back), each with the parameters its simplification recorded (what it removed). When today's
operator library still reproduces a step exactly (``simplify(from) == to``) its parameters are taken
from that fresh simplification, so that a lineage walked before an operator learned to record a
parameter replays with it. Rebuilt that way the kernel is normally the expert byte for byte, and its
throughput equals the expert's by construction: the report says ``identical`` rather than claiming a
measurement. With ``recorded=False`` every operator's ``apply`` runs with its generic defaults, as
an agent would use the skill on code it has never seen; that kernel differs from the expert and its
times are the real test of the skills. ``replay_report`` compares the replayed kernel's times with
the expert's, case by case, from two gate results measured on the same GPU. The caller (CLI, bench
script) runs the gates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klineage.ingest.walker import Measurement, Walker, accepted_path, naive_end, timed_cases
from klineage.schema.gate_result import GateResult
from klineage.schema.ids import kernel_sha
from klineage.transforms.registry import get_operator

THRESHOLD = 0.9


@dataclass(frozen=True)
class ReplayStep:
    """One forward application: the operator, and whether its ``apply`` changed the kernel."""

    operator: str
    applied: bool
    note: str = ""


@dataclass(frozen=True)
class ReplayCase:
    """One shape × dtype: the expert's and the replayed kernel's median times."""

    shape: Mapping[str, Any]
    dtype: str
    expert_ms: float
    replay_ms: float

    @property
    def ratio(self) -> float:
        """Replayed throughput relative to the expert's (expert ms / replayed ms)."""
        return self.expert_ms / self.replay_ms


@dataclass(frozen=True)
class ReplayReport:
    """The per-case comparison; ``passed`` when every case is within ``threshold`` of the expert."""

    workload: str
    steps: tuple[ReplayStep, ...]
    cases: tuple[ReplayCase, ...]
    threshold: float = THRESHOLD
    mode: str = "recorded"  # "recorded": each step's recorded parameters; "generic": apply's defaults
    identical: bool = False  # the rebuilt kernel is the expert byte for byte (equal times by construction)

    @property
    def worst(self) -> ReplayCase | None:
        """The case furthest below the expert."""
        return min(self.cases, key=lambda c: c.ratio) if self.cases else None

    @property
    def passed(self) -> bool:
        """True when timed and every case reaches ``threshold`` × the expert's throughput."""
        return bool(self.cases) and all(c.ratio >= self.threshold for c in self.cases)

    @property
    def why_not_passed(self) -> str | None:
        """One sentence saying why the replay did not pass (None when it did)."""
        if self.passed:
            return None
        if not self.cases:
            return ("nothing was timed (no GPU: the gates ran under the Triton interpreter, which times nothing), "
                    f"so the rebuilt kernel cannot be shown to reach {self.threshold:g}x of the expert's throughput; "
                    "run replay on a GPU")
        worst = self.worst
        assert worst is not None
        return (f"{worst.dtype} {dict(worst.shape)} reached {worst.ratio:.3f}x of the expert's throughput, "
                f"below {self.threshold:g}x")

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (CLI ``--json``, the bench script's replay files)."""
        worst = self.worst
        return {"workload": self.workload, "mode": self.mode, "identical": self.identical, "passed": self.passed,
                "why_not_passed": self.why_not_passed,
                "threshold": self.threshold, "worst_ratio": worst.ratio if worst else None,
                "steps": [{"operator": s.operator, "applied": s.applied, "note": s.note} for s in self.steps],
                "cases": [{"shape": dict(c.shape), "dtype": c.dtype, "expert_ms": c.expert_ms,
                           "replay_ms": c.replay_ms, "ratio": c.ratio} for c in self.cases]}


def replay_source(doc: Mapping[str, Any], recorded: bool = True) -> tuple[str, tuple[ReplayStep, ...]]:
    """The kernel rebuilt from the walk's naive end by applying its accepted steps forward, each
    with its recorded parameters (``recorded``) or with ``apply``'s generic defaults."""
    source = naive_end(doc)
    sources = {k["sha"]: k["source"] for k in doc["kernels"]}
    log: list[ReplayStep] = []
    for step in reversed(accepted_path(doc)):
        op = get_operator(step["operator"])
        params = dict(step.get("params") or {}) if recorded else {}
        fresh = op.simplify(sources[step["from"]]) if recorded and step["from"] in sources else None
        if fresh is not None and kernel_sha(fresh.source) == step["to"]:
            params = dict(fresh.params)
        rewrite = op.apply(source, **params)  # a parameter apply does not take is an error (TypeError)
        if rewrite is None:
            log.append(ReplayStep(op.id, False, "apply found no place to add it"))
            continue
        source = rewrite.source
        log.append(ReplayStep(op.id, True))
    return source, tuple(log)


def _medians(result: GateResult) -> dict[str, tuple[dict[str, Any], str, float]]:
    times, _, cases = timed_cases(result)
    return {key: (*cases[key], ms) for key, ms in times.items()}


def replay_report(workload: str, steps: Sequence[ReplayStep], expert: GateResult,
                  replayed: GateResult, threshold: float = THRESHOLD, mode: str = "recorded") -> ReplayReport:
    """Compare the performance gates of the expert and the replayed kernel (same GPU, same method)."""
    ours = _medians(replayed)
    cases = tuple(ReplayCase(shape, dtype, ms, ours[key][2])
                  for key, (shape, dtype, ms) in _medians(expert).items() if key in ours)
    return ReplayReport(workload, tuple(steps), cases, threshold, mode,
                        identical=expert.kernel_sha == replayed.kernel_sha)


def replay_check(doc: Mapping[str, Any], walker: Walker,
                 recorded: bool = True) -> tuple[ReplayReport, Measurement, str]:
    """Rebuild ``doc``'s kernel forward (see ``replay_source``), gate it and the expert with the
    walker's baseline validator (the expert's results come from the walk's cache), and compare them:
    (report, rebuilt, source). A rebuilt kernel identical to the expert is not gated a second time."""
    source, steps = replay_source(doc, recorded)
    sources = {k["sha"]: k["source"] for k in doc["kernels"]}
    expert_source = sources[doc["start"]]
    wanted = [expert_source] if kernel_sha(source) == doc["start"] else [expert_source, source]
    measured = walker.measure_many(wanted, walker.baseline_validator)
    expert, rebuilt = measured[0], measured[-1]
    report = replay_report(doc["workload"]["name"], steps, expert.perf or expert.check,
                           rebuilt.perf or rebuilt.check, mode="recorded" if recorded else "generic")
    return report, rebuilt, source
