"""Per-request context: the knowledge base, the request's DataLoaders and its bearer token."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from strawberry.dataloader import DataLoader
from strawberry.fastapi import BaseContext

from klineage.graphql.kernel_analysis import KernelAnalyzer
from klineage.kb.service import KnowledgeBase, record_application
from klineage.schema.graph import Node

T = TypeVar("T")


def _batched(fetch: Callable[[Sequence[str]], Mapping[str, list[T]]]) -> DataLoader[str, list[T]]:
    """A DataLoader that answers many ids with one ``fetch`` call (one store round trip)."""

    async def load(ids: list[str]) -> list[list[T]]:
        found = fetch(ids)
        return [list(found.get(i, ())) for i in ids]

    return DataLoader(load_fn=load)


def _neighbors(kb: KnowledgeBase, rel: str, direction: str = "out") -> Callable[[Sequence[str]], dict[str, list[Node]]]:
    def fetch(ids: Sequence[str]) -> dict[str, list[Node]]:
        return {k: [node for _, node in v] for k, v in kb.store.neighbors(list(ids), rel, direction).items()}

    return fetch


@dataclass
class Loaders:
    """One DataLoader per batched lookup; a fresh set per request so nothing is cached across requests."""

    valid_when: DataLoader[str, list[Any]]
    profitable_when: DataLoader[str, list[Any]]
    risks: DataLoader[str, list[Any]]
    evidence: DataLoader[str, list[Any]]
    enables: DataLoader[str, list[Any]]
    gate_runs: DataLoader[str, list[Node]]
    step_from: DataLoader[str, list[Node]]
    step_to: DataLoader[str, list[Node]]
    step_skill: DataLoader[str, list[Node]]

    @staticmethod
    def for_kb(kb: KnowledgeBase) -> Loaders:
        """Build the loaders over ``kb``'s batched service functions."""
        return Loaders(
            valid_when=_batched(lambda ids: kb.conditions(ids, "valid")),
            profitable_when=_batched(lambda ids: kb.conditions(ids, "profitable")),
            risks=_batched(kb.risks),
            evidence=_batched(kb.evidence),
            enables=_batched(kb.enables),
            gate_runs=_batched(_neighbors(kb, "VALIDATED_BY")),
            step_from=_batched(_neighbors(kb, "FROM")),
            step_to=_batched(_neighbors(kb, "TO")),
            step_skill=_batched(_neighbors(kb, "REVERSES_INTO")),
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
