"""The MCP tools as plain functions over one ``KnowledgeBase`` (no MCP SDK here).

Each tool checks its input (``ToolInputError`` says which argument and what was expected), calls the
same ``KnowledgeBase`` service function GraphQL calls, and returns a compact JSON view (``views``).
``plan_optimization`` runs the agent's ``LineagePlanner`` without validating anything;
``validate_kernel`` goes through the validator service (``HttpValidator``).

Workloads are named, never sent: ``workload`` is a folder name (``rmsnorm``, ``gemm``) under one of
the workload roots (``KLINEAGE_WORKLOADS``, ``os.pathsep``-separated; default ``./workloads`` and
``./heldout``, then the same folders of the repository checkout) — the same names the validator
service resolves.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klineage.kb.service import KnowledgeBase, record_application
from klineage.mcp.limits import (
    MAX_CONTEXT_KEYS,
    MAX_EVIDENCE,
    MAX_LIMIT,
    MAX_MOVES,
    MAX_SOURCE_CHARS,
    MAX_TEXT_CHARS,
)
from klineage.mcp.views import (
    application_view,
    clip,
    condition_view,
    evidence_list,
    hit_view,
    lineage_view,
    risk_view,
    skill_view,
    usage_line,
)
from klineage.schema.errors import KLineageError
from klineage.schema.gate_result import GATES, GateResult
from klineage.schema.lineage_records import LineageDetail
from klineage.schema.records import skill_id as skill_id_of

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADS_ENV = "KLINEAGE_WORKLOADS"
VALIDATOR_URL_ENV = "KLINEAGE_VALIDATOR_URL"
_WORKLOAD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_ID = re.compile(r"[A-Za-z0-9_:.-]{1,128}")

#: ``(kb, skill_id, kernel_source, outcome, speedup, gate_result, context) -> Application``: how an
#: application is recorded (default ``kb.service.record_application``; ``klineage.ingest.feedback`` re-induces).
Recorder = Callable[..., Any]


class ToolInputError(KLineageError, ValueError):
    """A tool call the server refuses as asked (bad argument, unknown id, nothing configured); says why."""


def default_workload_roots() -> list[Path]:
    """``$KLINEAGE_WORKLOADS`` roots, else ./workloads and ./heldout, then the repository's own."""
    env = os.environ.get(WORKLOADS_ENV)
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path("workloads"), Path("heldout"), REPO_ROOT / "workloads", REPO_ROOT / "heldout"]


def _source(value: Any, name: str = "kernel_source") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolInputError(f"{name}: expected the kernel's Python source, got {type(value).__name__}"
                             + (" (empty)" if isinstance(value, str) else ""))
    if len(value) > MAX_SOURCE_CHARS:
        raise ToolInputError(f"{name}: {len(value)} characters, over the limit of {MAX_SOURCE_CHARS}")
    return value


