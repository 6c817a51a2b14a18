"""The agent's report: the best kernel, its per-shape speedups, and the whole trajectory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from klineage.agent.state import Attempt


@dataclass(frozen=True)
class Measurement:
    """One kernel's gate verdict and, when performance was measured, its speedup over the vendor
    (geometric mean over the timed cases) and the per-case rows."""

    kernel_sha: str
    verdict: str
    failed_gate: str | None
    reason: str
    speedup: float | None
    per_shape: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"kernel_sha": self.kernel_sha, "verdict": self.verdict, "failed_gate": self.failed_gate,
                "reason": self.reason, "speedup": self.speedup, "per_shape": list(self.per_shape)}


@dataclass(frozen=True)
class AgentReport:
    """What one optimization run did.

    ``start`` is the starting kernel's measurement (validated once, outside the budget: the same for
    every method); ``best_source`` is the best kernel that passed every gate (the start when nothing
    better passed, None when not even the start passed); ``measured`` says whether performance was
    measured (False on a machine without a GPU: then nothing here is a speedup, and the agent ranked
    moves by the knowledge base's expected gain). ``interrupted`` says why the run ended before its budget
    and its moves when the validator could not judge a candidate (``ValidatorUnavailable``: a service
    gone, a cache-only validator that never measured it): the report holds what was judged until then.
    """

    problem: str
    method: str
    budget: int
    measured: bool
    start: Measurement
    best: Measurement | None
    best_source: str | None
    trajectory: tuple[Attempt, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    interrupted: str | None = None

    @property
    def calls_used(self) -> int:
        """Validator calls spent on candidates (the start's validation is not counted)."""
        return len(self.trajectory)

    @property
    def calls_wasted(self) -> int:
        """Calls whose candidate failed a gate."""
        return sum(a.verdict != "pass" for a in self.trajectory)

    def best_so_far(self) -> list[float | None]:
        """The best passing speedup after each call (index 0: the start)."""
        best = self.start.speedup if self.start.verdict == "pass" else None
        out = [best]
        for a in self.trajectory:
            if a.accepted and a.speedup is not None:
                best = a.speedup if best is None else max(best, a.speedup)
            out.append(best)
        return out

    def calls_to_fraction(self, fraction: float = 0.95) -> int | None:
        """Calls needed to reach ``fraction`` of the final best speedup (0 when the start already
        does; None when nothing was measured)."""
        curve = self.best_so_far()
        final = curve[-1]
        if final is None:
            return None
        return next(i for i, v in enumerate(curve) if v is not None and v >= fraction * final)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (what ``klineage optimize --json`` prints)."""
        return {"problem": self.problem, "method": self.method, "budget": self.budget, "measured": self.measured,
                "start": self.start.to_dict(), "best": self.best.to_dict() if self.best else None,
                "best_source": self.best_source, "calls_used": self.calls_used, "calls_wasted": self.calls_wasted,
                "calls_to_95pct": self.calls_to_fraction(0.95), "best_so_far": self.best_so_far(),
                "trajectory": [a.to_dict() for a in self.trajectory], "notes": list(self.notes),
                "interrupted": self.interrupted}
