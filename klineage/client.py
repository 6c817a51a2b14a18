"""A Python client of the KLineage GraphQL API, for agents and scripts that do not speak MCP.

``KLineageClient`` (sync) and ``AsyncKLineageClient`` (async) send GraphQL documents over httpx to a
``klineage serve`` endpoint and return frozen dataclasses; the server does all the work (search,
kernel facts, recording), so there is one implementation of each idea. Every failure -- a GraphQL
error, an HTTP error status, an unreachable server, a malformed answer -- raises ``KLineageError``
with the server's message.

    with KLineageClient("http://127.0.0.1:8000") as kl:
        for hit in kl.search_skills("faster softmax", context={"rows": 16384, "dtype": "bf16"}, limit=3):
            print(hit.skill.name, hit.score, hit.applicable, hit.passed)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from klineage.schema.errors import KLineageError
from klineage.schema.gate_result import GateResult
from klineage.schema.records import Anchor, Condition, Effect, Evidence, Risk, Together

DEFAULT_TIMEOUT_S = 60.0

_SKILL_FIELDS = """id name intent operator anchor { predicate description } carrier transform
  effect { min median max n } support supportLineages architectures workloads families sample profitability
  applied verified paid fieldEffect { min median max n } usage admitted admission
  together { workload steps operators gain kind kernelKind }"""
_EVIDENCE_FIELDS = "lineageId stepId workload gpu speedups sample"
_CONDITION_FIELDS = "expr kind source description accuracy support oosAccuracy majority"

SEARCH_QUERY = f"""query($text: String, $context: JSON, $kernelSource: String, $limit: Int!) {{
  searchSkills(text: $text, context: $context, kernelSource: $kernelSource, limit: $limit) {{
    score applicable skill {{ {_SKILL_FIELDS} }} together {{ workload steps operators gain kind kernelKind }}
    explanation {{ passed failed unknown usage why missingFeatures evidence {{ {_EVIDENCE_FIELDS} }} }} }} }}"""
SKILL_QUERY = f"""query($id: ID!) {{ skill(id: $id) {{ {_SKILL_FIELDS}
  validWhen {{ {_CONDITION_FIELDS} }} profitableWhen {{ {_CONDITION_FIELDS} }}
  risks {{ kind description evidence }} evidence {{ {_EVIDENCE_FIELDS} }} }} }}"""
LINEAGES_QUERY = """query($workload: String) { lineages(workload: $workload) {
  id workload gpu arch versions created policy sample startSha
  steps { index operator accepted gate skill { id } } } }"""
RECORD_MUTATION = """mutation($skillId: ID!, $kernelSource: String!, $outcome: String!, $speedup: Float,
                         $gateResult: JSON, $context: JSON) {
  recordApplication(skillId: $skillId, kernelSource: $kernelSource, outcome: $outcome, speedup: $speedup,
                    gateResult: $gateResult, context: $context) {
    id skillId kernelSha outcome speedup recordedAt verified verdict } }"""


class RequestError(KLineageError, RuntimeError):
    """A request failed; the message is the server's (GraphQL errors joined) or says why none came.
    (``except KLineageError`` catches it, as it catches every KLineage error.)"""


@dataclass(frozen=True)
class Skill:
    """A skill as the API serves it (names follow ``klineage.schema.records.Skill``); the conditions,
    risks and evidence are filled by ``get_skill`` and empty in search hits."""

    id: str
    name: str
    intent: str
    operator: str
    anchor: Anchor
    carrier: str
    transform: Mapping[str, Any]
    effect: Effect
    support_steps: int
    support_lineages: int
    architectures: tuple[str, ...]
    workloads: tuple[str, ...]
    families: tuple[str, ...]
    sample: bool
    profitability: str
    applied: int
    verified: int
    paid: int
    field_effect: Effect | None
    usage: str
    admitted: bool
    admission: str
    together: tuple[Together, ...] = ()
    valid_when: tuple[Condition, ...] = ()
    profitable_when: tuple[Condition, ...] = ()
    risks: tuple[Risk, ...] = ()
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class SkillHit:
    """One search result: the skill, its score, APPLICABLE / NOT_APPLICABLE / UNKNOWN, and the
    explanation (conditions that passed, failed or could not be decided, and the evidence)."""

    skill: Skill
    score: float
    applicable: str
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    unknown: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    usage: str
    why: str = ""
    missing_features: tuple[str, ...] = ()
    together: Together | None = None


@dataclass(frozen=True)
class LineageStep:
    """One step of a lineage, in summary: its operator, whether it was accepted, the gate that
    rejected it (if any) and the skill it reverses into (accepted steps)."""

    index: int
    operator: str
    accepted: bool
    gate: str | None
    skill_id: str | None


@dataclass(frozen=True)
class Lineage:
    """A lineage in summary: where and how it was walked, and its steps in order."""

    id: str
    workload: str
    gpu: str
    arch: str
    versions: Mapping[str, Any]
    created: str
    policy: str
    sample: bool
    start_sha: str
    steps: tuple[LineageStep, ...] = field(default=())


@dataclass(frozen=True)
class Application:
    """A recorded application of a skill; ``verified`` when a gate result judged the kernel."""

    id: str
    skill_id: str
    kernel_sha: str
    outcome: str
    speedup: float | None
    recorded_at: str
    verified: bool
    verdict: str | None


# ------------------------------------------------------------------------------------ parsing


def _effect(data: Mapping[str, Any] | None) -> Effect | None:
    return None if data is None else Effect.from_dict(data)


def _evidence(data: Mapping[str, Any]) -> Evidence:
    return Evidence(data["lineageId"], data["stepId"], data["workload"], data["gpu"],
                    tuple(dict(x) for x in data.get("speedups") or ()), bool(data["sample"]))


def _condition(data: Mapping[str, Any]) -> Condition:
    return Condition(data["expr"], data["kind"], data["source"], data["description"], data.get("accuracy"),
                     int(data["support"]), data.get("oosAccuracy"), data.get("majority"))


def _skill(data: Mapping[str, Any]) -> Skill:
    return Skill(
        id=data["id"], name=data["name"], intent=data["intent"], operator=data["operator"],
        anchor=Anchor(data["anchor"]["predicate"], data["anchor"]["description"]), carrier=data["carrier"],
        transform=dict(data["transform"] or {}), effect=Effect.from_dict(data["effect"]),
        support_steps=int(data["support"]), support_lineages=int(data["supportLineages"]),
        architectures=tuple(data["architectures"]), workloads=tuple(data["workloads"]),
        families=tuple(data["families"]), sample=bool(data["sample"]),
        profitability=data["profitability"], applied=int(data["applied"]), verified=int(data["verified"]),
        paid=int(data["paid"]), field_effect=_effect(data.get("fieldEffect")), usage=data["usage"],
        admitted=bool(data["admitted"]), admission=str(data["admission"]),
        together=tuple(_together(t) for t in data.get("together") or ()),
        valid_when=tuple(_condition(c) for c in data.get("validWhen") or ()),
        profitable_when=tuple(_condition(c) for c in data.get("profitableWhen") or ()),
        risks=tuple(Risk(r["kind"], r["description"], r["evidence"]) for r in data.get("risks") or ()),
        evidence=tuple(_evidence(e) for e in data.get("evidence") or ()),
    )


def _hit(data: Mapping[str, Any]) -> SkillHit:
    ex = data["explanation"]
    return SkillHit(skill=_skill(data["skill"]), score=float(data["score"]), applicable=data["applicable"],
                    passed=tuple(ex["passed"]), failed=tuple(ex["failed"]), unknown=tuple(ex["unknown"]),
                    evidence=tuple(_evidence(e) for e in ex["evidence"]), usage=ex["usage"],
                    why=ex.get("why", ""), missing_features=tuple(ex.get("missingFeatures") or ()),
                    together=_together(data["together"]) if data.get("together") else None)


def _together(data: Mapping[str, Any]) -> Together:
    return Together.from_dict({**data, "kernel_kind": data.get("kernelKind") or ()})


def _lineage(data: Mapping[str, Any]) -> Lineage:
    steps = tuple(LineageStep(int(s["index"]), s["operator"], bool(s["accepted"]), s.get("gate"),
                              (s.get("skill") or {}).get("id")) for s in data["steps"])
    return Lineage(id=data["id"], workload=data["workload"], gpu=data["gpu"], arch=data["arch"],
                   versions=dict(data["versions"] or {}), created=data["created"], policy=data["policy"],
                   sample=bool(data["sample"]), start_sha=data["startSha"], steps=steps)


def _application(data: Mapping[str, Any]) -> Application:
    return Application(id=data["id"], skill_id=data["skillId"], kernel_sha=data["kernelSha"],
                       outcome=data["outcome"], speedup=data.get("speedup"), recorded_at=data["recordedAt"],
                       verified=bool(data["verified"]), verdict=data.get("verdict"))


def _search_variables(text: str | None, context: Mapping[str, Any] | None, kernel_source: str | None,
                      limit: int) -> dict[str, Any]:
    return {"text": text, "context": dict(context) if context is not None else None,
            "kernelSource": kernel_source, "limit": limit}


def _record_variables(skill_id: str, kernel_source: str, outcome: str, speedup: float | None,
                      gate_result: GateResult | Mapping[str, Any] | None,
                      context: Mapping[str, Any] | None) -> dict[str, Any]:
    gate = gate_result.to_dict() if isinstance(gate_result, GateResult) else gate_result
    return {"skillId": skill_id, "kernelSource": kernel_source, "outcome": outcome, "speedup": speedup,
            "gateResult": dict(gate) if gate is not None else None,
            "context": dict(context) if isinstance(context, Mapping) else context}  # the server checks it


def _endpoint(base_url: str) -> str:
    """``base_url`` as the GraphQL endpoint: ``http://host:port`` gets ``/graphql`` appended."""
    url = base_url.rstrip("/")
    return url if url.endswith("/graphql") else url + "/graphql"


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _data(response: httpx.Response) -> dict[str, Any]:
    """The ``data`` of a GraphQL response; KLineageError with the server's message otherwise."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("errors"):
        raise RequestError("; ".join(str(e.get("message", e)) for e in body["errors"]))
    if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        raise RequestError(f"{response.request.url}: HTTP {response.status_code}: {response.text[:500]}")
    return body["data"]


def _transport_error(url: str, exc: httpx.HTTPError) -> RequestError:
    return RequestError(f"{url}: {type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------ clients


class KLineageClient:
    """A synchronous client of ``klineage serve``. ``token``: the server's ``$KLINEAGE_API_TOKEN``,
    needed for ``record_application`` only. Use as a context manager, or call ``close``."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = _endpoint(base_url)
        self._http = httpx.Client(timeout=timeout, headers=_headers(token))

    def __enter__(self) -> KLineageClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def execute(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run one GraphQL document and return its ``data``; KLineageError on any failure."""
        try:
            response = self._http.post(self.url, json={"query": query, "variables": dict(variables or {})})
        except httpx.HTTPError as exc:
            raise _transport_error(self.url, exc) from exc
        return _data(response)

    def search_skills(self, text: str | None = None, context: Mapping[str, Any] | None = None,
                      kernel_source: str | None = None, limit: int = 10) -> list[SkillHit]:
        """Skills ranked for a text, a problem context (feature name -> value) and/or a kernel's
        source, each hit explained (``searchSkills``)."""
        data = self.execute(SEARCH_QUERY, _search_variables(text, context, kernel_source, limit))
        return [_hit(h) for h in data["searchSkills"]]

    def get_skill(self, skill_id: str) -> Skill | None:
        """One skill with its conditions, risks and evidence; None when no skill has this id."""
        found = self.execute(SKILL_QUERY, {"id": skill_id})["skill"]
        return None if found is None else _skill(found)

    def lineages(self, workload: str | None = None) -> list[Lineage]:
        """Every lineage (or those of one workload), in summary."""
        return [_lineage(v) for v in self.execute(LINEAGES_QUERY, {"workload": workload})["lineages"]]

    def record_application(self, skill_id: str, kernel_source: str, outcome: str, speedup: float | None = None,
                           gate_result: GateResult | Mapping[str, Any] | None = None,
                           context: Mapping[str, Any] | None = None) -> Application:
        """Record a use of a skill on new code (needs the token); with the gate result that judged
        this very source it is verified and updates the skill's effect on new code. ``context``: the
        problem features of the measured shape; enough verified applications with one re-induce the
        skill's PROFITABLE_WHEN on the server."""
        data = self.execute(RECORD_MUTATION, _record_variables(skill_id, kernel_source, outcome, speedup,
                                                               gate_result, context))
        return _application(data["recordApplication"])


class AsyncKLineageClient:
    """The asynchronous twin of ``KLineageClient`` (same methods, awaited); ``async with`` or ``aclose``."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = _endpoint(base_url)
        self._http = httpx.AsyncClient(timeout=timeout, headers=_headers(token))

    async def __aenter__(self) -> AsyncKLineageClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def execute(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run one GraphQL document and return its ``data``; KLineageError on any failure."""
        try:
            response = await self._http.post(self.url, json={"query": query, "variables": dict(variables or {})})
        except httpx.HTTPError as exc:
            raise _transport_error(self.url, exc) from exc
        return _data(response)

    async def search_skills(self, text: str | None = None, context: Mapping[str, Any] | None = None,
                            kernel_source: str | None = None, limit: int = 10) -> list[SkillHit]:
        """See ``KLineageClient.search_skills``."""
        data = await self.execute(SEARCH_QUERY, _search_variables(text, context, kernel_source, limit))
        return [_hit(h) for h in data["searchSkills"]]

    async def get_skill(self, skill_id: str) -> Skill | None:
        """See ``KLineageClient.get_skill``."""
        found = (await self.execute(SKILL_QUERY, {"id": skill_id}))["skill"]
        return None if found is None else _skill(found)

    async def lineages(self, workload: str | None = None) -> list[Lineage]:
        """See ``KLineageClient.lineages``."""
        return [_lineage(v) for v in (await self.execute(LINEAGES_QUERY, {"workload": workload}))["lineages"]]

    async def record_application(self, skill_id: str, kernel_source: str, outcome: str,
                                 speedup: float | None = None,
                                 gate_result: GateResult | Mapping[str, Any] | None = None,
                                 context: Mapping[str, Any] | None = None) -> Application:
        """See ``KLineageClient.record_application``."""
        data = await self.execute(RECORD_MUTATION, _record_variables(skill_id, kernel_source, outcome, speedup,
                                                                     gate_result, context))
        return _application(data["recordApplication"])
