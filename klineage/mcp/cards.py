"""Markdown cards: a skill as a readable page (intent, where, when, effect, risks, how, a diff) and a lineage."""

from __future__ import annotations

import json

from klineage.kb.service import KnowledgeBase
from klineage.mcp.limits import MAX_DIFF_CHARS, MAX_EVIDENCE
from klineage.mcp.views import clip, usage_line
from klineage.schema.records import Condition


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}×"


def _condition_line(c: Condition) -> str:
    line = f"- `{c.expr}`"
    if c.description:
        line += f" — {clip(c.description, 300)}"
    if c.oos_accuracy is not None and c.majority is not None:
        line += f" ({100 * c.oos_accuracy:.0f}% right out of sample vs majority rate {100 * c.majority:.0f}%)"
    elif c.source:
        line += f" (source: {c.source})"
    return line


def skill_card(kb: KnowledgeBase, skill_id: str) -> str | None:
    """The skill's card in markdown, or None for an unknown id."""
    s = kb.skill(skill_id)
    if s is None:
        return None
    ids = [s.id]
    valid, profitable = kb.conditions(ids, "valid")[s.id], kb.conditions(ids, "profitable")[s.id]
    risks, evidence = kb.risks(ids)[s.id], kb.evidence(ids)[s.id]
    lines = [f"# {s.name}", "", f"`{s.id}` · operator `{s.operator}`" + (" · SAMPLE DATA" if s.sample else ""),
             "", "## Intent", clip(s.intent), "",
             "## Where", f"{clip(s.anchor.description)}" + (f" (anchor: `{s.anchor.predicate}`)"
                                                            if s.anchor.predicate else ""),
             f"Changes: {clip(s.carrier)}", "", "## When", "Valid when:"]
    lines += [_condition_line(c) for c in valid] or ["- no VALID_WHEN condition was found by the gates"]
    lines.append("Profitable when:")
    if profitable:
        lines += [_condition_line(c) for c in profitable]
    else:
        lines.append(f"- no rule — {s.profitability or 'no timings separate where it paid'}")
    e = s.effect
    lines += ["", "## Effect", f"Speedup over the simplified kernel: median {_x(e.median)} (min {_x(e.min)}, "
              f"max {_x(e.max)}, n = {e.n}); support {s.support_steps} step(s) in {s.support_lineages} lineage(s).",
              f"Agents: {usage_line(s)}."]
    field_effect = s.field_effect
    if field_effect.n:
        lines.append(f"On new code (verified applications): median {_x(field_effect.median)} "
                     f"(min {_x(field_effect.min)}, max {_x(field_effect.max)}, n = {field_effect.n}).")
    for ev in evidence[:MAX_EVIDENCE]:
        shown = ", ".join(f"{x['speedup']:.2f}× at {json.dumps(x.get('shape', {}), sort_keys=True)} "
                          f"{x.get('dtype', '')}" for x in ev.speedups[:4])
        lines.append(f"- {ev.workload} on {ev.gpu} (lineage `{ev.lineage_id}`, step `{ev.step_id}`): "
                     f"{shown or 'untimed'}" + (" [sample]" if ev.sample else ""))
    lines += ["", "## Risks"]
    lines += [f"- **{r.kind}**: {clip(r.description, 400)}" for r in risks[:MAX_EVIDENCE]] or ["- none recorded"]
    lines += ["", "## How to apply", f"Operator `{s.operator}` with portable parameters:", "```json",
              clip(json.dumps(dict(s.transform), indent=1, sort_keys=True, default=str), 3000), "```"]
    diff = _first_diff(kb, [ev.step_id for ev in evidence])
    if diff:
        lines += ["", "## Before / after (from its lineage)", "```diff", clip(diff, MAX_DIFF_CHARS), "```"]
    return "\n".join(lines) + "\n"


def _first_diff(kb: KnowledgeBase, step_ids: list[str]) -> str:
    """The diff of the first evidence step that has one, read forward (the step removed the optimization;
    the skill adds it, so + and - lines are swapped)."""
    for step in kb.steps(step_ids[:MAX_EVIDENCE]) if step_ids else []:
        if step is not None and step.diff:
            return _reverse_diff(step.diff)
    return ""


def _reverse_diff(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        if line.startswith("+++") or line.startswith("---"):
            out.append(("--- " if line.startswith("+++") else "+++ ") + line[4:])
        elif line.startswith("+"):
            out.append("-" + line[1:])
        elif line.startswith("-"):
            out.append("+" + line[1:])
        else:
            out.append(line)
    return "\n".join(out)


def lineage_card(kb: KnowledgeBase, lineage_id: str, step_skills: dict[str, str] | None = None) -> str | None:
    """The lineage as markdown (metadata, then each step: operator, verdict, skill), or None when unknown."""
    view = kb.lineage(lineage_id)
    if view is None:
        return None
    lin = view.lineage
    lines = [f"# Lineage {lin.id}", "", f"Workload `{lin.workload}` on {lin.gpu} "
             f"({lin.arch}), created {lin.created}" + (" · SAMPLE DATA" if lin.sample else ""),
             "", "Backward walk from the expert kernel; each accepted step removed one optimization "
             "(read in reverse, the path from naive to expert).", ""]
    for step in view.steps:
        verdict = "accepted" if step.accepted else f"rejected at {step.gate}: {clip(step.reason, 200)}"
        skill = (step_skills or {}).get(step.id)
        lines.append(f"{step.index}. `{step.operator}` {json.dumps(dict(step.params))} — "
                     f"{verdict}" + (f" → skill `{skill}` (klineage://skills/{skill})" if skill else ""))
    return "\n".join(lines) + "\n"


def index_card(rows: list[tuple[str, str]], title: str) -> str:
    """A markdown list of (uri, label) rows under a title."""
    return f"# {title}\n\n" + "\n".join(f"- [{label}]({uri})" for uri, label in rows) + "\n"


