"""The graph model as data: labels, relationship types, constraints and indexes.

Both stores (embedded and Neo4j) read this module, so the model is declared once.
"""

from __future__ import annotations

from dataclasses import dataclass

EMBEDDING_DIM = 384

LABELS: tuple[str, ...] = (
    "Workload",
    "Kernel",
    "Lineage",
    "Step",
    "Skill",
    "Condition",
    "Risk",
    "GateRun",
    "Architecture",
    "Application",
)


@dataclass(frozen=True)
class RelationshipType:
    """A relationship type and the labels it may connect."""

    name: str
    source: str
    target: str


RELATIONSHIPS: tuple[RelationshipType, ...] = (
    RelationshipType("OF", "Lineage", "Workload"),
    RelationshipType("STARTS_AT", "Lineage", "Kernel"),
    RelationshipType("HAS_STEP", "Lineage", "Step"),
    RelationshipType("FROM", "Step", "Kernel"),
    RelationshipType("TO", "Step", "Kernel"),
    # the lineage as a chain a person can see, naive -> expert: (simplified)-[:EVOLVES_TO]->(optimized)
    RelationshipType("EVOLVES_TO", "Kernel", "Kernel"),
    RelationshipType("REVERSES_INTO", "Step", "Skill"),
    RelationshipType("VALID_WHEN", "Skill", "Condition"),
    RelationshipType("PROFITABLE_WHEN", "Skill", "Condition"),
    RelationshipType("RISKS", "Skill", "Risk"),
    RelationshipType("ENABLES", "Skill", "Skill"),
    RelationshipType("VALIDATED_BY", "Kernel", "GateRun"),
    RelationshipType("ON", "GateRun", "Architecture"),
    RelationshipType("USED", "Application", "Skill"),
    RelationshipType("ON", "Application", "Kernel"),
)

RELATIONSHIP_NAMES: frozenset[str] = frozenset(r.name for r in RELATIONSHIPS)


def allowed_relationship(name: str, source_label: str, target_label: str) -> bool:
    """Return True when the graph model allows ``(source_label)-[:name]->(target_label)``."""
    return any(
        r.name == name and r.source == source_label and r.target == target_label for r in RELATIONSHIPS
    )


@dataclass(frozen=True)
class VectorIndex:
    """A vector index over one property of one label."""

    name: str
    label: str
    property: str
    dimensions: int
    similarity: str


@dataclass(frozen=True)
class FulltextIndex:
    """A full-text index over some text properties of one label."""

    name: str
    label: str
    properties: tuple[str, ...]


@dataclass(frozen=True)
class RangeIndex:
    """A range (b-tree) index over one property of one label."""

    name: str
    label: str
    property: str


UNIQUE_ID_CONSTRAINTS: tuple[str, ...] = LABELS  # every label's ``id`` is unique

VECTOR_INDEXES: tuple[VectorIndex, ...] = (
    VectorIndex("skill_embedding", "Skill", "embedding", EMBEDDING_DIM, "cosine"),
)
FULLTEXT_INDEXES: tuple[FulltextIndex, ...] = (
    FulltextIndex("skill_text", "Skill", ("name", "intent", "anchor_text")),
)
RANGE_INDEXES: tuple[RangeIndex, ...] = (
    RangeIndex("kernel_sha", "Kernel", "sha"),
    RangeIndex("step_operator", "Step", "operator"),
)
