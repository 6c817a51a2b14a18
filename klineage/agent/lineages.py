"""What the agent reads from the knowledge base's lineages: their steps in naive → expert order.

A backward walk removes one optimization per accepted step, from the expert down to a naive kernel.
Read forward (reversed), the accepted steps are the path an agent can follow from a naive kernel to
the expert; the rejected ones are failure rules (what broke, at which gate, and why). Everything comes
through ``KnowledgeBase`` service functions (``lineages``, ``step_kernels``, ``workload``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from klineage.kb.service import KnowledgeBase
from klineage.schema.lineage_records import geomean_gain


@dataclass(frozen=True)
class LineageStep:
    """One step of a backward walk, with the two kernel versions it joins.

    ``expert_source`` is the version that HAS the optimization (the step's FROM), ``simplified_source``
    the one without it (TO). ``gain`` is the geometric mean over the measured cases of the speedup the
    optimization gave (simplified time / optimized time), None when the step was not timed.
    """

    index: int
    operator: str
    accepted: bool
    gate: str | None
    reason: str
    params: Mapping[str, Any]
    gain: float | None
    cases: int
    expert_source: str | None
    simplified_source: str | None


@dataclass(frozen=True)
class LineageSummary:
    """A lineage as the agent uses it: its workload, family and steps in walk order (expert → naive)."""

    id: str
    workload: str
    family: str
    description: str
    steps: tuple[LineageStep, ...]
    naive_source: str = ""

    def forward(self) -> list[LineageStep]:
        """The accepted steps in naive → expert order (the order an agent adds them)."""
        return [s for s in reversed(self.steps) if s.accepted]

    def failures(self) -> list[LineageStep]:
        """The rejected steps: removing (or, reversed, adding) the operator failed a gate here."""
        return [s for s in self.steps if not s.accepted and s.gate]

    def text(self) -> str:
        """The lineage in words: workload, family, description and its forward path."""
        path = ", ".join(s.operator for s in self.forward())
        return f"{self.family} kernel {self.workload}: {self.description}. Optimized by: {path}."


def load_lineages(kb: KnowledgeBase, include_samples: bool = False) -> list[LineageSummary]:
    """Every lineage of the knowledge base as a ``LineageSummary`` (sample lineages left out unless
    asked: they carry no measured evidence)."""
    out: list[LineageSummary] = []
    for view in kb.lineages():
        if view.lineage.sample and not include_samples:
            continue
        kernels = kb.step_kernels([s.id for s in view.steps])
        steps = []
        for step in view.steps:
            before, after = kernels.get(step.id, (None, None))
            gain, cases = geomean_gain(step.speedups())
            steps.append(LineageStep(
                index=step.index, operator=step.operator, accepted=step.accepted, gate=step.gate or None,
                reason=step.reason, params=dict(step.params), gain=gain, cases=cases,
                expert_source=before.source if before is not None else None,
                simplified_source=after.source if after is not None else None))
        steps.sort(key=lambda s: s.index)
        naive = next((s for s in reversed(steps) if s.accepted and s.simplified_source), None)
        out.append(LineageSummary(
            id=view.lineage.id, workload=view.lineage.workload,
            family=view.workload.family if view.workload is not None else "",
            description=view.workload.description if view.workload is not None else "",
            steps=tuple(steps),
            naive_source=naive.simplified_source if naive is not None and naive.simplified_source else ""))
    return out
