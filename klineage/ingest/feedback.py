"""The feedback loop above the knowledge base: record an application, and re-induce the skill's
PROFITABLE_WHEN conditions once enough verified evidence from agents has accrued.

``kb`` cannot import ``ingest`` (the inducer lives here), so the layers that serve agents (the CLI's
GraphQL and MCP servers) pass ``record_with_feedback`` as their recorder. "Enough" is
``MIN_VERIFIED`` verified applications that carry the problem context of the shape they were measured
on; the rule is induced with ``induce_profitable`` (leave-one-kernel-out: each new kernel is a group)
over those applications, labelled paid (passed every gate and ran >= ``records.PAID`` times faster).
A kept rule replaces the skill's PROFITABLE_WHEN conditions; when none is kept the stored conditions
stay, and a skill that had none gets the inducer's plain note ("paid on x of n ...").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from klineage.ingest.induce import InducedCondition, LabelledPoint, induce_profitable
from klineage.kb.service import KnowledgeBase
from klineage.schema.gate_result import GateResult
from klineage.schema.records import PAID, Application, Condition

#: Verified applications with a context needed before conditions are re-induced from them.
MIN_VERIFIED = 8


@dataclass(frozen=True)
class Reinduction:
    """What a re-induction did: the rule (None below MIN_VERIFIED), whether it replaced the conditions."""

    skill_id: str
    points: int
    induced: InducedCondition | None
    replaced: bool


def reinduce(kb: KnowledgeBase, skill_id: str, min_verified: int = MIN_VERIFIED) -> Reinduction:
    """Re-induce ``skill_id``'s PROFITABLE_WHEN from its verified applications (module docstring)."""
    apps = [a for a in kb.applications([skill_id])[skill_id]
            if a.verified and a.context and (a.speedup is not None or a.verdict == "fail")]
    if len(apps) < min_verified:
        return Reinduction(skill_id, len(apps), None, False)
    points = [LabelledPoint(dict(a.context), a.paid, a.kernel_sha) for a in apps]
    induced = induce_profitable(points, positive=f"paid on new code (speedup >= {PAID:g}x)",
                                validation="leave-one-kernel-out")
    if induced is None:
        return Reinduction(skill_id, len(points), None, False)
    if induced.kept and not induced.constant:
        condition = Condition(induced.expr, "profitable", "induced-feedback", induced.description, induced.accuracy,
                              induced.support, induced.oos_accuracy, induced.majority)
        kb.replace_profitable(skill_id, [condition], "")
        return Reinduction(skill_id, len(points), induced, True)
    if not kb.conditions([skill_id], "profitable")[skill_id]:
        kb.replace_profitable(skill_id, [], f"{induced.description} (from {len(points)} verified applications)")
    return Reinduction(skill_id, len(points), induced, False)


def record_with_feedback(kb: KnowledgeBase, skill_id: str, kernel_source: str, outcome: str,
                         speedup: float | None = None, gate_result: GateResult | None = None,
                         context: Mapping[str, Any] | None = None, recorded_at: str | None = None) -> Application:
    """``KnowledgeBase.record_application``, then ``reinduce`` when the application was verified."""
    app = kb.record_application(skill_id, kernel_source, outcome, speedup, gate_result=gate_result, context=context,
                                recorded_at=recorded_at)
    if app.verified and app.context:
        reinduce(kb, skill_id)
    return app
