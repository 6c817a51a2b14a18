"""Moves: what an agent proposes to change, and their mechanical materialization.

A ``Move`` is one validator call's worth of change: one or more operator applications (a *composite*
move when its steps only pay together, e.g. larger tiles with the warps and stages that feed them),
each with the parameters the planner chose. A step may also *simplify* (take an optimization out, as the
walker does) so that the next step puts it back differently: a re-tune is autotune simplified, then
applied with another config set. ``materialize`` applies the steps in order with the
operators' ``apply`` — the same operators the backward walker uses to remove them — and never guesses:
a step whose operator does not recognise the code is skipped, and a move none of whose steps changed
anything materializes to None (it costs no validator call).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from klineage.transforms.operator import Rewrite
from klineage.transforms.registry import get_operator
from klineage.transforms.under_autotune import MARK, apply_or_under_autotune


@dataclass(frozen=True)
class MoveStep:
    """One operator application: the operator id, the keyword parameters of its ``apply`` (or of its
    ``simplify`` when ``action`` is ``"simplify"``)."""

    operator: str
    params: Mapping[str, Any] = field(default_factory=dict)
    action: str = "apply"

    def label(self) -> str:
        """The operator, and how it was made when that was not a plain apply (for people)."""
        return self.operator if self.action == "apply" else f"{self.operator} ({self.action})"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (``action`` only when it is not ``apply``)."""
        out: dict[str, Any] = {"operator": self.operator, "params": dict(self.params)}
        if self.action != "apply":
            out["action"] = self.action
        return out


@dataclass(frozen=True)
class Move:
    """A proposal for one validator call.

    ``label`` names it for people; ``steps`` are applied in order; ``origin`` says where it came from
    (``lineage gemm step 4``, ``memory``, ``fixed order``); ``expected_gain`` is the planner's estimate
    of the speedup over the current kernel (None when it has none); ``why`` is one line of reasoning.
    """

    label: str
    steps: tuple[MoveStep, ...]
    origin: str = ""
    expected_gain: float | None = None
    why: str = ""

    @property
    def operators(self) -> tuple[str, ...]:
        """The operator ids of the steps, in order."""
        return tuple(s.operator for s in self.steps)

    def key(self) -> str:
        """A stable identity of the move (operators and parameters) to avoid proposing it twice."""
        return repr([(s.operator, s.action, sorted((k, repr(v)) for k, v in s.params.items())) for s in self.steps])

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"label": self.label, "steps": [s.to_dict() for s in self.steps], "origin": self.origin,
                "expected_gain": self.expected_gain, "why": self.why}


@dataclass(frozen=True)
class Materialized:
    """The source a move produced and which of its steps changed the code (``applied``)."""

    source: str
    applied: tuple[MoveStep, ...]
    skipped: tuple[str, ...]


#: The action a materialized step records when it was made with the kernel's autotune configs taken out and
#: put back (re-applying it makes it the same way: every action but ``simplify`` applies).
UNDER_AUTOTUNE = "apply under autotune"


def _rewrite(source: str, step: MoveStep) -> Rewrite | None:
    operator = get_operator(step.operator)
    try:
        if step.action == "simplify":
            return operator.simplify(source, **dict(step.params))
        return apply_or_under_autotune(operator, source, **dict(step.params))
    except (ValueError, TypeError, KeyError, SyntaxError):
        return None


def apply_step(source: str, step: MoveStep) -> str | None:
    """The source after one step, or None when the operator does not apply (or rejects the
    parameters): an operator's refusal is never an error for the agent, it is a move that cannot be made.
    A structural operator that refuses an autotuned kernel is made with the kernel's configs taken out and
    put back (``transforms.under_autotune``), as the knowledge base's anchors say it can."""
    rewrite = _rewrite(source, step)
    return rewrite.source if rewrite is not None else None


def fitting_step(source: str, operator: str, params: Mapping[str, Any]) -> tuple[MoveStep, bool]:
    """The step of ``operator`` with ``params`` when it applies to ``source``, else with the operator's
    defaults; and whether ``params`` fit (True when there are none)."""
    given = MoveStep(operator, dict(params))
    if not params or apply_step(source, given) is not None:
        return given, True
    return MoveStep(operator, {}), False


def materialize(source: str, move: Move) -> Materialized | None:
    """Apply every step of ``move`` in order; None when no step changed the source. A step made under
    autotune is recorded with the action ``UNDER_AUTOTUNE``."""
    current = source
    applied: list[MoveStep] = []
    skipped: list[str] = []
    for step in move.steps:
        rewrite = _rewrite(current, step)
        if rewrite is None or rewrite.source == current:
            skipped.append(step.operator)
            continue
        current = rewrite.source
        # the trajectory says when a step was made with the configs taken out and put back
        applied.append(replace(step, action=UNDER_AUTOTUNE) if MARK in rewrite.params else step)
    if not applied:
        return None
    if skipped and any(s.action == "simplify" for s in applied):
        return None  # a simplify is only the means of the steps after it: without them it is no move
    return Materialized(current, tuple(applied), tuple(skipped))


def single(operator: str, params: Mapping[str, Any] | None = None, *, origin: str = "",
           expected_gain: float | None = None, why: str = "", label: str | None = None) -> Move:
    """A move of one step."""
    return Move(label or operator, (MoveStep(operator, dict(params or {})),), origin, expected_gain, why)


def composite(label: str, steps: Sequence[MoveStep], *, origin: str = "", expected_gain: float | None = None,
              why: str = "") -> Move:
    """A move of several steps validated together."""
    return Move(label, tuple(steps), origin, expected_gain, why)
