"""The gate result document (DESIGN.md, "Contracts"): the validator's verdict on one candidate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GATES: tuple[str, ...] = ("static", "compile", "correctness", "integrity", "performance")
STATUSES: tuple[str, ...] = ("pass", "fail", "skipped")


@dataclass(frozen=True)
class GateOutcome:
    """One gate's outcome: ``status`` pass/fail/skipped, a one-line ``reason``, and its metrics."""

    gate: str
    status: str
    reason: str = ""
    metrics: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"unknown gate {self.gate!r}; expected one of {', '.join(GATES)}")
        if self.status not in STATUSES:
            raise ValueError(f"unknown gate status {self.status!r}; expected one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form ``{"gate", "status", "reason", "metrics"}``."""
        return {"gate": self.gate, "status": self.status, "reason": self.reason, "metrics": dict(self.metrics)}


#: What ``GateResult.gpu`` says when no GPU judged the candidate (correctness under the interpreter only).
NO_GPU = "none (CPU: Triton interpreter, cross-compile only)"


@dataclass(frozen=True)
class GateResult:
    """The verdict on one candidate: ``pass`` only when no gate failed."""

    kernel_sha: str
    gpu: str
    versions: Mapping[str, str]
    gates: tuple[GateOutcome, ...]
    workload: str = ""
    date: str = ""

    @property
    def verdict(self) -> str:
        """``"fail"`` when any gate failed, else ``"pass"`` (skipped gates do not fail a candidate)."""
        return "fail" if any(g.status == "fail" for g in self.gates) else "pass"

    @property
    def on_gpu(self) -> bool:
        """Whether a GPU judged the candidate (so its performance gate could time it, whatever the verdict)."""
        return bool(self.gpu) and self.gpu != NO_GPU

    @property
    def failed_gate(self) -> GateOutcome | None:
        """The first failing gate, if any."""
        return next((g for g in self.gates if g.status == "fail"), None)

    def gate(self, name: str) -> GateOutcome | None:
        """The outcome of gate ``name``, or None when it did not run."""
        return next((g for g in self.gates if g.gate == name), None)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON gate result document."""
        return {
            "verdict": self.verdict, "kernel_sha": self.kernel_sha, "gpu": self.gpu,
            "versions": dict(self.versions), "workload": self.workload, "date": self.date,
            "gates": [g.to_dict() for g in self.gates],
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> GateResult:
        """Read a document written by ``to_dict`` (the stored verdict is recomputed, not trusted)."""
        return GateResult(
            kernel_sha=str(data["kernel_sha"]), gpu=str(data.get("gpu", "")),
            versions=dict(data.get("versions") or {}),
            gates=tuple(GateOutcome(g["gate"], g["status"], g.get("reason", ""), dict(g.get("metrics") or {}))
                        for g in data.get("gates", ())),
            workload=str(data.get("workload", "")), date=str(data.get("date", "")),
        )
