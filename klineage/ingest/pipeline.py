"""Ingest several lineage documents with skills merged across them: the one place conditions are
re-induced from the evidence of many lineages.

Why here and not in ``kb.service``: re-inducing a condition needs ``ingest.induce`` and
``ingest.extract``, and ``kb`` must not import ``ingest`` (DESIGN.md, dependency rule). So the split is:

* ``kb.service.KnowledgeBase.ingest`` stores one document and merges what needs no induction
  (evidence steps, effect recomputed from all stored timings, support, architectures, the union of
  conditions and risks);
* ``ingest_lineages(kb, documents)`` (here) first gathers every piece of evidence about each
  operator, from the given documents *and* the lineages already in the store (their Step nodes:
  timings, gate and reason), runs ``extract.merge_skills`` over all of it, rewrites each document's
  ``skills`` with the merged conditions and risks, and only then calls ``kb.ingest`` on each. The
  store then holds, for every skill, the conditions induced from all the evidence it has.

A derived condition (source ``induced`` or ``gate-failure``) stored earlier by a plain ``kb.ingest`` or
by a run with less evidence is unlinked from its skill once the re-induced one is stored
(``KnowledgeBase.drop_conditions``; ``IngestSummary.replaced`` lists them), so that search never ANDs
an old rule with the new one. Declared conditions are never touched.

Concurrency and sample data: the whole read-merge-write runs under the store's write lock
(``KnowledgeBase.exclusive``), so two ``klineage ingest`` runs on one data folder serialize instead of
overwriting each other's merged evidence. Sample documents (test fixtures) never merge into measured
skills: a batch in which one would is refused before anything is written, and measured documents induce
their conditions from measured evidence only.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from klineage.ingest.extract import MergedSkill, SkillInstance, merge_skills, skill_instances, skill_json, together_of
from klineage.kb.service import IngestError, IngestReport, KnowledgeBase
from klineage.schema.lineage_document import LineageDocument, parse_lineage_document
from klineage.schema.records import Condition, skill_id

__all__ = ["IngestSummary", "ingest_lineages", "merged_documents", "stored_instances"]

_DERIVED_SOURCES = ("induced", "gate-failure")


@dataclass(frozen=True)
class IngestSummary:
    """What ``ingest_lineages`` did: one IngestReport per document (in order), the merged skills
    (every operator with evidence), and ``replaced``: (skill id, condition) pairs that were linked in
    the store, derived from less evidence, and have been unlinked (see the module docstring)."""

    reports: tuple[IngestReport, ...]
    merged: tuple[MergedSkill, ...]
    replaced: tuple[tuple[str, Condition], ...]


def stored_instances(kb: KnowledgeBase, operators: Sequence[str], exclude_lineages: Sequence[str] = ()
                     ) -> list[list[SkillInstance]]:
    """The evidence the store already holds about ``operators``: one instance list per stored lineage
    (not in ``exclude_lineages``), rebuilt from its Step nodes (timings, gate, reason) and its Workload
    node (family, dim roles: the cases' features are computed as for a document). Kernel sources
    are not read, so these instances carry no ENABLES (those edges are already stored)."""
    steps_by_lineage: dict[str, list[dict[str, Any]]] = {}
    excluded = set(exclude_lineages)
    for operator in sorted(set(operators)):
        for step in kb.operator_steps(operator):
            if step.lineage_id and step.lineage_id not in excluded:
                steps_by_lineage.setdefault(step.lineage_id, []).append(step.to_dict())
    if not steps_by_lineage:
        return []
    ids = sorted(steps_by_lineage)
    lineages = dict(zip(ids, kb.lineages_by_id(ids), strict=True))
    names = sorted({lin.workload for lin in lineages.values() if lin is not None})
    workloads = dict(zip(names, kb.workloads_named(names), strict=True))
    out = []
    for lid in ids:
        lin = lineages[lid]
        if lin is None:
            continue
        stored = workloads.get(lin.workload)
        workload: dict[str, Any] = {"name": lin.workload, "family": stored.family if stored is not None else ""}
        if stored is not None and stored.roles is not None:
            workload["roles"] = dict(stored.roles)
        data = {"workload": workload, "gpu": {"arch": lin.arch}, "sample": lin.sample, "kernels": [],
                "steps": [{**s, "from": None, "to": None} for s in steps_by_lineage[lid]]}
        out.append(skill_instances(data, lineage_id=lid))
    return out


def merged_documents(documents: Sequence[LineageDocument],
                     prior: Sequence[Sequence[SkillInstance]] = ()) -> tuple[list[LineageDocument], list[MergedSkill]]:
    """Pure: the documents with their ``skills`` rewritten from the merge of their own evidence and
    ``prior`` (evidence of other lineages), and the merged skills.

    Each document gets one skill entry per operator it accepted a step of, citing its own steps and
    parameters, with the conditions and risks of the merge. Its declared skill text is kept only as a
    fallback for operators the registry does not know. Every result is re-checked with
    ``parse_lineage_document``.
    """
    own = [skill_instances(doc.data, lineage_id=doc.id) for doc in documents]
    merged = merge_skills([*prior, *own])
    by_op = {m.operator: m for m in merged}
    out = []
    for doc, instances in zip(documents, own, strict=True):
        existing = {sk["operator"]: sk for sk in doc.data.get("skills") or ()}
        together = together_of(doc.data)
        skills = [skill_json(by_op[inst.operator], inst.steps, inst.params, fallback=existing.get(inst.operator),
                             together=together.get(inst.operator, ()))
                  for inst in instances if inst.steps]
        data = copy.deepcopy(dict(doc.data))
        data["skills"] = skills
        out.append(parse_lineage_document(data, doc.source))
    return out, merged


def ingest_lineages(kb: KnowledgeBase, documents: Sequence[LineageDocument]) -> IngestSummary:
    """Ingest ``documents`` with every skill's conditions re-induced from all the evidence about it
    (these documents and the lineages already stored), then unlink the derived conditions they replace.

    Holds the store's write lock throughout (concurrent runs serialize; StoreError after the lock
    time-out). Measured documents are merged with measured evidence only; a sample document whose
    operator has measured evidence (stored or in this batch) is refused with IngestError before anything
    is written. Idempotent as ``kb.ingest`` is: running it again on the same documents writes nothing new
    (the same evidence induces the same expressions, whose ids are content hashes). Raises what
    ``kb.ingest`` raises (IngestError) or ``parse_lineage_document`` raises; documents before the
    failing one stay ingested.
    """
    with kb.exclusive():
        _refuse_sample_into_measured(kb, documents)
        measured = [d for d in documents if not d.sample]
        samples = [d for d in documents if d.sample]
        parts = [_ingest_group(kb, group, sample) for group, sample in ((measured, False), (samples, True)) if group]
    by_doc = {id(d): r for part, group in zip(parts, [g for g in (measured, samples) if g], strict=True)
              for d, r in zip(group, part.reports, strict=True)}
    return IngestSummary(tuple(by_doc[id(d)] for d in documents),
                         tuple(m for part in parts for m in part.merged),
                         tuple(x for part in parts for x in part.replaced))


def _refuse_sample_into_measured(kb: KnowledgeBase, documents: Sequence[LineageDocument]) -> None:
    """IngestError when a sample document's operator has measured evidence (stored or in ``documents``)."""
    sample_ops = {s["operator"] for d in documents if d.sample for s in d.data["steps"]}
    if not sample_ops:
        return
    measured_ops = {s["operator"] for d in documents if not d.sample for s in d.data["steps"]}
    ops = sorted(sample_ops)
    stored = kb.skills_by_id([skill_id(op) for op in ops])
    measured_ops |= {op for op, skill in zip(ops, stored, strict=True) if skill is not None and not skill.sample}
    clash = sorted(sample_ops & measured_ops)
    if clash:
        names = ", ".join(d.source or d.id for d in documents if d.sample
                          and {s["operator"] for s in d.data["steps"]} & set(clash))
        raise IngestError(f"{names}: sample document(s) (sample: true, test fixture data) would merge evidence into "
                          f"the measured skill(s) of {', '.join(clash)}; sample evidence never merges into measured "
                          "skills. Ingest fixtures into a separate data folder (KLINEAGE_DATA_DIR); nothing was "
                          "ingested")


