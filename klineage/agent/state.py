"""The agent's state: the problem, the current best kernel and every validator call so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from klineage.agent.moves import Move, MoveStep
from klineage.agent.problem import Problem
from klineage.schema.manifest import Shape

#: Gates whose failure says the operator broke the kernel (not that a size did not fit).
BREAKING_GATES = ("static", "correctness", "integrity")


@dataclass(frozen=True)
class Attempt:
    """One validator call: the move, what it produced, and the verdict."""

    call: int
    move: Move
    applied: tuple[MoveStep, ...]
    kernel_sha: str
    verdict: str
    failed_gate: str | None
    reason: str
    speedup: float | None
    per_shape: tuple[dict[str, Any], ...]
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (a row of the report's trajectory)."""
        return {"call": self.call, "move": self.move.label, "origin": self.move.origin, "why": self.move.why,
                "steps": [s.to_dict() for s in self.applied], "kernel_sha": self.kernel_sha,
                "verdict": self.verdict, "failed_gate": self.failed_gate, "reason": self.reason,
                "speedup": self.speedup, "per_shape": list(self.per_shape), "accepted": self.accepted,
                "expected_gain": self.move.expected_gain}


@dataclass
class AgentState:
    """What a planner knows: the problem, the current best source and every attempt so far."""

    problem: Problem
    source: str
    attempts: list[Attempt] = field(default_factory=list)
    arch: int | None = None
    unusable: set[str] = field(default_factory=set)
    #: The shapes the performance gate times (None: the manifest's grid), what a planner reasons about.
    grid: tuple[Shape, ...] | None = None

    def timed_shapes(self) -> tuple[Shape, ...]:
        """The shapes the performance gate times: ``grid``, or the manifest's whole grid."""
        return self.grid if self.grid is not None else tuple(self.problem.manifest.shapes)

    def tried(self) -> set[str]:
        """Keys of every move validated, and of those that could not be made on the current kernel."""
        return {a.move.key() for a in self.attempts} | self.unusable

    def broken_operators(self) -> set[str]:
        """Operators whose candidate failed a gate that says the rewrite was wrong."""
        return {s.operator for a in self.attempts if a.failed_gate in BREAKING_GATES for s in a.applied}
