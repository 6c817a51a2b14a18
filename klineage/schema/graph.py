"""Generic graph records: what stores write and read.

A ``Node`` is a label, an id and a flat property map. Property values are JSON-compatible:
str, int, float, bool, None, lists of those, or nested dicts/lists (a store that cannot hold
nested maps, like Neo4j, serializes them as JSON strings and restores them on read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from klineage.schema.graph_spec import LABELS, RELATIONSHIP_NAMES


@dataclass(frozen=True)
class Node:
    """One graph node: ``label`` (one of graph_spec.LABELS), stable ``id`` and properties."""

    label: str
    id: str
    props: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"unknown node label {self.label!r}; expected one of {', '.join(LABELS)}")
        if not self.id:
            raise ValueError(f"{self.label} node without an id")


@dataclass(frozen=True)
class Relationship:
    """One directed relationship ``(source)-[:type {props}]->(target)`` between node ids."""

    type: str
    source: str
    target: str
    props: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in RELATIONSHIP_NAMES:
            raise ValueError(f"unknown relationship type {self.type!r}")

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity of the relationship: at most one of each type between two nodes."""
        return (self.type, self.source, self.target)


@dataclass(frozen=True)
class GraphBatch:
    """Nodes and relationships written together, in one atomic unit."""

    nodes: tuple[Node, ...] = ()
    relationships: tuple[Relationship, ...] = ()

    @staticmethod
    def of(nodes: Iterable[Node] = (), relationships: Iterable[Relationship] = ()) -> GraphBatch:
        """Build a batch from any iterables, dropping exact duplicates while keeping order."""
        node_map: dict[tuple[str, str], Node] = {}
        for node in nodes:
            node_map[(node.label, node.id)] = node
        rel_map: dict[tuple[str, str, str], Relationship] = {}
        for rel in relationships:
            rel_map[rel.key] = rel
        return GraphBatch(tuple(node_map.values()), tuple(rel_map.values()))

    def merged(self, other: GraphBatch) -> GraphBatch:
        """Return one batch holding both; on the same id, ``other``'s node wins."""
        return GraphBatch.of((*self.nodes, *other.nodes), (*self.relationships, *other.relationships))