def _text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolInputError(f"{name}: expected a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise ToolInputError(f"{name}: {len(value)} characters, over the limit of {MAX_TEXT_CHARS}")
    return value


def _identifier(value: Any, name: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ToolInputError(f"{name}: expected an id such as 'skill:7c96e7e93d11cfbc', got {clip(repr(value), 80)}")
    return value


def _context(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ToolInputError("context: expected a JSON object of feature name to value, e.g. "
                             f"{{\"M\": 4096, \"dtype\": \"bf16\"}}; got {type(value).__name__}")
    if len(value) > MAX_CONTEXT_KEYS:
        raise ToolInputError(f"context: {len(value)} features, over the limit of {MAX_CONTEXT_KEYS}")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > 64:
            raise ToolInputError(f"context: feature names are short strings, got {clip(repr(key), 80)}")
        if not (item is None or isinstance(item, (bool, int, float, str))) or (
                isinstance(item, str) and len(item) > 64):
            raise ToolInputError(f"context[{key!r}]: expected a number, a boolean or a short string, "
                                 f"got {clip(repr(item), 80)}")
    return dict(value)


def _limit(value: Any, name: str = "limit", top: int = MAX_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise ToolInputError(f"{name}: expected 1..{top}, got {clip(repr(value), 40)}")
    return value


def kernel_search_kwargs(source: str) -> dict[str, Any]:
    """``KnowledgeBase.search`` keyword arguments for a kernel (features, summary, operator anchors) exactly
    as GraphQL computes them; ToolInputError when the source does not parse."""
    from klineage.transforms.facts import kernel_facts

    try:
        return kernel_facts(source).search_kwargs()
    except SyntaxError as exc:
        raise ToolInputError(f"kernel_source: expected Python source that parses ({exc.msg}, line {exc.lineno})") \
            from exc


@dataclass
class KLineageTools:
    """The tools over ``kb``. ``validator_url`` (default ``$KLINEAGE_VALIDATOR_URL``) is the validator
    service ``validate_kernel`` uses; ``recorder`` records applications (see ``Recorder``)."""

    kb: KnowledgeBase
    validator_url: str | None = None
    workload_roots: list[Path] = field(default_factory=default_workload_roots)
    recorder: Recorder = record_application
    validator_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.validator_url is None:
            self.validator_url = os.environ.get(VALIDATOR_URL_ENV) or None

    # --------------------------------------------------------------------------------- reads

    def search_skills(self, text: str | None = None, context: Mapping[str, Any] | None = None,
                      kernel_source: str | None = None, limit: int = 10) -> dict[str, Any]:
        """Skills ranked for a text, a problem context and/or a kernel's source; each hit with its
        applicability, explanation and evidence (the service function GraphQL's ``searchSkills`` calls)."""
        limit = _limit(limit)
        ctx = _context(context)
        text = _text(text, "text")
        kernel = kernel_search_kwargs(_source(kernel_source)) if kernel_source is not None else {}
        try:
            hits = self.kb.search(text=text, context=ctx, limit=limit, **kernel)
        except ValueError as exc:
            raise ToolInputError(str(exc)) from exc
        return {"hits": [hit_view(h) for h in hits]}

    def _skill(self, skill_id: Any) -> Any:
        sid = _identifier(skill_id, "skill_id")
        found = self.kb.skill(sid)
        if found is None:
            raise ToolInputError(f"unknown skill {sid!r}: no skill has this id (search_skills lists ids)")
        return found

    def get_skill(self, skill_id: str) -> dict[str, Any]:
        """One skill with its conditions, risks, evidence, enabled skills and usage by agents."""
        s = self._skill(skill_id)
        ids = [s.id]
        valid, profitable = self.kb.conditions(ids, "valid")[s.id], self.kb.conditions(ids, "profitable")[s.id]
        return {"skill": {**skill_view(s), "usage": usage_line(s),
                          "validWhen": [condition_view(c) for c in valid],
                          "profitableWhen": [condition_view(c) for c in profitable],
                          "risks": [risk_view(r) for r in self.kb.risks(ids)[s.id][:MAX_EVIDENCE]],
                          **evidence_list(self.kb.evidence(ids)[s.id]),
                          "enables": [e.id for e in self.kb.enables(ids)[s.id]],
                          "card": f"klineage://skills/{s.id}"}}

    def get_lineage(self, lineage_id: str | None = None, workload: str | None = None) -> dict[str, Any]:
        """One lineage with its steps (operator, params, verdict, diff, skill), or, without an id, the
        lineages (of ``workload`` when given) as summaries."""
        if lineage_id is None:
            name = _text(workload, "workload")
            return {"lineages": [lineage_view(v, steps=False) for v in self.kb.lineages(name or None)]}
        lid = _identifier(lineage_id, "lineage_id")
        view = self.kb.lineage(lid)
        if view is None:
            known = ", ".join(v.lineage.id for v in self.kb.lineages()[:20])
            raise ToolInputError(f"unknown lineage {lid!r}; known: {known or 'none'}")
        return {"lineage": lineage_view(view, self.step_skills(view))}

    def step_skills(self, view: LineageDetail) -> dict[str, str]:
        """Step id -> the id of the skill it reverses into (accepted steps)."""
        found = self.kb.step_skills([s.id for s in view.steps])
        return {sid: skills[0].id for sid, skills in found.items() if skills}

    # --------------------------------------------------------------------------------- planning

    def workload_dir(self, workload: Any) -> Path:
        """The folder of workload ``workload`` under the roots; ToolInputError naming the known ones."""
        if not isinstance(workload, str) or not _WORKLOAD_NAME.fullmatch(workload) or ".." in workload:
            raise ToolInputError(f"workload: expected a workload folder name such as 'rmsnorm', "
                                 f"got {clip(repr(workload), 80)}")
        for root in self.workload_roots:
            folder = root / workload
            if (folder / "manifest.toml").is_file():
                return folder
        known = sorted({p.name for r in self.workload_roots if r.is_dir() for p in r.iterdir()
                        if (p / "manifest.toml").is_file()})
        raise ToolInputError(f"unknown workload {workload!r}; known: {', '.join(known[:60]) or 'none'}")

    def problem(self, kernel_source: Any, workload: Any) -> Any:
        """The agent's ``Problem`` for a source on a named workload."""
        from klineage.agent.problem import Problem
        from klineage.schema.errors import FormatError
        from klineage.schema.manifest import load_manifest

        source = _source(kernel_source)
        folder = self.workload_dir(workload)
        try:
            compile(source, "<kernel_source>", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise ToolInputError(f"kernel_source: expected Python source that parses ({exc.msg}, "
                                 f"line {exc.lineno})") from exc
        try:
            manifest = load_manifest(folder)
        except FormatError as exc:
            raise ToolInputError(str(exc)) from exc
        return Problem(source, manifest)

    def plan_optimization(self, kernel_source: str, workload: str, arch: int | None = None,
                          limit: int = 10) -> dict[str, Any]:
        """The agent's lineage plan for a kernel, without running it: each move's label, steps (operator +
        params), origin, expected gain and why, best first."""
        from klineage.agent.planners import LineagePlanner
        from klineage.agent.state import AgentState

        limit = _limit(limit, top=MAX_MOVES)
        if arch is not None and (isinstance(arch, bool) or not isinstance(arch, int) or not 0 < arch < 1000):
            raise ToolInputError(f"arch: expected a compute capability such as 90, got {clip(repr(arch), 40)}")
        problem = self.problem(kernel_source, workload)
        planner = LineagePlanner(self.kb)
        try:
            moves = planner.plan(AgentState(problem, problem.source, arch=arch))
        except ValueError as exc:
            raise ToolInputError(str(exc)) from exc
        skilled = planner.skilled_operators()
        return {"workload": problem.name, "family": problem.family, "context": problem.search_context(arch),
                "moves": [_move_view(m, skilled) for m in moves[:limit]], "total": len(moves)}

    # --------------------------------------------------------------------------------- validation

    def validate_kernel(self, kernel_source: str, workload: str, gates: Sequence[str] | None = None,
                        shapes: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Validate a kernel through the validator service: the gate result document (verdict, each gate's
        status, reason and metrics) plus the speedup over the vendor when the performance gate ran."""
        from klineage.validator import HttpValidator, ValidationRequestError, ValidatorUnavailable

        if not self.validator_url:
            raise ToolInputError(f"no validator configured: start one (`klineage validator serve`) and set "
                                 f"${VALIDATOR_URL_ENV} or pass --validator-url to `klineage mcp`")
        source = _source(kernel_source)
        folder = self.workload_dir(workload)
        chosen = tuple(GATES if gates is None else gates)
        if not chosen or any(g not in GATES for g in chosen):
            raise ToolInputError(f"gates: expected a non-empty list of {', '.join(GATES)}, got {clip(repr(gates), 80)}")
        if shapes is not None and (not isinstance(shapes, Sequence) or not all(isinstance(s, Mapping) for s in shapes)
                                   or len(shapes) > 64):
            raise ToolInputError("shapes: expected a list (at most 64) of objects of dim name to integer")
        client = HttpValidator(self.validator_url, timeout_s=self.validator_timeout_s)
        try:
            result = client.validate(source, folder, chosen, shapes)
        except ValidationRequestError as exc:
            raise ToolInputError(f"the validator refused the request: {exc}") from exc
        except ValidatorUnavailable as exc:
            raise ToolInputError(str(exc)) from exc
        except ValueError as exc:
            raise ToolInputError(str(exc)) from exc
        finally:
            client.close()
        return gate_result_view(result)

    # --------------------------------------------------------------------------------- feedback

    def record_application(self, skill_id: str, kernel_source: str, outcome: str, speedup: float | None = None,
                           gate_result: Mapping[str, Any] | None = None,
                           context: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Record an agent's use of a skill on new code. With the gate result that judged the kernel it is a
        verified application (its speedup moves the skill's effect on new code); without one it is
        recorded as unverified. ``context``: the problem features of the measured shape (plan_optimization
        returns them), from which the skill's conditions are re-induced once enough verified ones accrue."""
        sid = _identifier(skill_id, "skill_id")
        ctx = _context(context)
        source = _source(kernel_source)
        gate = parse_gate_result(gate_result) if gate_result is not None else None
        if speedup is not None and (isinstance(speedup, bool) or not isinstance(speedup, (int, float))
                                    or not math.isfinite(speedup)):
            raise ToolInputError(f"speedup: expected a positive finite number or null, got {clip(repr(speedup), 40)}")
        try:
            app = self.recorder(self.kb, sid, source, outcome, speedup, gate, ctx)
        except (KeyError, ValueError) as exc:
            raise ToolInputError(str(exc).strip("'\"")) from exc
        skill = self.kb.skill(sid)
        return {"application": application_view(app),
                "skill": {"id": sid, "usage": usage_line(skill) if skill else "",
                          "fieldEffect": skill.field_effect.to_dict() if skill else None}}


def parse_gate_result(value: Any) -> GateResult:
    """A gate result document (``GateResult.to_dict`` form) as a ``GateResult``; ToolInputError when malformed."""
    if not isinstance(value, Mapping):
        raise ToolInputError("gate_result: expected the gate result object validate_kernel returned")
    doc = value.get("gateResult", value)
    try:
        result = GateResult.from_dict(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ToolInputError(f"gate_result: not a gate result document ({clip(str(exc), 200)}); expected "
                             "{verdict, kernel_sha, gpu, versions, gates: [{gate, status, reason, metrics}]}") from exc
    if not result.gates:
        raise ToolInputError("gate_result: no gates ran; expected the document validate_kernel returned")
    return result


def gate_result_view(result: GateResult) -> dict[str, Any]:
    """The gate result document with the verdict, the first failed gate and the geomean speedup on top."""
    failed = result.failed_gate
    perf = result.gate("performance")
    speedup = None
    if perf is not None and perf.status == "pass" and perf.metrics.get("geomean_speedup") is not None:
        speedup = float(perf.metrics["geomean_speedup"])
    return {"verdict": result.verdict, "failedGate": failed.gate if failed else None,
            "reason": clip(failed.reason if failed else (perf.reason if perf else "")),
            "speedup": speedup, "gateResult": result.to_dict()}


def _move_view(move: Any, skilled: frozenset[str]) -> dict[str, Any]:
    """A planned move for MCP clients; each step names the skill to record its use against (``skillId``), or
    null for an operator the knowledge base holds no skill of (the plan also offers those)."""
    steps = [{**s.to_dict(), "skillId": skill_id_of(s.operator) if s.operator in skilled else None} for s in move.steps]
    return {"label": move.label, "steps": steps, "origin": move.origin, "expectedGain": move.expected_gain,
            "why": clip(move.why)}
