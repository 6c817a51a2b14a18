"""The GraphQL schema: queries over skills, lineages and kernels, and two guarded mutations.

Resolvers stay thin: each calls one ``KnowledgeBase`` service function (the same ones the CLI and
an MCP server call) and converts records to GraphQL types.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import os
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import MaxTokensLimiter, ParserCache, ValidationCache
from strawberry.permission import BasePermission
from strawberry.scalars import JSON
from strawberry.types import ExecutionContext

from klineage.graphql.context import RequestContext
from klineage.graphql.cost import Limits, QueryLimiter
from klineage.graphql.kernel_analysis import KernelAnalysisError, KernelAnalyzer
from klineage.graphql.types import (
    Applicability,
    Application,
    Evidence,
    Explanation,
    Kernel,
    Lineage,
    Skill,
    SkillHit,
    SkillPage,
    Step,
    Together,
    Workload,
)
from klineage.ingest.pipeline import ingest_lineages
from klineage.schema.errors import FormatError
from klineage.schema.gate_result import GateResult
from klineage.schema.lineage_document import parse_lineage_document
from klineage.schema.lineage_records import LineageDetail

MAX_DEPTH = 8
MAX_TOKENS = 2000
MAX_ALIASES = 15
MAX_LIMIT = 100
MAX_COST = 25_000
DOCUMENT_CACHE_SIZE = 256
TOKEN_ENV = "KLINEAGE_API_TOKEN"

Info = strawberry.Info[RequestContext, None]
logger = logging.getLogger("klineage.graphql")


class HasApiToken(BasePermission):
    """Mutations need ``Authorization: Bearer $KLINEAGE_API_TOKEN``; with no token configured, none pass."""

    message = f"mutations need the header 'Authorization: Bearer <token>' matching ${TOKEN_ENV}"

    def has_permission(self, source: Any, info: Info, **kwargs: Any) -> bool:
        expected = os.environ.get(TOKEN_ENV, "")
        header = info.context.authorization or ""
        if not expected or not header.startswith("Bearer "):
            return False
        given = header.removeprefix("Bearer ").strip().encode("utf-8", errors="replace")
        return hmac.compare_digest(given, expected.encode("utf-8", errors="replace"))


@functools.cache
def _default_analyzer() -> KernelAnalyzer:
    """One analyzer for contexts built without one (``create_app`` always passes its own)."""
    return KernelAnalyzer()


async def _kernel_facts(info: Info, source: str) -> dict[str, Any]:
    """``KnowledgeBase.search`` keyword arguments for a kernel source (features, summary, operator
    anchors), the same ones the CLI passes, computed off the event loop within the analyzer's size and
    time limits; GraphQLError when the source is too large, does not parse or takes too long."""
    analyzer = info.context.analyzer or _default_analyzer()
    try:
        return await analyzer.search_kwargs(source)
    except KernelAnalysisError as exc:
        raise GraphQLError(str(exc)) from exc


def hit_to_graphql(hit: Any) -> SkillHit:
    """Convert a ``kb`` search hit to the GraphQL ``SkillHit``."""
    return SkillHit(
        skill=Skill.of(hit.skill), score=float(hit.score), applicable=Applicability(hit.applicable),
        explanation=Explanation(passed=list(hit.passed), failed=list(hit.failed), unknown=list(hit.unknown),
                                evidence=[Evidence.of(e) for e in hit.evidence], usage=hit.skill.usage(),
                                why=hit.why, missing_features=list(hit.missing_features)),
        together=Together.of(hit.together) if hit.together is not None else None,
    )


def lineage_to_graphql(view: LineageDetail, kernels: list[Kernel]) -> Lineage:
    """Convert a ``LineageDetail`` (and its kernel versions) to the GraphQL ``Lineage``."""
    lin = view.lineage
    return Lineage(
        id=strawberry.ID(lin.id), workload=lin.workload, gpu=lin.gpu, arch=lin.arch, versions=JSON(dict(lin.versions)),
        created=lin.created, policy=lin.policy, sample=lin.sample, start_sha=lin.start_sha,
        steps=[Step.of(s) for s in view.steps], _kernels=kernels,
    )


@strawberry.type
class Query:
    @strawberry.field(description="Skills ranked for a text, a problem context and/or a kernel's source; "
                      "each hit explains its conditions and evidence.")
    async def search_skills(self, info: Info, text: str | None = None, context: JSON | None = None,
                            kernel_source: str | None = None, limit: int = 10) -> list[SkillHit]:
        if not 1 <= limit <= MAX_LIMIT:
            raise GraphQLError(f"limit: expected 1..{MAX_LIMIT}, got {limit}")
        if context is not None and not isinstance(context, dict):
            raise GraphQLError("context: expected a JSON object of feature name to value")
        kernel = await _kernel_facts(info, kernel_source) if kernel_source else {}
        kb = info.context.kb
        try:
            hits = await asyncio.to_thread(kb.search, text=text, context=context, limit=limit, **kernel)
        except ValueError as exc:
            raise GraphQLError(str(exc)) from exc
        return [hit_to_graphql(h) for h in hits]

    @strawberry.field(description="One skill by id.")
    def skill(self, info: Info, id: strawberry.ID) -> Skill | None:
        found = info.context.kb.skill(str(id))
        return Skill.of(found) if found else None

    @strawberry.field(description="Skills ordered by id, a page at a time; filter by operator id.")
    def skills(self, info: Info, first: int = 20, after: str | None = None,
               operator: str | None = None) -> SkillPage:
        if not 1 <= first <= MAX_LIMIT:
            raise GraphQLError(f"first: expected 1..{MAX_LIMIT}, got {first}")
        page = info.context.kb.skills(first=first, after=after, operator=operator)
        return SkillPage(items=[Skill.of(s) for s in page.items], end_cursor=page.end_cursor,
                         has_next_page=page.has_next)

    @strawberry.field(description="Every workload that has a lineage.")
    def workloads(self, info: Info) -> list[Workload]:
        return [Workload(id=strawberry.ID(w.id), name=w.name, family=w.family, description=w.description)
                for w in info.context.kb.workloads()]

    @strawberry.field(description="One lineage with its steps in order and its kernel versions.")
    def lineage(self, info: Info, id: strawberry.ID) -> Lineage | None:
        kb = info.context.kb
        view = kb.lineage(str(id))
        if view is None:
            return None
        return lineage_to_graphql(view, [Kernel.of(k) for k in kb.lineage_kernels(view)])

    @strawberry.field(description="Lineages, optionally of one workload (by name).")
    def lineages(self, info: Info, workload: str | None = None) -> list[Lineage]:
        kb = info.context.kb
        return [lineage_to_graphql(v, [Kernel.of(k) for k in kb.lineage_kernels(v)])
                for v in kb.lineages(workload)]

    @strawberry.field(description="One kernel version by its SHA-256.")
    def kernel(self, info: Info, sha: str) -> Kernel | None:
        found = info.context.kb.kernel(sha)
        return Kernel.of(found) if found else None


@strawberry.type(description="What an ingest wrote.")
class IngestResult:
    lineage_id: strawberry.ID
    skills: list[strawberry.ID]
    nodes: int
    relationships: int


@strawberry.type
class Mutation:
    @strawberry.mutation(permission_classes=[HasApiToken],
                         description="Add a lineage document to the knowledge base (idempotent).")
    async def ingest_lineage(self, info: Info, document: JSON) -> IngestResult:
        try:
            doc = parse_lineage_document(document, "document")
            # the one ingest path (the CLI's too): conditions re-induced from all the evidence, stale ones
            # dropped; embeds and writes, so off the loop
            summary = await asyncio.to_thread(ingest_lineages, info.context.kb, [doc])
            report = summary.reports[0]
        except (FormatError, ValueError) as exc:
            raise GraphQLError(str(exc)) from exc
        return IngestResult(lineage_id=strawberry.ID(report.lineage_id),
                            skills=[strawberry.ID(s) for s in report.skill_ids],
                            nodes=report.nodes, relationships=report.relationships)

    @strawberry.mutation(permission_classes=[HasApiToken],
                         description="Record an agent's use of a skill on new code, with its outcome; with "
                         "the gate result that judged the kernel it is verified and updates the skill's effect; "
                         "context: the problem features of the measured shape (what re-induction learns from).")
    async def record_application(self, info: Info, skill_id: strawberry.ID, kernel_source: str, outcome: str,
                           speedup: float | None = None, gate_result: JSON | None = None,
                           context: JSON | None = None) -> Application:
        if context is not None and not isinstance(context, dict):
            raise GraphQLError("context: expected a JSON object of feature name to value")
        try:
            gate = _gate_result(gate_result) if gate_result is not None else None
            app = await asyncio.to_thread(info.context.recorder, info.context.kb, str(skill_id), kernel_source,
                                          outcome, speedup, gate, context)
        except (KeyError, ValueError) as exc:
            raise GraphQLError(str(exc).strip("'\"")) from exc
        return Application(id=strawberry.ID(app.id), skill_id=strawberry.ID(app.skill_id),
                           kernel_sha=app.kernel_sha, outcome=app.outcome, speedup=app.speedup,
                           recorded_at=app.recorded_at, verified=app.verified, verdict=app.verdict or None)


def _gate_result(value: Any) -> GateResult:
    """A gate result document as a ``GateResult``; GraphQLError when malformed."""
    try:
        if not isinstance(value, dict):
            raise TypeError("expected an object")
        result = GateResult.from_dict(value)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GraphQLError(f"gateResult: not a gate result document ({exc})") from exc
    if not result.gates:
        raise GraphQLError("gateResult: no gates ran")
    return result


def is_client_error(error: GraphQLError) -> bool:
    """True when ``error`` is the client's fault (a GraphQLError raised on purpose, a parse or validation
    error, which has no path, a permission refusal): no traceback is logged for it. An unexpected exception
    in a resolver arrives wrapped, with a path and ``original_error`` set to it."""
    original = error.original_error
    return original is None or isinstance(original, GraphQLError) or error.path is None


class KLineageSchema(strawberry.Schema):
    """The schema, logging client errors in one line (no traceback) and unexpected errors in full."""

    def process_errors(self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
                       ) -> None:
        unexpected = [e for e in errors if not is_client_error(e)]
        for error in errors:
            if is_client_error(error):
                logger.info("client error: %s", error.message)
        if unexpected:
            super().process_errors(unexpected, execution_context)


def build_schema() -> strawberry.Schema:
    """The schema with depth, token, alias and cost limits installed. Parsed documents and their validation
    are cached (LRU of DOCUMENT_CACHE_SIZE query texts): clients repeat the same few queries with other
    variables, and validation was a third of a search's time."""
    return KLineageSchema(
        query=Query, mutation=Mutation,
        extensions=[lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
                    lambda: ParserCache(maxsize=DOCUMENT_CACHE_SIZE),
                    lambda: ValidationCache(maxsize=DOCUMENT_CACHE_SIZE),
                    lambda: QueryLimiter(Limits(max_cost=MAX_COST, max_depth=MAX_DEPTH, max_aliases=MAX_ALIASES))],
    )


schema = build_schema()