def _ingest_group(kb: KnowledgeBase, documents: Sequence[LineageDocument], sample: bool) -> IngestSummary:
    """``ingest_lineages`` for documents that are all sample or all measured (the caller holds the lock);
    measured documents see only measured stored evidence."""
    operators = sorted({s["operator"] for doc in documents for s in doc.data["steps"]})
    prior = stored_instances(kb, operators, exclude_lineages=[doc.id for doc in documents])
    if not sample:
        prior = [[i for i in lineage if not i.sample] for lineage in prior]
        prior = [lineage for lineage in prior if lineage]
    docs, merged = merged_documents(documents, prior)
    reports = tuple(kb.ingest(doc) for doc in docs)
    wanted: dict[str, dict[str, set[str]]] = {}
    for m in merged:
        if m.accepted:
            wanted[skill_id(m.operator)] = {
                "valid": {m.valid.expr} if m.valid is not None else set(),
                "profitable": {m.profitable_rule.expr} if m.profitable_rule is not None else set()}
    stale: list[tuple[str, Condition]] = []
    ids = sorted(wanted)
    if ids:
        for kind in ("valid", "profitable"):
            for sid, conditions in kb.conditions(ids, kind).items():
                stale.extend((sid, c) for c in conditions
                             if c.source in _DERIVED_SOURCES and c.expr not in wanted[sid][kind])
    kb.drop_conditions(stale)
    return IngestSummary(reports, tuple(merged), tuple(stale))
