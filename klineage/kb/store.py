"""The ``GraphStore`` protocol: what every knowledge-base store (embedded, Neo4j) provides.

Both stores pass one conformance suite (``tests/kb/test_store_conformance.py``); code above
``kb`` only ever talks to this protocol.

Optional capability (not part of the protocol): a store may expose a ``state_token`` property, a
hashable value that changes whenever the stored graph may have changed (``EmbeddedStore`` has one).
``kb.service.KnowledgeBase`` then caches its search catalog until the token changes; a store without
it is read afresh (a fixed number of batched calls) on every search.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from klineage.schema.errors import KLineageError
from klineage.schema.graph import GraphBatch, Node, Relationship


class StoreError(KLineageError, RuntimeError):
    """A store could not do what was asked (unreachable, misconfigured, bad batch); says why."""


_FLOAT_RUN = 16  # a list of at least this many floats (an embedding) is checked in one numpy call


def normalize_value(value: Any, where: str, sequence: Callable[[list[Any]], Any] = list) -> Any:
    """A fresh JSON-compatible copy of a property value; StoreError (naming ``where``) if it is not one.

    Every store validates with this one function. ``sequence`` builds each normalized list (stores
    choose how they hold lists: Neo4j plain lists, the embedded store tuples of scalars).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StoreError(f"{where}: non-finite float {value!r} (only finite numbers can be stored)")
        return float(value)
    if isinstance(value, (np.floating, np.integer)):
        return normalize_value(value.item(), where, sequence)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StoreError(f"{where}: map key {key!r} is not a string")
            out[key] = normalize_value(item, f"{where}.{key}", sequence)
        return out
    if isinstance(value, (list, tuple)):
        if len(value) >= _FLOAT_RUN and all(type(v) is float for v in value):
            finite = np.isfinite(np.asarray(value, dtype=np.float64))
            if not finite.all():
                bad = int(np.argmin(finite))
                raise StoreError(f"{where}[{bad}]: non-finite float {value[bad]!r} (only finite numbers can be "
                                 "stored)")
            return sequence(list(value))
        return sequence([normalize_value(item, f"{where}[{i}]", sequence) for i, item in enumerate(value)])
    raise StoreError(f"{where}: {type(value).__name__} is not a storable value "
                     "(str, int, float, bool, None, lists and string-keyed maps of those)")


@dataclass(frozen=True)
class ScoredNode:
    """A node returned by a ranked query, with its score (higher is better)."""

    node: Node
    score: float


@dataclass(frozen=True)
class LineageView:
    """A lineage with its workload, starting kernel and steps ordered by index."""

    lineage: Node
    workload: Node | None
    start: Node | None
    steps: tuple[Node, ...]


@runtime_checkable
class GraphStore(Protocol):
    """A graph of KLineage records.

    Promises: ``upsert`` is atomic (all of a batch or nothing) and idempotent (writing the same
    batch twice changes nothing); a relationship whose endpoint is neither in the batch nor in
    the store is rejected with StoreError and nothing is written; properties round-trip exactly.
    """

    def upsert(self, batch: GraphBatch) -> None:
        """Write all nodes and relationships of ``batch`` in one atomic unit (merge by id / by key)."""
        ...

    def unlink(self, relationships: Sequence[tuple[str, str, str]]) -> int:
        """Remove the relationships given as (type, source id, target id), atomically; ones that do not
        exist are ignored; nodes are never removed. Returns how many were removed."""
        ...

    def get(self, label: str, node_id: str) -> Node | None:
        """The node with this label and id, or None."""
        ...

    def get_many(self, label: str, node_ids: Sequence[str]) -> list[Node | None]:
        """Nodes for ``node_ids`` in the same order (None where missing): one round trip."""
        ...

    def find(self, label: str, where: Mapping[str, Any] | None = None, limit: int | None = None,
             after: str | None = None) -> list[Node]:
        """Nodes of ``label`` whose properties equal ``where``, ordered by id, ids > ``after``, at most
        ``limit``."""
        ...

    def neighbors(self, node_ids: Sequence[str], rel_type: str, direction: str = "out"
                  ) -> dict[str, list[tuple[Relationship, Node]]]:
        """For each id, its ``rel_type`` relationships (``out``: id is the source; ``in``: the target)
        with the node at the other end, ordered by that node's id: one round trip for many ids."""
        ...

    def lineage(self, lineage_id: str) -> LineageView | None:
        """The lineage, its workload, starting kernel and steps ordered by HAS_STEP index."""
        ...

    def vector_top_k(self, label: str, prop: str, vector: Sequence[float], k: int) -> list[ScoredNode]:
        """The ``k`` nodes whose ``prop`` vector is most cosine-similar to ``vector`` (score = cosine)."""
        ...

    def fulltext_top_k(self, index: str, text: str, k: int) -> list[ScoredNode]:
        """The ``k`` best full-text matches of ``text`` in the named full-text index (graph_spec)."""
        ...

    def counts(self) -> dict[str, int]:
        """Number of nodes per label and relationships per type (keys ``Label`` and ``:TYPE``)."""
        ...

    def export(self) -> GraphBatch:
        """Every node and relationship, ordered by (label, id) and (type, source, target)."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...


#: Writers of either store wait this long for the write lock unless ``$KLINEAGE_LOCK_TIMEOUT_S`` says otherwise.
LOCK_TIMEOUT_ENV = "KLINEAGE_LOCK_TIMEOUT_S"
DEFAULT_LOCK_TIMEOUT_S = 120.0


def lock_timeout_from_env() -> float:
    """How long a writer waits for a store's write lock: ``$KLINEAGE_LOCK_TIMEOUT_S`` seconds, else
    ``DEFAULT_LOCK_TIMEOUT_S``; StoreError for a value that is not a number of seconds >= 0."""
    text = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise StoreError(f"${LOCK_TIMEOUT_ENV}={text!r}: expected a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise StoreError(f"${LOCK_TIMEOUT_ENV}={text!r}: expected a number of seconds >= 0")
    return value
