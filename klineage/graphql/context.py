"""Per-request context: the knowledge base, the request's DataLoaders and its bearer token."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from strawberry.dataloader import DataLoader
from strawberry.fastapi import BaseContext

from klineage.graphql.kernel_analysis import KernelAnalyzer
from klineage.kb.service import KnowledgeBase, record_application
from klineage.schema.lineage_records import GateRun, Kernel
from klineage.schema.records import Condition, Evidence, Risk, Skill

T = TypeVar("T")


def _batched(fetch: Callable[[Sequence[str]], Mapping[str, list[T]]]) -> DataLoader[str, list[T]]:
    """A DataLoader that answers many ids with one ``fetch`` call (one store round trip)."""

    async def load(ids: list[str]) -> list[list[T]]:
        found = fetch(ids)
        return [list(found.get(i, ())) for i in ids]

    return DataLoader(load_fn=load)


def _one(fetch: Callable[[Sequence[str]], Mapping[str, T | None]]) -> DataLoader[str, T | None]:
    """A DataLoader of at most one value per id, answering many ids with one ``fetch`` call."""

    async def load(ids: list[str]) -> list[T | None]:
        found = fetch(ids)
        return [found.get(i) for i in ids]

    return DataLoader(load_fn=load)


@dataclass
class Loaders:
    """One DataLoader per batched lookup; a fresh set per request so nothing is cached across requests."""

    valid_when: DataLoader[str, list[Condition]]
    profitable_when: DataLoader[str, list[Condition]]
    risks: DataLoader[str, list[Risk]]
    evidence: DataLoader[str, list[Evidence]]
    enables: DataLoader[str, list[Skill]]
    gate_runs: DataLoader[str, list[GateRun]]
    step_from: DataLoader[str, Kernel | None]
    step_to: DataLoader[str, Kernel | None]
    step_skill: DataLoader[str, list[Skill]]

    @staticmethod
    def for_kb(kb: KnowledgeBase) -> Loaders:
        """Build the loaders over ``kb``'s batched service functions."""
        return Loaders(
            valid_when=_batched(lambda ids: kb.conditions(ids, "valid")),
            profitable_when=_batched(lambda ids: kb.conditions(ids, "profitable")),
            risks=_batched(kb.risks),
            evidence=_batched(kb.evidence),
            enables=_batched(kb.enables),
            gate_runs=_batched(kb.gate_runs),
            step_from=_one(lambda ids: kb.step_kernel(ids, "from")),
            step_to=_one(lambda ids: kb.step_kernel(ids, "to")),
            step_skill=_batched(kb.step_skills),
        )


@dataclass
class RequestContext(BaseContext):
    """What every resolver sees: ``kb``, ``loaders``, the request's Authorization header and the kernel
    ``analyzer`` (None: a fresh ``KernelAnalyzer`` per use)."""

    kb: KnowledgeBase
    loaders: Loaders
    authorization: str | None = None
    recorder: Callable[..., Any] = field(default=record_application)
    analyzer: KernelAnalyzer | None = None
