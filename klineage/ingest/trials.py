"""Trials: agents' verified applications of skills on new code, kept as files and recorded into a knowledge base.

A trial file is JSON lines, one application each (``bench/export_trials.py`` writes them from the agent
evaluation on the H200)::

    {"operator": "autotune", "kernel_source": "...", "outcome": "improved", "speedup": 2.7,
     "gate_result": {...the validator's gate result document for that source...},
     "context": {"bytes": ..., "rows": ...}, "recorded_at": "2026-12-05T13:38:00+00:00", ...}

``record_trials`` records each through the feedback loop (``feedback.record_with_feedback``: the skill's
``verified`` / ``paid`` counts, its field effect, and re-induction of its PROFITABLE_WHEN once enough
verified applications carry a context). Recording the same file again changes nothing: a trial's date is
part of its application's identity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klineage.ingest.feedback import record_with_feedback
from klineage.kb.service import KnowledgeBase, KnowledgeBaseError
from klineage.schema.gate_result import GateResult
from klineage.schema.records import skill_id

#: The fields every trial line must have.
REQUIRED = ("operator", "kernel_source", "outcome", "gate_result", "recorded_at")


class TrialError(KnowledgeBaseError):
    """A trial file that cannot be read or recorded (names the file, the line and what was expected)."""


@dataclass(frozen=True)
class Trial:
    """One verified application of a skill (by operator) on a kernel that no lineage was walked on."""

    operator: str
    kernel_source: str
    outcome: str
    gate_result: GateResult
    recorded_at: str
    speedup: float | None = None
    context: Mapping[str, Any] = field(default_factory=dict)


def load_trials(path: Path) -> list[Trial]:
    """The trials of a JSON-lines file; TrialError naming the file and line for anything malformed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TrialError(f"{path}: cannot read the trial file ({exc.strerror or exc})") from exc
    out: list[Trial] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrialError(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise TrialError(f"{where}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in REQUIRED if not row.get(k)]
        if missing:
            raise TrialError(f"{where}: missing {', '.join(missing)} (a trial needs {', '.join(REQUIRED)})")
        speedup = row.get("speedup")
        if speedup is not None and (not isinstance(speedup, (int, float)) or isinstance(speedup, bool)
                                    or not math.isfinite(speedup) or speedup <= 0):
            raise TrialError(f"{where}: speedup {speedup!r}: expected a positive number or null")
        if not isinstance(row["gate_result"], dict):
            raise TrialError(f"{where}: gate_result: expected the validator's gate result document (an object)")
        try:
            gate = GateResult.from_dict(row["gate_result"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TrialError(f"{where}: gate_result is not a gate result document ({exc})") from exc
        context = row.get("context") or {}
        if not isinstance(context, dict):
            raise TrialError(f"{where}: context: expected an object of feature name to value")
        out.append(Trial(str(row["operator"]), str(row["kernel_source"]), str(row["outcome"]), gate,
                         str(row["recorded_at"]), None if speedup is None else float(speedup), context))
    return out


def record_trials(kb: KnowledgeBase, trials: Sequence[Trial]) -> int:
    """Record every trial whose skill the knowledge base has (through the feedback loop); returns how many
    were recorded. A trial of a skill the knowledge base does not hold is skipped: it has nothing to
    teach that knowledge base."""
    recorded = 0
    for trial in trials:
        sid = skill_id(trial.operator)
        if kb.skill(sid) is None:
            continue
        try:
            record_with_feedback(kb, sid, trial.kernel_source, trial.outcome, trial.speedup,
                                 gate_result=trial.gate_result, context=trial.context,
                                 recorded_at=trial.recorded_at)
        except KnowledgeBaseError as exc:
            raise TrialError(f"trial of {trial.operator} recorded at {trial.recorded_at}: {exc}") from exc
        recorded += 1
    return recorded


def find_trial_files(root: Path) -> list[Path]:
    """The committed trial files under ``root/trials`` (``*.jsonl``), sorted; empty when there are none."""
    folder = root / "trials"
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
