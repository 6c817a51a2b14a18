"""Compact JSON views of knowledge-base records for MCP answers.

Field names follow the GraphQL API (camelCase), so a ``search_skills`` hit reads like a
``searchSkills`` hit. No embedding vector is ever included; lists and strings are bounded
(``limits``), and where a list was cut the total is given beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from klineage.mcp.limits import MAX_DIFF_CHARS, MAX_EVIDENCE, MAX_FIELD_CHARS, MAX_SPEEDUPS
from klineage.schema.lineage_records import LineageDetail, Step
from klineage.schema.records import Application, Condition, Evidence, Risk, Skill


def clip(text: Any, limit: int = MAX_FIELD_CHARS) -> str:
    """``text`` as a string of at most ``limit`` characters (a cut one ends with '…')."""
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def skill_view(s: Skill) -> dict[str, Any]:
    """A skill's fields as GraphQL's ``Skill`` names them (no embedding), plus its usage by agents."""
    return {
        "id": s.id, "name": s.name, "intent": clip(s.intent), "operator": s.operator,
        "anchor": {"predicate": clip(s.anchor.predicate), "description": clip(s.anchor.description)},
        "carrier": clip(s.carrier), "transform": dict(s.transform), "effect": s.effect.to_dict(),
        "support": s.support_steps, "supportLineages": s.support_lineages,
        "architectures": list(s.architectures), "sample": s.sample, "profitability": clip(s.profitability),
        "together": [t.view() for t in s.together],
    }


def evidence_view(e: Evidence) -> dict[str, Any]:
    """One evidence step as GraphQL's ``Evidence`` (at most MAX_SPEEDUPS per-shape speedups)."""
    return {"lineageId": e.lineage_id, "stepId": e.step_id, "workload": e.workload, "gpu": e.gpu,
            "speedups": [dict(x) for x in e.speedups[:MAX_SPEEDUPS]], "sample": e.sample}


def evidence_list(items: Sequence[Evidence]) -> dict[str, Any]:
    """At most MAX_EVIDENCE evidence steps and the total."""
    return {"evidence": [evidence_view(e) for e in items[:MAX_EVIDENCE]], "evidenceTotal": len(items)}


def hit_view(hit: Any) -> dict[str, Any]:
    """A ``kb.search.SkillHit`` as GraphQL's ``SkillHit`` plus the ranking's terms (expected gain, its
    basis, confidence) and the skill's usage line."""
    return {
        "skill": skill_view(hit.skill), "score": float(hit.score), "applicable": hit.applicable,
        "expectedGain": float(hit.expected_gain), "gainBasis": clip(hit.gain_basis),
        "confidence": float(hit.confidence), "usage": usage_line(hit.skill), "admission": hit.skill.admission,
        "why": clip(hit.why), "missingFeatures": list(hit.missing_features),
        "explanation": {"passed": [clip(x) for x in hit.passed], "failed": [clip(x) for x in hit.failed],
                        "unknown": [clip(x) for x in hit.unknown], **evidence_list(hit.evidence)},
        "risks": [risk_view(r) for r in hit.risks[:MAX_EVIDENCE]],
        "together": hit.together.view() if hit.together is not None else None,
    }


def usage_line(s: Skill) -> str:
    """"applied N times by agents, paid M times" (``Skill.usage``)."""
    return s.usage()


def condition_view(c: Condition) -> dict[str, Any]:
    """A condition as GraphQL's ``Condition``."""
    return {"id": c.id, "expr": clip(c.expr), "kind": c.kind, "source": c.source, "description": clip(c.description),
            "accuracy": c.accuracy, "support": c.support, "oosAccuracy": c.oos_accuracy, "majority": c.majority}


def risk_view(r: Risk) -> dict[str, Any]:
    """A risk as GraphQL's ``Risk``."""
    return {"id": r.id, "kind": r.kind, "description": clip(r.description), "evidence": clip(r.evidence)}


def application_view(a: Application) -> dict[str, Any]:
    """A recorded application as GraphQL's ``Application``."""
    return {"id": a.id, "skillId": a.skill_id, "kernelSha": a.kernel_sha, "outcome": a.outcome,
            "speedup": a.speedup, "recordedAt": a.recorded_at, "verified": a.verified, "verdict": a.verdict or None}


def step_view(step: Step, skill_ids: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One lineage step: operator, params, verdict and its diff (cut at MAX_DIFF_CHARS)."""
    return {"id": step.id, "index": step.index, "operator": step.operator, "params": dict(step.params),
            "accepted": step.accepted, "gate": step.gate, "reason": clip(step.reason),
            "skillId": (skill_ids or {}).get(step.id), "diff": clip(step.diff, MAX_DIFF_CHARS),
            "sample": step.sample}


def lineage_view(view: LineageDetail, skill_ids: Mapping[str, str] | None = None, steps: bool = True
                 ) -> dict[str, Any]:
    """A lineage without kernel sources: its metadata and (``steps``) its steps."""
    lin = view.lineage
    out: dict[str, Any] = {
        "id": lin.id, "workload": lin.workload, "gpu": lin.gpu, "arch": lin.arch, "created": lin.created,
        "policy": lin.policy, "sample": lin.sample, "startSha": lin.start_sha, "stepCount": len(view.steps),
        "accepted": sum(1 for s in view.steps if s.accepted),
    }
    if steps:
        out["steps"] = [step_view(s, skill_ids) for s in view.steps]
    return out
