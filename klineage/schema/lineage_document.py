"""The lineage document: what the backward walker writes and ``ingest`` reads (format version 1).

``parse_lineage_document`` checks a JSON value against ``lineage.schema.json`` and the rules a
schema cannot say (kernel hashes match their source, steps point at known kernels, skills cite
accepted steps). ``lineage_to_batch`` turns a parsed document into graph records, purely.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from klineage.schema.errors import LineageDocumentError
from klineage.schema.evolution import evolution_relationships, kernel_names
from klineage.schema.gate_result import GateResult
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.ids import content_id, kernel_sha
from klineage.schema.lineage_records import (
    Architecture,
    GateRun,
    Kernel,
    Lineage,
    Step,
    Workload,
    step_speedups,
)
from klineage.schema.records import (
    Anchor,
    Condition,
    Effect,
    Risk,
    Skill,
    Together,
    architecture_id,
    kernel_id,
    skill_id,
    workload_id,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "SAMPLE_LABEL", "LineageDocument", "document_measured", "lineage_json_schema",
           "lineage_to_batch", "load_lineage_document", "parse_lineage_document", "skill_records", "step_speedups"]

FORMAT = "klineage.lineage"
FORMAT_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("lineage.schema.json")
SAMPLE_LABEL = "sample data, not measured"


@cache
def lineage_json_schema() -> dict[str, Any]:
    """The JSON Schema of the lineage document (``klineage/schema/lineage.schema.json``)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class LineageDocument:
    """A checked lineage document; ``data`` is the original JSON value."""

    data: Mapping[str, Any]
    source: str = ""

    @property
    def id(self) -> str:
        """Deterministic lineage id: workload, GPU, starting kernel and versions."""
        d = self.data
        return content_id("Lineage", d["workload"]["name"], d["gpu"]["name"], d["start"], d["versions"])

    @property
    def workload(self) -> str:
        """The workload's name."""
        return self.data["workload"]["name"]

    @property
    def sample(self) -> bool:
        """True for test fixtures (sample data, not measured)."""
        return bool(self.data["sample"])

    @property
    def measured(self) -> bool:
        """False when nothing was timed (a CPU walk): its steps are never evidence of an effect. A document
        without the ``measured`` key is measured when any of its steps has timings."""
        return document_measured(self.data)

    def step_id(self, index: int) -> str:
        """Deterministic id of step ``index`` of this lineage."""
        step = next(s for s in self.data["steps"] if s["index"] == index)
        return content_id("Step", self.id, index, step["operator"], step["from"], step["to"])


def document_measured(data: Mapping[str, Any]) -> bool:
    """``data["measured"]`` when present, else whether any step of the document has timings."""
    flag = data.get("measured")
    if flag is not None:
        return bool(flag)
    return any(step.get("timings") for step in data.get("steps", ()))


def _json_path(path: Any) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return ("$" + "".join(parts)) if parts else "$"


