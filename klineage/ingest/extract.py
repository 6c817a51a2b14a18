"""Skill extraction: from the steps of backward walks to the ``skills`` of a lineage document (pure).

A backward step goes from a more optimized kernel (``from``) to a simplified one (``to``); the skill is
its reverse, so on each measured shape it speeds the kernel up by ``to_ms / from_ms``.

Two stages, so that one lineage and many lineages use the same code:

1. ``skill_instances(data)``: the evidence one lineage document holds about each operator it tried,
   as frozen ``SkillInstance`` records (per-shape effects of accepted steps, rejections, per-shape gate
   outcomes, the skills it enables).
2. ``merge_skills(instance_lists)``: one ``MergedSkill`` per operator from the instances of any number
   of lineages; its conditions are (re-)induced from *all* points (``induce.induce_condition``).

``extract_skills(data)`` is stage 2 over stage 1 of a single document: what the walker calls to fill
``data["skills"]``. ``skill_json(merged, steps)`` writes one skill entry. ``ingest.pipeline``
applies ``merge_skills`` across documents (and the evidence already stored) before ingesting.

Rules, kept simple and written here once:

* **Effect** of an accepted step on a shape: ``to_ms / from_ms``.
* **Features** of a case: ``kb.features.case_features`` of its shape, dtype and arch, with the dim
  roles the document records (``workload.roles``) or, for documents without them, the roles
  ``kb.features.infer_roles`` gives the shape's dim names and the workload family; a step timing's
  recorded ``flops`` / ``bytes`` replace the estimates. Rules use the portable features only.
* **PROFITABLE_WHEN**: ``induce.induce_profitable`` over the cases labelled paid (speedup >= 1 +
  ``PROFIT_MARGIN``, DESIGN.md: 1.03) or not, its accuracy measured out of sample: points grouped by
  workload when they come from >= 2 workloads (leave-one-workload-out), else by shape (dtype aside:
  leave-one-shape-out). A rule is kept only when it beats the majority-class rate by ``induce.MARGIN``
  with enough support; otherwise there is no PROFITABLE_WHEN condition and the skill's
  ``profitability`` says "paid on x of n measured shapes; no rule separates them" (or all / none).
* **VALID_WHEN**: induced (in sample) over pass/fail per shape when a rejected attempt of the operator failed the
  compile, integrity or performance gate on identified shapes (the failing case named by the gate's
  ``metrics.case`` or its reason, e.g. ``bf16 {'M': 4096, ...}``; a failing performance gate's
  ``metrics.rows`` passed). The shapes of accepted steps passed every gate in both versions, so they
  are pass points. No condition when no shape is identified as failing, or none as passing.
  A **correctness** failure of the simplified kernel gives no VALID_WHEN: it says the optimization is
  *needed* for correct results there, so excluding those shapes would hide the skill exactly where it
  matters; it becomes the risk ``wrong-results`` ("wrong results without it").
* **Risks**: a compile failure -> ``out-of-resources`` (the reason names shared memory, registers,
  spills or resources) or ``compile-failure``; correctness -> ``wrong-results``; integrity ->
  ``integrity``; a failing performance gate -> ``runtime-failure``; measured shapes where the kernel
  *with* the optimization was slower by more than the margin (an accepted step, or a rejected one
  that carries timings, e.g. rejected by policy) -> ``regression``. Static and policy rejections
  without timings say nothing about the optimization (a rewrite bug, a cycle): no risk.
* **ENABLES**: A enables B when, walking backward, B's simplification was accepted before A's (so
  going forward B is applied after A), B could be applied (``detect`` finds an "applicable" anchor)
  to the kernel A's step started from, and could not be applied to the kernel A's step produced:
  removing A took B's place away, so B needs A.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klineage.ingest.induce import InducedCondition, LabelledPoint, induce_condition, induce_profitable
from klineage.kb.features import FeatureError, canonical_name, case_features, problem_features
from klineage.schema import pyast
from klineage.schema.errors import KLineageError
from klineage.schema.ids import content_id
from klineage.schema.kernel_features import KERNEL_KIND
from klineage.schema.lineage_records import geomean_gain, step_speedups
from klineage.schema.records import LAUNCH_CONFIGURATION_SET, PAYING_PAIR, Risk, pays_only_with_next
from klineage.transforms.features import kernel_features
from klineage.transforms.registry import LAUNCH_CONFIGURATION, get_operator

__all__ = ["PROFIT_MARGIN", "ExtractError", "GateOutcome", "MergedSkill", "Rejection", "ShapeEffect",
           "SkillInstance", "enables_of", "extract_skills", "merge_skills", "shape_features", "shape_label",
           "skill_instances", "skill_json"]

#: A shape "paid" when the optimization sped it up by at least this fraction (DESIGN.md: 1.03).
PROFIT_MARGIN = 0.03
_REASON_CHARS = 300
_CASE = re.compile(r"\b(fp32|fp16|bf16) (\{[^{}]*\})")
_RESOURCES = re.compile(r"out of resources|outofresources|shared memory|register|spill", re.IGNORECASE)
_RISK_GATES = {"compile", "correctness", "integrity", "performance"}
_VALID_GATES = {"compile", "integrity", "performance"}


class ExtractError(KLineageError, ValueError):
    """Skills cannot be written for this evidence (e.g. an operator the registry does not know)."""


def shape_label(shape: Mapping[str, Any], dtype: str | None = None) -> str:
    """``bf16 M=4096 N=4096 K=512``: a short, stable label of one case."""
    dims = " ".join(f"{k}={v}" for k, v in shape.items())
    return f"{dtype} {dims}" if dtype else dims


def shape_features(shape: Mapping[str, Any], dtype: str | None, arch: str | None = None,
                   roles: Mapping[str, str] | None = None, family: str | None = None,
                   flops: float | None = None, bytes_moved: float | None = None) -> dict[str, Any]:
    """Features of one case: ``kb.features.case_features`` (its dims as context, dtype, arch and the
    portable features from the dims' roles, declared or inferred), plus the legacy ``numel`` of
    ``problem_features`` for the dims in the vocabulary. A shape whose roles cannot be resolved
    gives its dims, dtype and arch only (conditions on portable features are then unknown for it)."""
    try:
        features = case_features(shape, dtype, roles, family, flops, bytes_moved, arch or None)
    except FeatureError:
        features = {k: v for k, v in shape.items()}
        with contextlib.suppress(FeatureError):
            features.update(case_features({}, dtype, None, None, None, None, arch or None))
    context: dict[str, Any] = {}
    for key, value in shape.items():
        with contextlib.suppress(FeatureError):
            context[canonical_name(key)] = value
    with contextlib.suppress(FeatureError):
        numel = problem_features(context).get("numel")
        if numel is not None:
            features.setdefault("numel", numel)
    return features


def _case_context(data: Mapping[str, Any]) -> tuple[Mapping[str, str] | None, str | None]:
    """The dim roles and family a lineage document records for its workload (roles may be absent)."""
    workload = data.get("workload") or {}
    roles = workload.get("roles")
    family = workload.get("family")
    return (dict(roles) if isinstance(roles, Mapping) else None), (str(family) if family else None)


@dataclass(frozen=True)
class ShapeEffect:
    """One measured case of one step: optimized (``from_ms``) and simplified (``to_ms``) times."""

    workload: str
    lineage_id: str
    step: int
    shape: Mapping[str, Any]
    dtype: str
    from_ms: float
    to_ms: float
    arch: str = ""
    vendor_ms: float | None = None
    roles: Mapping[str, str] | None = None
    family: str | None = None
    flops: float | None = None
    bytes_moved: float | None = None

    @property
    def speedup(self) -> float:
        """What the optimization did on this case: simplified time over optimized time."""
        return self.to_ms / self.from_ms

    @property
    def paid(self) -> bool:
        """True when the speedup reaches 1 + PROFIT_MARGIN."""
        return self.speedup >= 1.0 + PROFIT_MARGIN

    @property
    def regressed(self) -> bool:
        """True when the optimized kernel was slower than the simplified one by more than the margin."""
        return self.speedup * (1.0 + PROFIT_MARGIN) <= 1.0

    def features(self) -> dict[str, Any]:
        """The case's features (``shape_features`` with its roles, family and recorded flops/bytes)."""
        return shape_features(self.shape, self.dtype, self.arch, self.roles, self.family, self.flops,
                              self.bytes_moved)


@dataclass(frozen=True)
class GateOutcome:
    """Whether one case passed the gates in a step's evidence (``passed`` False: it failed ``gate``)."""

    workload: str
    lineage_id: str
    step: int
    shape: Mapping[str, Any]
    dtype: str
    passed: bool
    gate: str = ""
    arch: str = ""
    roles: Mapping[str, str] | None = None
    family: str | None = None

    def features(self) -> dict[str, Any]:
        """The case's features (``shape_features`` with its roles and family)."""
        return shape_features(self.shape, self.dtype, self.arch, self.roles, self.family)


@dataclass(frozen=True)
class Rejection:
    """A rejected attempt to remove the operator: the gate, its reason, and timings when measured."""

    workload: str
    lineage_id: str
    step: int
    gate: str
    reason: str
    timings: tuple[ShapeEffect, ...] = ()


@dataclass(frozen=True)
class SkillInstance:
    """What one lineage says about one operator: accepted steps (indexes) with their per-case effects
    and parameters, rejections, per-case gate outcomes and the operators this one enables."""

    operator: str
    workload: str
    lineage_id: str
    arch: str
    steps: tuple[int, ...] = ()
    params: Mapping[str, Any] | None = None
    effects: tuple[ShapeEffect, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    outcomes: tuple[GateOutcome, ...] = ()
    enables: tuple[str, ...] = ()
    sample: bool = False


@dataclass(frozen=True)
class MergedSkill:
    """One operator's skill from the instances of one or more lineages, with re-induced conditions."""

    operator: str
    instances: tuple[SkillInstance, ...]
    profitable: InducedCondition | None  # the induction's verdict; a condition only when ``.kept``
    valid: InducedCondition | None
    risks: tuple[Risk, ...]
    enables: tuple[str, ...]
    architectures: tuple[str, ...]

    @property
    def profitable_rule(self) -> InducedCondition | None:
        """The PROFITABLE_WHEN condition to store: the induced rule when it was kept, else None."""
        return self.profitable if self.profitable is not None and self.profitable.kept else None

    @property
    def profitability(self) -> str:
        """What the timings say about when the skill pays, when no rule was kept ("paid on x of n
        measured shapes; no rule separates them"); empty when a rule was kept or nothing was timed."""
        if self.profitable is None or self.profitable.kept:
            return ""
        return self.profitable.description

    @property
    def effects(self) -> tuple[ShapeEffect, ...]:
        """Every measured case of every accepted step, in instance order."""
        return tuple(e for inst in self.instances for e in inst.effects)

    @property
    def accepted(self) -> bool:
        """True when at least one lineage accepted a step of this operator (only then is it a skill)."""
        return any(inst.steps for inst in self.instances)

    @property
    def workloads(self) -> tuple[str, ...]:
        """Workloads with evidence, sorted."""
        return tuple(sorted({inst.workload for inst in self.instances}))


# ------------------------------------------------------------------------------------ one lineage


def _lineage_id(data: Mapping[str, Any]) -> str:
    d = data
    return content_id("Lineage", d["workload"]["name"], d["gpu"]["name"], d["start"], d["versions"])


def _effects(step: Mapping[str, Any], workload: str, lineage_id: str, arch: str,
             roles: Mapping[str, str] | None = None, family: str | None = None) -> tuple[ShapeEffect, ...]:
    return tuple(
        ShapeEffect(workload, lineage_id, int(step["index"]), dict(t["shape"]), str(t["dtype"]),
                    float(t["from_ms"]), float(t["to_ms"]), arch, t.get("vendor_ms"), roles, family,
                    t.get("flops"), t.get("bytes"))
        for t in step.get("timings") or () if t.get("from_ms") and t.get("to_ms"))


def _parse_case(text: str) -> tuple[dict[str, Any], str] | None:
    """The case a gate names (``bf16 {'M': 4096, 'N': 4096}`` as ``checks.case_label`` writes it)."""
    found = _CASE.search(text or "")
    if found is None:
        return None
    try:
        shape = pyast.literal_eval(found.group(2))
    except (ValueError, SyntaxError):
        return None
    if not isinstance(shape, dict) or not all(isinstance(k, str) for k in shape):
        return None
    return shape, found.group(1)


def _failed_gate(step: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The failing gate record of the rejected kernel's gate run, when the step carries it."""
    for run in step.get("gate_runs") or ():
        if run.get("kernel_sha") != step.get("to"):
            continue
        for gate in run.get("gates") or ():
            if gate.get("status") == "fail" and gate.get("gate") == step.get("gate"):
                return gate
    return None


def _outcomes(step: Mapping[str, Any], workload: str, lineage_id: str, arch: str,
              roles: Mapping[str, str] | None = None, family: str | None = None) -> tuple[GateOutcome, ...]:
    gate_name = str(step.get("gate") or "")
    failed = _failed_gate(step)
    metrics = (failed or {}).get("metrics") or {}
    case = _parse_case(str(metrics.get("case", ""))) or _parse_case(str(step.get("reason", "")))
    out: list[GateOutcome] = []
    index = int(step["index"])
    if case is not None:
        out.append(GateOutcome(workload, lineage_id, index, case[0], case[1], False, gate_name, arch, roles,
                               family))
    for row in metrics.get("rows") or ():  # a failing performance gate lists the cases it timed
        if isinstance(row, Mapping) and isinstance(row.get("shape"), Mapping) and row.get("dtype"):
            out.append(GateOutcome(workload, lineage_id, index, dict(row["shape"]), str(row["dtype"]), True,
                                   gate_name, arch, roles, family))
    return tuple(out)


def enables_of(data: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """For each operator of an accepted step, the operators it enables (module docstring, ENABLES).

    Needs the kernels' sources in ``data["kernels"]``; operators the registry does not know are
    skipped (nothing can be detected for them).
    """
    sources = {k["sha"]: k["source"] for k in data.get("kernels") or ()}
    accepted = sorted((s for s in data["steps"] if s["accepted"]), key=lambda s: s["index"])
    out: dict[str, set[str]] = {}
    for j, step_a in enumerate(accepted):
        a = step_a["operator"]
        before, after = sources.get(step_a["from"]), sources.get(step_a["to"])
        if before is None or after is None:
            continue
        for step_b in accepted[:j]:
            b = step_b["operator"]
            if b == a or b in out.get(a, ()):
                continue
            try:
                op_b = get_operator(b)
            except KeyError:
                continue
            if op_b.applicable(before) and not op_b.applicable(after):
                out.setdefault(a, set()).add(b)
    return {a: tuple(sorted(bs)) for a, bs in out.items()}


def _has_configs(params: Mapping[str, Any] | None) -> bool:
    kernels = (params or {}).get("kernels") or {}
    return bool((params or {}).get("configs")) or any((k or {}).get("configs") for k in kernels.values())


def _naive_kind(data: Mapping[str, Any], forward: Sequence[Mapping[str, Any]]) -> list[str]:
    """The kernel-kind features true of the lineage's naive end (the last accepted step's simplified kernel);
    [] when the document does not carry that kernel's source."""
    sources = {k["sha"]: k["source"] for k in data.get("kernels") or ()}
    naive = sources.get(forward[0]["to"]) if forward else None
    if naive is None:
        return []
    features = kernel_features(naive)
    return [name for name in KERNEL_KIND if features.get(name)]


def together_of(data: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """For each operator of an accepted step, the moves of several operators this lineage measured paying
    together (``records.Together``, JSON form without the workload), from its steps' timings:

    * the launch configuration: when an accepted autotune step carries a config list, it and every other accepted
      launch-configuration step (tiles, warps, stages, register cap) are one move, listed under each of them —
      the walk measured each only with the others in place, and one value alone is not what paid;
    * a paying pair: a step that lost alone beyond the noise and the expert's next step
      (``records.pays_only_with_next``), listed under the first.
    """
    forward = sorted((s for s in data["steps"] if s["accepted"]), key=lambda s: -int(s["index"]))
    gains = {int(s["index"]): geomean_gain(step_speedups(s))[0] for s in forward}
    kind = _naive_kind(data, forward)
    out: dict[str, list[dict[str, Any]]] = {}
    config = [s for s in forward if s["operator"] in LAUNCH_CONFIGURATION]
    autotune = next((s for s in config if s["operator"] == "autotune" and _has_configs(s.get("params"))), None)
    in_set: set[int] = set()
    if autotune is not None and len(config) >= 2 and all(gains[int(s["index"])] for s in config):
        ordered = [autotune, *(s for s in config if s is not autotune)]
        in_set = {int(s["index"]) for s in ordered}
        entry = {"steps": [int(s["index"]) for s in ordered], "operators": [s["operator"] for s in ordered],
                 "gain": round(math.prod(gains[int(s["index"])] or 1.0 for s in ordered), 4),
                 "kind": LAUNCH_CONFIGURATION_SET, "kernel_kind": kind}
        for s in ordered:
            out.setdefault(s["operator"], []).append(entry)
    for first, second in itertools.pairwise(forward):
        a, b = int(first["index"]), int(second["index"])
        g1, g2 = gains[a], gains[b]
        if b != a - 1 or {a, b} <= in_set or not g1 or not g2 or not pays_only_with_next(g1, g2):
            continue
        out.setdefault(first["operator"], []).append(
            {"steps": [a, b], "operators": [first["operator"], second["operator"]], "gain": round(g1 * g2, 4),
             "kind": PAYING_PAIR, "kernel_kind": kind})
    return out


def skill_instances(data: Mapping[str, Any], lineage_id: str | None = None) -> list[SkillInstance]:
    """The evidence of one lineage document (its JSON ``data``) about every operator it tried,
    accepted or rejected, in order of first step. ``lineage_id`` defaults to the document's id."""
    lid = lineage_id or _lineage_id(data)
    workload = str(data["workload"]["name"])
    arch = str((data.get("gpu") or {}).get("arch") or "")
    sample = bool(data.get("sample", False))
    roles, family = _case_context(data)
    enables = enables_of(data) if data.get("kernels") else {}
    by_op: dict[str, dict[str, Any]] = {}
    for step in sorted(data["steps"], key=lambda s: s["index"]):
        if step.get("skipped"):
            continue  # not judged (an interpreter limitation): neither an effect nor a rejection
        slot = by_op.setdefault(step["operator"], {"steps": [], "params": None, "effects": [], "rejections": [],
                                                   "outcomes": []})
        effects = _effects(step, workload, lid, arch, roles, family)
        if step["accepted"]:
            slot["steps"].append(int(step["index"]))
            if slot["params"] is None:
                slot["params"] = dict(step.get("params") or {})
            slot["effects"].extend(effects)
            slot["outcomes"].extend(GateOutcome(workload, lid, e.step, e.shape, e.dtype, True, "", arch, roles,
                                                family) for e in effects)
        else:
            slot["rejections"].append(Rejection(workload, lid, int(step["index"]), str(step.get("gate") or ""),
                                                str(step.get("reason") or ""), effects))
            slot["outcomes"].extend(_outcomes(step, workload, lid, arch, roles, family))
    return [SkillInstance(op, workload, lid, arch, tuple(s["steps"]), s["params"], tuple(s["effects"]),
                          tuple(s["rejections"]), tuple(s["outcomes"]), enables.get(op, ()), sample)
            for op, s in by_op.items()]


# ------------------------------------------------------------------------------------ merging


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 1] + "…"


def _regression_risk(operator: str, effects: Sequence[ShapeEffect]) -> Risk | None:
    slow = [e for e in effects if e.regressed]
    if not slow:
        return None
    first = slow[0]
    parts = [f"{shape_label(e.shape, e.dtype)} by {100.0 * (e.from_ms / e.to_ms - 1.0):.1f}% "
             f"({e.from_ms:g} ms with it, {e.to_ms:g} ms without)" for e in slow[:4]]
    more = f" and {len(slow) - 4} more" if len(slow) > 4 else ""
    return Risk("regression", f"regression: {operator} slowed {first.workload} {'; '.join(parts)}{more}",
                f"{first.workload} lineage {first.lineage_id[:16]} step {first.step}")


def _rejection_risk(operator: str, rej: Rejection) -> Risk | None:
    if rej.gate not in _RISK_GATES:
        return None
    reason = _short(rej.reason) or "no reason recorded"
    if rej.gate == "correctness" or (rej.gate == "performance" and "wrong" in rej.reason.lower()):
        kind = "wrong-results"
        text = (f"wrong results without it: removing {operator} from the {rej.workload} kernel failed the "
                f"{rej.gate} gate ({reason})")
    elif rej.gate == "compile":
        kind = "out-of-resources" if _RESOURCES.search(rej.reason) else "compile-failure"
        text = f"without it the {rej.workload} kernel failed the compile gate ({reason})"
    elif rej.gate == "integrity":
        kind = "integrity"
        text = f"without it the {rej.workload} kernel failed the integrity gate ({reason})"
    else:
        kind = "runtime-failure"
        text = f"without it the {rej.workload} kernel failed to run under timing ({reason})"
    return Risk(kind, text, f"{rej.workload} lineage {rej.lineage_id[:16]} step {rej.step}")


def _risks(operator: str, instances: Sequence[SkillInstance]) -> tuple[Risk, ...]:
    risks: dict[str, Risk] = {}
    for inst in instances:
        by_step: dict[int, list[ShapeEffect]] = {}
        for e in inst.effects:
            by_step.setdefault(e.step, []).append(e)
        for rej in inst.rejections:
            by_step.setdefault(rej.step, []).extend(rej.timings)
            risk = _rejection_risk(operator, rej)
            if risk is not None:
                risks.setdefault(risk.id, risk)
        for _, effects in sorted(by_step.items()):
            risk = _regression_risk(operator, effects)
            if risk is not None:
                risks.setdefault(risk.id, risk)
    return tuple(risks.values())


def _shape_key(shape: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={shape[k]}" for k in sorted(shape))


def _profitable(effects: Sequence[ShapeEffect]) -> InducedCondition | None:
    """``induce_profitable`` over the effects, grouped by workload (>= 2 workloads) or by shape."""
    by_workload = len({e.workload for e in effects}) >= 2
    points = [LabelledPoint(e.features(), e.paid, e.workload if by_workload else f"{e.workload}:{_shape_key(e.shape)}")
              for e in effects]
    scheme = "leave-one-workload-out" if by_workload else "leave-one-shape-out"
    return induce_profitable(points, positive=f"paid (speedup >= {1 + PROFIT_MARGIN:g}x)", validation=scheme)


def _valid(instances: Sequence[SkillInstance]) -> InducedCondition | None:
    outcomes = [o for inst in instances for o in inst.outcomes if o.passed or o.gate in _VALID_GATES]
    if not any(o.passed for o in outcomes) or all(o.passed for o in outcomes):
        return None
    points = [LabelledPoint(o.features(), o.passed) for o in outcomes]
    induced = induce_condition(points, positive="both versions passed the gates")
    if induced is None:
        return None
    failed = [o for o in outcomes if not o.passed]
    where = "; ".join(f"{o.workload} {shape_label(o.shape, o.dtype)} ({o.gate})" for o in failed[:4])
    more = f" and {len(failed) - 4} more" if len(failed) > 4 else ""
    return InducedCondition(induced.expr, induced.accuracy, induced.support, induced.positives, induced.depth,
                            induced.clauses, f"{induced.description}; failed at {where}{more}")


def merge_skills(instance_lists: Sequence[Sequence[SkillInstance]]) -> list[MergedSkill]:
    """One MergedSkill per operator from the instances of several lineages (``skill_instances`` of
    each), in order of first appearance. Conditions are induced from all of the operators' points
    together; risks are the union (one per distinct kind and description); enables and architectures
    the union. Operators that were only ever rejected are included (``accepted`` False) so that their
    rejections can inform a skill learned elsewhere; they are not skills by themselves."""
    grouped: dict[str, list[SkillInstance]] = {}
    for instances in instance_lists:
        for inst in instances:
            grouped.setdefault(inst.operator, []).append(inst)
    out = []
    for operator, instances in grouped.items():
        effects = [e for inst in instances for e in inst.effects]
        out.append(MergedSkill(
            operator=operator, instances=tuple(instances),
            profitable=_profitable(effects) if effects else None, valid=_valid(instances),
            risks=_risks(operator, instances),
            enables=tuple(sorted({b for inst in instances for b in inst.enables})),
            architectures=tuple(sorted({inst.arch for inst in instances if inst.steps and inst.arch})),
        ))
    return out


# ------------------------------------------------------------------------------------ JSON


def _text_of(operator: str, fallback: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        op = get_operator(operator)
    except KeyError as exc:
        if fallback is None:
            raise ExtractError(f"operator {operator!r} is not in the registry and no skill text was given "
                               f"for it ({exc.args[0]})") from exc
        return {"name": fallback["name"], "intent": fallback["intent"], "anchor": dict(fallback["anchor"]),
                "carrier": fallback["carrier"], "default_params": {}}
    return {"name": op.name, "intent": op.intent,
            "anchor": {"predicate": op.anchor_predicate, "description": op.anchor_description},
            "carrier": op.carrier, "default_params": dict(op.default_params)}


def skill_json(merged: MergedSkill, steps: Sequence[int], params: Mapping[str, Any] | None = None,
               fallback: Mapping[str, Any] | None = None,
               together: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One entry of a lineage document's ``skills`` (the form ``lineage.schema.json`` requires).

    ``steps``: this document's accepted step indexes of the operator; ``params``: the transform's
    parameters (default: those of the first accepted step in ``merged``, else the operator's
    defaults). Name, intent, anchor and carrier come from the operator class (registry); for an
    operator the registry lacks, from ``fallback`` (an existing skill entry), else ExtractError.
    ``together``: this document's moves of several operators the skill belongs to (``together_of``).
    """
    text = _text_of(merged.operator, fallback)
    if params is None:
        params = next((inst.params for inst in merged.instances if inst.params is not None),
                      text["default_params"])
    entry: dict[str, Any] = {
        "operator": merged.operator, "name": text["name"], "intent": text["intent"], "anchor": text["anchor"],
        "carrier": text["carrier"], "transform": {"operator": merged.operator, "params": dict(params or {})},
        "valid_when": [merged.valid.to_json("gate-failure")] if merged.valid is not None else [],
        "profitable_when": [merged.profitable_rule.to_json("induced")] if merged.profitable_rule is not None else [],
        "risks": [{"kind": r.kind, "description": r.description, "evidence": r.evidence} for r in merged.risks],
        "steps": sorted(int(i) for i in steps),
        "enables": list(merged.enables),
    }
    if merged.architectures:
        entry["architectures"] = list(merged.architectures)
    if merged.profitability:
        entry["profitability"] = merged.profitability
    if together:
        entry["together"] = [dict(t) for t in together]
    return entry


def extract_skills(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``skills`` list of one lineage document's JSON ``data``: one entry per operator with at
    least one accepted step, from this document's evidence alone (``merge_skills`` over its
    ``skill_instances``). The walker assigns it: ``data["skills"] = extract_skills(data)``.
    Existing entries are used only as text fallback for operators the registry does not know."""
    existing = {sk["operator"]: sk for sk in data.get("skills") or ()}
    together = together_of(data)
    out = []
    for merged in merge_skills([skill_instances(data)]):
        if merged.accepted:
            steps = [i for inst in merged.instances for i in inst.steps]
            out.append(skill_json(merged, steps, fallback=existing.get(merged.operator),
                                  together=together.get(merged.operator, ())))
    return out

