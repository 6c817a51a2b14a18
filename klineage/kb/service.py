"""The knowledge-base service: the one set of functions GraphQL, an MCP server and the CLI all call.

``KnowledgeBase`` wraps a ``GraphStore`` (and an ``Embedder`` for skill and query embeddings) and
returns schema records only, never store nodes: ``Skill``, ``Condition``, ``Risk``, ``Evidence``,
``Application`` (``schema.records``), ``Workload``, ``Kernel``, ``Step``, ``GateRun`` and
``LineageDetail`` (``schema.lineage_records``), or the small frozen dataclasses defined here and in
``kb.search``. Lookups that a GraphQL DataLoader
batches (``conditions``, ``risks``, ``evidence``, ``enables``, ``gate_runs``) take many ids and cost
a fixed number of store calls, whatever the number of ids.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from klineage.kb.conditions import ConditionError, validate_condition
from klineage.kb.search import (
    SearchError,
    SkillCatalog,
    SkillHit,
    evidence_records,
    make_request,
    search_skills,
)
from klineage.kb.store import GraphStore, LineageView
from klineage.schema.errors import KLineageError
from klineage.schema.gate_result import GateResult
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.ids import kernel_sha
from klineage.schema.lineage_document import LineageDocument, lineage_to_batch
from klineage.schema.lineage_records import GateRun, Kernel, Lineage, LineageDetail, Step, Workload
from klineage.schema.records import (
    Application,
    Condition,
    Effect,
    Evidence,
    Risk,
    Skill,
    kernel_id,
    skill_id,
    workload_id,
)

if TYPE_CHECKING:
    from klineage.kb.embedder import Embedder

__all__ = ["IngestError", "IngestReport", "KnowledgeBase", "KnowledgeBaseError", "SearchError", "SkillHit",
           "SkillPage"]

_OUTCOME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


class KnowledgeBaseError(KLineageError, ValueError):
    """A request the knowledge base cannot satisfy (unknown skill, bad argument); says why."""


class IngestError(KnowledgeBaseError):
    """A lineage document the knowledge base refuses as a whole (nothing was written); says why."""


@dataclass(frozen=True)
class IngestReport:
    """What one ingest wrote: the lineage, its skills (``merged``: those that already existed and
    gained evidence), and the size of the batch (nodes, relationships) written in one upsert."""

    lineage_id: str
    skill_ids: tuple[str, ...]
    merged: tuple[str, ...]
    nodes: int
    relationships: int
    sample: bool


@dataclass(frozen=True)
class SkillPage:
    """A page of skills ordered by id; pass ``end_cursor`` as ``after`` to get the next one."""

    items: tuple[Skill, ...]
    end_cursor: str | None
    has_next: bool


class KnowledgeBase:
    """Service functions over one store. Thread-safe; cheap to construct."""

    def __init__(self, store: GraphStore, embedder: Embedder | None = None) -> None:
        self.store = store
        self._embedder = embedder
        self._lock = threading.Lock()
        self._catalog: tuple[Any, SkillCatalog] | None = None

    def __repr__(self) -> str:
        return f"KnowledgeBase({self.store!r})"

    @property
    def embedder(self) -> Embedder:
        """The embedder (the packaged all-MiniLM-L6-v2 unless one was given); loaded on first use."""
        if self._embedder is None:
            from klineage.kb.embedder import Embedder

            with self._lock:
                if self._embedder is None:
                    self._embedder = Embedder()
        return self._embedder

    def warm_up(self) -> float:
        """Load what the first search would otherwise load (the embedding model, the skill catalog) now:
        a server calls it at start-up so that its first request is as fast as the others. Returns the
        seconds it took."""
        import time

        started = time.perf_counter()
        self.embedder.embed_query("warm up")
        self._catalog_for(None)
        return time.perf_counter() - started

    def exclusive(self) -> AbstractContextManager[Any]:
        """Hold the store's write lock for a read-merge-write (``EmbeddedStore.exclusive``, ``Neo4jStore.
        exclusive``: other writers, other processes and hosts included, wait; StoreError after the lock
        time-out). A store without one (a caller's own GraphStore) gets a no-op."""
        hold = getattr(self.store, "exclusive", None)
        return hold() if callable(hold) else contextlib.nullcontext()

    # ------------------------------------------------------------------------------------- ingest

    def ingest(self, doc: LineageDocument) -> IngestReport:
        """Add a checked lineage document in ONE upsert; idempotent (ingesting it again changes nothing).

        Every anchor and condition expression is checked with the condition language and the feature
        vocabulary first; one bad expression rejects the whole document (IngestError naming the skill,
        the field and the expression) and nothing is written. A skill that already exists (same
        operator, learned from other lineages) is merged: its evidence steps are the union of the
        stored ones and this document's, its effect is recomputed from all of their timings, its
        support counts distinct steps and lineages, its conditions and risks are the union (an
        existing condition keeps its description and gets the larger support), its text and anchor stay
        as first stored, its workloads and families are the union (its embedding is computed again when that
        changes its embedded text), its profitability note is this document's (the latest
        induction), its architectures are the union, its moves together with other operators are the stored ones
        of other workloads and this document's (``Together``), and it is a sample only
        while all of its evidence is. Skills this document says it enables are linked when they are
        already in the store.

        Sample evidence never merges into measured skills: a sample document (``sample: true``) whose
        skills exist as measured skills is refused (IngestError, nothing written); a measured document
        merged into a sample skill makes it measured, its effect and support counted from measured steps only.
        The whole read-merge-write holds the store's write lock (``exclusive``), so concurrent ingests into
        one store never lose each other's evidence.
        """
        self._check_expressions(doc)
        with self.exclusive():
            return self._ingest_locked(doc)

    def _ingest_locked(self, doc: LineageDocument) -> IngestReport:
        batch = lineage_to_batch(doc)
        new_skills = [Skill.from_node(n) for n in batch.nodes if n.label == "Skill"]
        ids = [s.id for s in new_skills]
        existing = dict(zip(ids, self.skills_by_id(ids), strict=True)) if ids else {}
        if doc.sample:
            measured = sorted(sid for sid, old in existing.items() if old is not None and not old.sample)
            if measured:
                source = f"{doc.source}: " if doc.source else ""
                raise IngestError(f"{source}a sample document (sample: true, test fixture data) would merge its "
                                  f"evidence into the measured skill(s) {', '.join(measured)}; sample evidence never "
                                  "merges into measured skills. Ingest fixtures into a separate data folder "
                                  "(KLINEAGE_DATA_DIR); the document was not ingested")
        stored_steps = self.store.neighbors(ids, "REVERSES_INTO", "in") if ids else {}
        batch_steps = {n.id: Step.from_node(n) for n in batch.nodes if n.label == "Step"}
        evidence_of: dict[str, dict[str, Step]] = {sid: {} for sid in ids}
        for rel in batch.relationships:
            if rel.type == "REVERSES_INTO":
                evidence_of[rel.target][rel.source] = batch_steps[rel.source]
        for sid, pairs in stored_steps.items():
            for _, node in pairs:
                if node.id not in evidence_of[sid]:
                    evidence_of[sid][node.id] = Step.from_node(node)

        merged_skills = {skill.id: self._merge_skill(skill, existing.get(skill.id),
                                                     list(evidence_of[skill.id].values()))
                         for skill in new_skills}
        # embedded once, and again only when the text changed (a lineage of another workload merged in)
        to_embed = [m for sid, m in merged_skills.items()
                    if (old := existing.get(sid)) is None or not old.embedding
                    or old.embedding_text() != m.embedding_text()]
        if to_embed:
            vectors = self.embedder.embed([m.embedding_text() for m in to_embed])
            for m, v in zip(to_embed, vectors, strict=True):
                merged_skills[m.id] = replace(m, embedding=tuple(float(x) for x in v))
        merged_nodes = {sid: m.to_node() for sid, m in merged_skills.items()}
        merged_ids = [sid for sid in merged_skills if existing.get(sid) is not None]
        condition_nodes = self._merge_conditions(batch)
        extra_rels = self._cross_lineage_enables(doc)
        nodes = [merged_nodes.get(n.id, condition_nodes.get(n.id, n)) for n in batch.nodes]
        final = GraphBatch.of(nodes, (*batch.relationships, *extra_rels))
        self.store.upsert(final)
        return IngestReport(doc.id, tuple(ids), tuple(merged_ids), len(final.nodes), len(final.relationships),
                            doc.sample)

    def drop_conditions(self, pairs: Sequence[tuple[str, Condition]]) -> int:
        """Unlink each (skill id, condition) pair (the Condition node stays: other skills may use it);
        used when conditions re-induced from more evidence replace earlier ones. Returns how many."""
        rel = {"valid": "VALID_WHEN", "profitable": "PROFITABLE_WHEN"}
        if not pairs:
            return 0
        return self.store.unlink([(rel[c.kind], sid, c.id) for sid, c in pairs])

    def _check_expressions(self, doc: LineageDocument) -> None:
        for i, sk in enumerate(doc.data["skills"]):
            label = f"skill {sk['operator']!r} ($.skills[{i}])"
            anchor = sk["anchor"]["predicate"]
            items = [("anchor.predicate", anchor)] if anchor.strip() else []
            for key in ("valid_when", "profitable_when"):
                items += [(f"{key}[{j}]", c["expr"]) for j, c in enumerate(sk.get(key, ()))]
            for where, expr in items:
                try:
                    validate_condition(expr)
                except ConditionError as exc:
                    source = f"{doc.source}: " if doc.source else ""
                    raise IngestError(f"{source}{label} {where}: {exc.message} (expression {expr!r}); "
                                      "the document was not ingested") from exc

    @staticmethod
    def _merge_skill(new: Skill, old: Skill | None, steps: Sequence[Step]) -> Skill:
        # a step of a walk that timed nothing (``measured`` false) is no evidence of an effect
        steps = [s for s in steps if s.measured]
        measured = [s for s in steps if not s.sample]
        if measured:  # measured evidence never averages with sample evidence
            steps = measured
        speedups = [x["speedup"] for step in sorted(steps, key=lambda s: s.id) for x in step.speedups()]
        lineages = {s.lineage_id for s in steps}
        base = old if old is not None else new

        def union(name: str) -> tuple[str, ...]:  # the values of both records, as a sorted tuple
            return tuple(sorted({*(getattr(old, name) if old else ()), *getattr(new, name)}))

        if steps:
            sample = all(s.sample for s in steps)
        else:
            sample = new.sample and (old is None or old.sample)
        return replace(
            base, effect=Effect.of(speedups), support_steps=len(steps), support_lineages=len(lineages),
            architectures=union("architectures"), workloads=union("workloads"), families=union("families"),
            sample=sample,
            # a lineage's moves replace what an earlier ingest of the same workload's lineage said
            together=tuple(sorted({*(t for t in (old.together if old else ()) if t.workload not in new.workloads),
                                   *new.together})),
            profitability=new.profitability,  # the latest induction's verdict (re-induced from all evidence)
        )

    def _merge_conditions(self, batch: GraphBatch) -> dict[str, Node]:
        """Stored Condition and Risk nodes win over the batch's (same id = same expression or risk);
        a condition's support becomes the larger of the two."""
        by_label: dict[str, list[str]] = {"Condition": [], "Risk": []}
        for node in batch.nodes:
            if node.label in by_label:
                by_label[node.label].append(node.id)
        stored: dict[str, Node] = {}
        for label, ids in by_label.items():
            if ids:
                stored.update({n.id: n for n in self.store.get_many(label, ids) if n is not None})
        out: dict[str, Node] = {}
        for node in batch.nodes:
            old = stored.get(node.id)
            if old is None:
                continue
            if node.label == "Condition":
                support = max(int(old.props.get("support") or 0), int(node.props.get("support") or 0))
                out[node.id] = Node("Condition", node.id, {**old.props, "support": support})
            else:
                out[node.id] = old
        return out

    def _cross_lineage_enables(self, doc: LineageDocument) -> list[Relationship]:
        operators = {sk["operator"] for sk in doc.data["skills"]}
        wanted = sorted({(sk["operator"], e) for sk in doc.data["skills"] for e in sk.get("enables", ())
                         if e not in operators})
        if not wanted:
            return []
        targets = sorted({skill_id(e) for _, e in wanted})
        present = {n.id for n in self.store.get_many("Skill", targets) if n is not None}
        return [Relationship("ENABLES", skill_id(op), skill_id(e))
                for op, e in wanted if skill_id(e) in present]

    # ------------------------------------------------------------------------------------- search

    def search(self, text: str | None = None, context: Mapping[str, Any] | None = None,
               kernel_features: Mapping[str, Any] | None = None, kernel_summary: str | None = None,
               limit: int = 10, operator_anchors: Mapping[str, Any] | None = None) -> list[SkillHit]:
        """Skills ranked for a text, a problem context and/or a kernel (its static features, its
        summary and its operator anchors: operator id -> applicable/present/absent, computed by the
        caller), each hit explained (``kb.search``). SearchError (a ValueError) when there is nothing
        to search for or an argument is malformed."""
        request = make_request(text, context, kernel_features, kernel_summary, limit, operator_anchors)
        needs_vector = bool(request.text or request.kernel_summary)
        embed = self.embedder.embed_query if needs_vector else None
        return search_skills(request, self.store, self._catalog_for, embed)

    def _catalog_for(self, ids: Sequence[str] | None) -> SkillCatalog:
        token = getattr(self.store, "state_token", None)
        if token is None:  # a store that cannot say when it changed is read fresh every time
            return SkillCatalog.load(self.store, ids)
        cached = self._catalog
        if cached is not None and cached[0] == token:
            return cached[1]
        catalog = SkillCatalog.load(self.store, None)
        self._catalog = (token, catalog)
        return catalog

    # ------------------------------------------------------------------------------------- reads

    def skill(self, skill_id: str) -> Skill | None:
        """The skill with this id, or None."""
        node = self.store.get("Skill", skill_id)
        return Skill.from_node(node) if node is not None else None

    def skills(self, first: int = 20, after: str | None = None, operator: str | None = None) -> SkillPage:
        """Skills ordered by id, ``first`` at a time after the cursor ``after`` (a skill id), optionally
        only those of one operator: one store call."""
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise KnowledgeBaseError(f"first: expected an integer >= 0, got {first!r}")
        where = {"operator": operator} if operator else None
        nodes = self.store.find("Skill", where=where, limit=first + 1, after=after)
        items = tuple(Skill.from_node(n) for n in nodes[:first])
        return SkillPage(items, items[-1].id if items else None, len(nodes) > first)

    def conditions(self, skill_ids: Sequence[str], kind: str) -> dict[str, list[Condition]]:
        """For each skill id, its ``kind`` ("valid" or "profitable") conditions: one store call."""
        if kind not in ("valid", "profitable"):
            raise KnowledgeBaseError(f"kind: expected 'valid' or 'profitable', got {kind!r}")
        rel = "VALID_WHEN" if kind == "valid" else "PROFITABLE_WHEN"
        found = self.store.neighbors(list(skill_ids), rel)
        return {sid: [Condition.from_node(n) for _, n in found.get(sid, ())] for sid in skill_ids}

    def risks(self, skill_ids: Sequence[str]) -> dict[str, list[Risk]]:
        """For each skill id, its risks: one store call."""
        found = self.store.neighbors(list(skill_ids), "RISKS")
        return {sid: [Risk.from_node(n) for _, n in found.get(sid, ())] for sid in skill_ids}

    def evidence(self, skill_ids: Sequence[str]) -> dict[str, list[Evidence]]:
        """For each skill id, its evidence steps with lineage, workload, GPU and per-shape speedups:
        two store calls (the steps, then their lineages)."""
        found = self.store.neighbors(list(skill_ids), "REVERSES_INTO", "in")
        records = evidence_records(self.store, {sid: [n for _, n in found.get(sid, ())] for sid in skill_ids})
        return {sid: records.get(sid, []) for sid in skill_ids}

    def enables(self, skill_ids: Sequence[str]) -> dict[str, list[Skill]]:
        """For each skill id, the skills it enables: one store call."""
        found = self.store.neighbors(list(skill_ids), "ENABLES")
        return {sid: [Skill.from_node(n) for _, n in found.get(sid, ())] for sid in skill_ids}

    def workloads(self) -> list[Workload]:
        """Every workload, ordered by id."""
        return [Workload.from_node(n) for n in self.store.find("Workload")]

    def lineages(self, workload: str | None = None) -> list[LineageDetail]:
        """Every lineage (of one workload, by name, when given), ordered by id, with its steps."""
        where = {"workload": workload} if workload else None
        views = [self.store.lineage(n.id) for n in self.store.find("Lineage", where=where)]
        return [_detail(v) for v in views if v is not None]

    def lineage(self, lineage_id: str) -> LineageDetail | None:
        """One lineage with its workload, starting kernel and steps in order, or None."""
        view = self.store.lineage(lineage_id)
        return _detail(view) if view is not None else None

    def lineage_kernels(self, view: LineageDetail) -> list[Kernel]:
        """Every kernel version of a lineage, in walk order: the start, then each step's from/to."""
        step_ids = [s.id for s in view.steps]
        froms = self.store.neighbors(step_ids, "FROM") if step_ids else {}
        tos = self.store.neighbors(step_ids, "TO") if step_ids else {}
        seen: dict[str, Kernel] = {}
        if view.start is not None:
            seen[view.start.id] = view.start
        for sid in step_ids:
            for _, node in (*froms.get(sid, ()), *tos.get(sid, ())):
                if node.id not in seen:
                    seen[node.id] = Kernel.from_node(node)
        return list(seen.values())

    def step_kernels(self, step_ids: Sequence[str]) -> dict[str, tuple[Kernel | None, Kernel | None]]:
        """For each step id, its (FROM, TO) kernels — the version a backward step started from and the
        simplified version it produced (None where the store lacks one): two store calls."""
        froms, tos = self.step_kernel(step_ids, "from"), self.step_kernel(step_ids, "to")
        return {sid: (froms[sid], tos[sid]) for sid in step_ids}

    def step_kernel(self, step_ids: Sequence[str], end: str) -> dict[str, Kernel | None]:
        """For each step id, the kernel at one ``end`` of it: "from" (the version it started from) or "to"
        (the simplified version it produced; None where the store lacks one): one store call."""
        if end not in ("from", "to"):
            raise KnowledgeBaseError(f"end: expected 'from' or 'to', got {end!r}")
        found = self.store.neighbors(list(step_ids), end.upper()) if step_ids else {}
        return {sid: Kernel.from_node(pairs[0][1]) if (pairs := found.get(sid)) else None for sid in step_ids}

    def steps(self, step_ids: Sequence[str]) -> list[Step | None]:
        """The steps with these ids, in the same order (None where missing): one store call."""
        return [Step.from_node(n) if n is not None else None for n in self.store.get_many("Step", list(step_ids))]

    def step_skills(self, step_ids: Sequence[str]) -> dict[str, list[Skill]]:
        """For each step id, the skill it reverses into (accepted steps; empty otherwise): one store call."""
        found = self.store.neighbors(list(step_ids), "REVERSES_INTO") if step_ids else {}
        return {sid: [Skill.from_node(n) for _, n in found.get(sid, ())] for sid in step_ids}

    def operator_steps(self, operator: str) -> list[Step]:
        """Every stored step of ``operator`` (of every lineage), ordered by id: one store call."""
        return [Step.from_node(n) for n in self.store.find("Step", where={"operator": operator})]

    def lineages_by_id(self, lineage_ids: Sequence[str]) -> list[Lineage | None]:
        """The lineages with these ids (without their steps), in the same order (None where missing)."""
        return [Lineage.from_node(n) if n is not None else None
                for n in self.store.get_many("Lineage", list(lineage_ids))]

    def workloads_named(self, names: Sequence[str]) -> list[Workload | None]:
        """The workloads with these names, in the same order (None where missing): one store call."""
        return [Workload.from_node(n) if n is not None else None
                for n in self.store.get_many("Workload", [workload_id(name) for name in names])]

    def skills_by_id(self, skill_ids: Sequence[str]) -> list[Skill | None]:
        """The skills with these ids, in the same order (None where missing): one store call."""
        return [Skill.from_node(n) if n is not None else None for n in self.store.get_many("Skill", list(skill_ids))]

    def kernel(self, sha: str) -> Kernel | None:
        """The kernel with this full SHA-256 (or this ``kernel:`` id), or None."""
        if sha.startswith("kernel:"):
            node = self.store.get("Kernel", sha)
            return Kernel.from_node(node) if node is not None else None
        node = self.store.get("Kernel", kernel_id(sha))
        return Kernel.from_node(node) if node is not None and node.props.get("sha") == sha else None

    def gate_runs(self, kernel_ids: Sequence[str]) -> dict[str, list[GateRun]]:
        """For each kernel id, the gate runs that validated it: one store call."""
        found = self.store.neighbors(list(kernel_ids), "VALIDATED_BY")
        return {kid: [GateRun.from_node(n) for _, n in found.get(kid, ())] for kid in kernel_ids}

    def workload(self, name: str) -> Workload | None:
        """The workload with this name, or None."""
        node = self.store.get("Workload", workload_id(name))
        return Workload.from_node(node) if node is not None else None

    # ------------------------------------------------------------------------------------- writes

    def record_application(self, skill_id: str, kernel_source: str, outcome: str,
                           speedup: float | None = None, gate_result: GateResult | None = None,
                           context: Mapping[str, Any] | None = None, recorded_at: str | None = None) -> Application:
        """Record an agent's use of a skill on new code, and update the skill from it.

        An Application node USED the skill and is ON the kernel (a Kernel node is added for the source
        when new). With ``gate_result`` (the validator's verdict on this very source) the result is stored
        as a GateRun node, (Kernel)-[:VALIDATED_BY]->(GateRun), and the application names it; it is then
        verified when it failed a gate or passed with a speedup (``Application.verified``: a pass with
        nothing timed, under the interpreter, judged correctness only and is no trial of the skill's profit).
        The skill's ``applied``, ``verified`` and ``paid`` counts and its
        ``field_effect`` (speedups of verified, passing applications) are recomputed from all its
        applications; a speedup claimed without a gate result is kept on the application but never
        moves the effect. ``context``: the problem features of the measured shape (for re-induction).
        ``recorded_at`` (ISO time, default now) dates it: the same skill, kernel, outcome, speedup and time
        is one application, so recording a committed trial again changes nothing.
        KnowledgeBaseError for an unknown skill, an empty source, an outcome that is not a short
        lower-case word (e.g. "pass", "fail", "regression"), a speedup that is not a positive finite
        number, or a gate result that judged another kernel."""
        skill_node = self.store.get("Skill", skill_id)
        if skill_node is None:
            raise KnowledgeBaseError(f"unknown skill {skill_id}: no Skill node has this id")
        if not isinstance(kernel_source, str) or not kernel_source.strip():
            raise KnowledgeBaseError("kernel_source: expected the kernel's Python source, "
                                     "got an empty string")
        if not isinstance(outcome, str) or not _OUTCOME.fullmatch(outcome):
            raise KnowledgeBaseError(f"outcome {outcome!r}: expected a short lower-case word such as 'pass', "
                                     "'fail' or 'regression'")
        if speedup is not None:
            number = isinstance(speedup, (int, float)) and not isinstance(speedup, bool)
            if not number or not math.isfinite(speedup) or speedup <= 0:
                raise KnowledgeBaseError(f"speedup {speedup!r}: expected a positive finite number or none")
            speedup = float(speedup)
        sha = kernel_sha(kernel_source)
        if gate_result is not None:
            if not isinstance(gate_result, GateResult):
                raise KnowledgeBaseError("gate_result: expected a GateResult (schema.gate_result)")
            if gate_result.kernel_sha != sha:
                raise KnowledgeBaseError(f"gate_result: it judged kernel {gate_result.kernel_sha[:16]}, not this "
                                         f"source ({sha[:16]}); record the source that was validated")
        if context is not None and not isinstance(context, Mapping):
            raise KnowledgeBaseError("context: expected a mapping of feature name to value")
        kid = kernel_id(sha)
        now = recorded_at or datetime.now(UTC).isoformat(timespec="microseconds")
        nodes: list[Node] = []
        rels: list[Relationship] = []
        run_id = ""
        if gate_result is not None:
            gate_run = GateRun.of(gate_result)
            run_id = gate_run.id
            nodes.append(gate_run.to_node())
            rels.append(Relationship("VALIDATED_BY", kid, run_id))
        app = Application(skill_id, sha, outcome, speedup, now, run_id,
                          gate_result.verdict if gate_result is not None else "", dict(context or {}))
        nodes.append(app.to_node())
        if self.store.get("Kernel", kid) is None:
            nodes.append(Kernel.of(sha, kernel_source).to_node())
        rels += [Relationship("USED", app.id, skill_id), Relationship("ON", app.id, kid)]
        with self._lock:  # one writer at a time recomputes the skill's counts from all its applications
            self.store.upsert(GraphBatch.of(nodes, rels))
            self._refresh_usage(skill_id)
        return app

    def _refresh_usage(self, skill_id: str) -> None:
        node = self.store.get("Skill", skill_id)
        if node is None:
            return
        apps = self.applications([skill_id])[skill_id]
        verified = [a for a in apps if a.verified]
        paying = [a.speedup for a in verified if a.verdict == "pass" and a.speedup is not None]
        skill = replace(Skill.from_node(node), applied=len(apps), verified=len(verified),
                        paid=sum(1 for a in verified if a.paid), field_effect=Effect.of(paying))
        self.store.upsert(GraphBatch.of([skill.to_node()], []))

    def applications(self, skill_ids: Sequence[str]) -> dict[str, list[Application]]:
        """For each skill id, the recorded applications of it, oldest first: one store call."""
        found = self.store.neighbors(list(skill_ids), "USED", "in")
        out: dict[str, list[Application]] = {}
        for sid in skill_ids:
            apps = [Application.from_node(n) for _, n in found.get(sid, ())]
            out[sid] = sorted(apps, key=lambda a: (a.recorded_at, a.id))
        return out

    def replace_profitable(self, skill_id: str, conditions: Sequence[Condition], note: str) -> int:
        """Replace a skill's PROFITABLE_WHEN conditions with ``conditions`` (re-induced by a caller above
        ``kb``; empty when no rule was kept) and set its profitability note. Returns how many were unlinked."""
        node = self.store.get("Skill", skill_id)
        if node is None:
            raise KnowledgeBaseError(f"unknown skill {skill_id}: no Skill node has this id")
        for c in conditions:
            validate_condition(c.expr)
        old = self.conditions([skill_id], "profitable")[skill_id]
        keep = {c.id for c in conditions}
        dropped = self.drop_conditions([(skill_id, c) for c in old if c.id not in keep])
        skill = replace(Skill.from_node(node), profitability="" if conditions else note)
        self.store.upsert(GraphBatch.of([skill.to_node(), *(c.to_node() for c in conditions)],
                                        [Relationship("PROFITABLE_WHEN", skill_id, c.id) for c in conditions]))
        return dropped

    def effect_of(self, skill_ids: Sequence[str]) -> dict[str, Effect]:
        """Each skill's effect recomputed from the timings of its evidence steps now in the store."""
        found = self.store.neighbors(list(skill_ids), "REVERSES_INTO", "in")
        return {sid: Effect.of([x["speedup"] for _, node in found.get(sid, ())
                                for x in Step.from_node(node).speedups()])
                for sid in skill_ids}


def _detail(view: LineageView) -> LineageDetail:
    """The records of a store's ``LineageView``."""
    return LineageDetail(Lineage.from_node(view.lineage),
                         Workload.from_node(view.workload) if view.workload is not None else None,
                         Kernel.from_node(view.start) if view.start is not None else None,
                         tuple(Step.from_node(s) for s in view.steps))


def record_application(kb: KnowledgeBase, skill_id: str, kernel_source: str, outcome: str,
                       speedup: float | None = None, gate_result: GateResult | None = None,
                       context: Mapping[str, Any] | None = None) -> Application:
    """``kb.record_application`` as a plain function: the default recorder of the GraphQL and MCP servers
    (``klineage.ingest.feedback.record_with_feedback`` has the same signature and also re-induces)."""
    return kb.record_application(skill_id, kernel_source, outcome, speedup, gate_result=gate_result, context=context)