def parse_lineage_document(data: Any, source: str = "") -> LineageDocument:
    """Check ``data`` (parsed JSON) and return the document; raise LineageDocumentError naming the key."""
    import jsonschema  # imported here: the GPU image runs the validator without it

    if not isinstance(data, dict):
        raise LineageDocumentError(source, "$", "a JSON object", type(data).__name__)
    if data.get("format") != FORMAT:
        raise LineageDocumentError(source, "$.format", f"{FORMAT!r}", data.get("format"))
    if data.get("version") != FORMAT_VERSION:
        raise LineageDocumentError(source, "$.version", f"format version {FORMAT_VERSION}", data.get("version"))
    validator = jsonschema.Draft202012Validator(lineage_json_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        raise LineageDocumentError(source, _json_path(err.absolute_path), err.message)
    kernels = {}
    for i, k in enumerate(data["kernels"]):
        if kernel_sha(k["source"]) != k["sha"]:
            raise LineageDocumentError(source, f"$.kernels[{i}].sha", "the SHA-256 of the kernel's source")
        kernels[k["sha"]] = k
    if data["start"] not in kernels:
        raise LineageDocumentError(source, "$.start", "the sha of a kernel listed in $.kernels")
    seen: set[int] = set()
    accepted: set[int] = set()
    for i, step in enumerate(data["steps"]):
        if step["index"] in seen:
            raise LineageDocumentError(source, f"$.steps[{i}].index", "a unique step index", step["index"])
        seen.add(step["index"])
        for end in ("from", "to"):
            if step[end] is not None and step[end] not in kernels:
                raise LineageDocumentError(source, f"$.steps[{i}].{end}", "the sha of a kernel in $.kernels")
        if step["accepted"]:
            if step["to"] is None:
                raise LineageDocumentError(source, f"$.steps[{i}].to", "a kernel sha for an accepted step")
            accepted.add(step["index"])
        elif not step.get("gate"):
            raise LineageDocumentError(source, f"$.steps[{i}].gate", "the gate that rejected the step")
    for i, skill in enumerate(data["skills"]):
        for j, index in enumerate(skill["steps"]):
            if index not in accepted:
                raise LineageDocumentError(source, f"$.skills[{i}].steps[{j}]", "the index of an accepted step",
                                           index)
    return LineageDocument(data, source)


def load_lineage_document(path: str | Path) -> LineageDocument:
    """Read and check a lineage document file; raise LineageDocumentError on any problem."""
    path = Path(path)
    if not path.is_file():
        raise LineageDocumentError(str(path), "$", "a lineage document file (not found)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise LineageDocumentError(str(path), "$", "UTF-8 JSON text") from exc
    except json.JSONDecodeError as exc:
        raise LineageDocumentError(str(path), f"$ (line {exc.lineno}, column {exc.colno})",
                                   f"valid JSON ({exc.msg})") from exc
    return parse_lineage_document(data, str(path))


def skill_records(doc: LineageDocument) -> list[tuple[Skill, list[Condition], list[Risk], list[int]]]:
    """The skills of one document with their conditions, risks and evidence step indexes.

    Effect and support count this document's evidence only (none when the document is not measured:
    gated steps without timings are no evidence of an effect); a store that already holds the skill
    from other lineages merges them (``kb.service``).
    """
    measured = doc.measured
    steps = {s["index"]: s for s in doc.data["steps"]}
    arch = doc.data["gpu"]["arch"]
    out = []
    for sk in doc.data["skills"]:
        speedups = [x["speedup"] for i in sk["steps"] for x in step_speedups(steps[i])]
        skill = Skill(
            operator=sk["operator"], name=sk["name"], intent=sk["intent"],
            anchor=Anchor(sk["anchor"]["predicate"], sk["anchor"]["description"]), carrier=sk["carrier"],
            transform={"operator": sk["transform"]["operator"], "params": dict(sk["transform"].get("params") or {})},
            effect=Effect.of(speedups), support_steps=len(sk["steps"]) if measured else 0,
            support_lineages=1 if measured else 0,
            architectures=tuple(sk.get("architectures") or (arch,)), sample=doc.sample,
            workloads=(doc.data["workload"]["name"],), families=(doc.data["workload"]["family"],),
            profitability=str(sk.get("profitability") or ""),
            together=tuple(Together.from_dict(t, doc.data["workload"]["name"]) for t in sk.get("together") or ()),
        )
        conditions = [
            Condition(c["expr"], kind, c.get("source", "declared"), c.get("description", ""),
                      c.get("accuracy"), int(c.get("support") or 0), c.get("oos_accuracy"), c.get("majority"))
            for kind, key in (("valid", "valid_when"), ("profitable", "profitable_when"))
            for c in sk.get(key, ())
        ]
        risks = [Risk(r["kind"], r["description"], r.get("evidence", "")) for r in sk.get("risks", ())]
        out.append((skill, conditions, risks, list(sk["steps"])))
    return out


def lineage_to_batch(doc: LineageDocument) -> GraphBatch:
    """All graph records of one lineage document (skills without embeddings), as one batch."""
    d = doc.data
    lid = doc.id
    arch = d["gpu"]["arch"]
    workload = d["workload"]
    nodes: list[Node] = [
        Workload.named(workload["name"], workload["family"], workload.get("description", ""),
                       workload.get("roles") or None).to_node(),
        Architecture.of(arch, d["gpu"]["name"], d["gpu"].get("sm_count")).to_node(),
        Lineage(lid, workload["name"], d["gpu"]["name"], arch, dict(d["versions"]), d["created"], d.get("policy", ""),
                doc.sample, doc.measured, d["start"], len(d["steps"]),
                sum(1 for s in d["steps"] if s["accepted"])).to_node(),
    ]
    rels: list[Relationship] = [
        Relationship("OF", lid, workload_id(workload["name"])),
        Relationship("STARTS_AT", lid, kernel_id(d["start"])),
    ]
    names = kernel_names(d)
    for k in d["kernels"]:
        nodes.append(Kernel.of(k["sha"], k["source"], k.get("features"), k.get("summary", ""), doc.sample,
                               names.get(k["sha"], "")).to_node())
    rels.extend(evolution_relationships(d, lid))
    for step in d["steps"]:
        sid = doc.step_id(step["index"])
        nodes.append(Step(sid, lid, step["index"], step["operator"], dict(step.get("params") or {}),
                          step.get("diff", ""), step["accepted"], step.get("gate"), step.get("reason", ""),
                          tuple(dict(t) for t in step.get("timings", ())), doc.sample, doc.measured,
                          bool(step.get("skipped", False))).to_node())
        rels.append(Relationship("HAS_STEP", lid, sid, {"index": step["index"]}))
        rels.append(Relationship("FROM", sid, kernel_id(step["from"])))
        if step["to"] is not None:
            rels.append(Relationship("TO", sid, kernel_id(step["to"])))
        for run in step.get("gate_runs", ()):
            gate_run = GateRun.of(GateResult.from_dict(run), doc.sample)
            nodes.append(gate_run.to_node())
            if any(k["sha"] == gate_run.kernel_sha for k in d["kernels"]):
                rels.append(Relationship("VALIDATED_BY", kernel_id(gate_run.kernel_sha), gate_run.id))
            rels.append(Relationship("ON", gate_run.id, architecture_id(arch)))
    for skill, conditions, risks, step_indexes in skill_records(doc):
        nodes.append(skill.to_node())
        for index in step_indexes:
            rels.append(Relationship("REVERSES_INTO", doc.step_id(index), skill.id))
        for cond in conditions:
            nodes.append(cond.to_node())
            rel = "VALID_WHEN" if cond.kind == "valid" else "PROFITABLE_WHEN"
            rels.append(Relationship(rel, skill.id, cond.id))
        for risk in risks:
            nodes.append(risk.to_node())
            rels.append(Relationship("RISKS", skill.id, risk.id))
    operators = {sk["operator"] for sk in d["skills"]}
    for sk in d["skills"]:
        for enabled in sk.get("enables", ()):
            if enabled not in operators:
                continue  # an edge needs both skills; one learned elsewhere is linked when it arrives
            rels.append(Relationship("ENABLES", skill_id(sk["operator"]), skill_id(enabled)))
    return GraphBatch.of(nodes, rels)
