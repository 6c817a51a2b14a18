"""The embedded store: the ``GraphStore`` protocol on networkx, persisted durably in one file.

Layout of the data folder::

    graph.jsonl   the whole graph, JSON lines: a header, then one line per node and relationship
    .lock         an empty file that writers lock with fcntl.flock (shared between processes)

The header is ``{"format": "klineage.embedded-store", "version": 1, "generation": g, "nodes": n,
"relationships": m}``; node lines are ``["N", label, id, props]`` and relationship lines ``["R",
type, source, target, props]``. Lists of 16 or more floats (embeddings) are stored compactly as
``{"$f32": base64}`` (or ``"$f64"`` when a value is not exactly a float32), and read back as the
same Python floats.

Durability and concurrency:

* a write goes to a temporary file in the same folder, is fsync'ed, then ``os.replace``'d over
  ``graph.jsonl`` (and the folder is fsync'ed): a process killed at any moment leaves either the
  previous file or the new one, never a torn one;
* writers take an exclusive ``flock`` on ``.lock``, then reload the file if another process
  replaced it since this one last read it, validate the batch against that newest state and
  write: two writers at once never lose each other's batches;
* a read-merge-write (an ingest merging evidence into stored skills) holds the lock across all of
  it with ``exclusive()``: its reads see the newest state and nobody writes until it is done, so two
  ingests at once never lose each other's merged evidence;
* a writer waits for the lock at most ``lock_timeout_s`` seconds (``KLINEAGE_LOCK_TIMEOUT_S``,
  default 120), then StoreError says who holds what; it never waits forever;
* readers check the file's identity (inode, mtime, size) before each read and reload when another
  process wrote a newer state.

Search support: ``vector_top_k`` is cosine similarity against a cached, normalized float32 matrix
(one numpy mat-vec per query); ``fulltext_top_k`` is BM25 (k1 = 1.2, b = 0.75) over a cached
inverted index of the properties a ``graph_spec.FULLTEXT_INDEXES`` entry names. Both caches are
rebuilt lazily after a write or a reload.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from klineage.kb.store import (
    LOCK_TIMEOUT_ENV,
    LineageView,
    ScoredNode,
    StoreError,
    lock_timeout_from_env,
    normalize_value,
)
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.graph_spec import FULLTEXT_INDEXES, LABELS, RELATIONSHIP_NAMES, allowed_relationship

FORMAT = "klineage.embedded-store"
FORMAT_VERSION = 1
STATE_FILE = "graph.jsonl"
LOCK_FILE = ".lock"
TEMP_PREFIX = ".graph.jsonl.tmp-"
PACK_MIN_FLOATS = 16
LOCK_POLL_S = 0.05
BM25_K1 = 1.2
BM25_B = 0.75

_TAGS = ("$f32", "$f64", "$esc")
_TOKEN = re.compile(r"[0-9a-z]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs: the full-text analyzer of the embedded store."""
    return _TOKEN.findall(text.lower())


# --------------------------------------------------------------------------------------------
# property values: validation, copying, compact encoding


def _hold(items: list[Any]) -> Any:
    # A list of scalars is held as a tuple (immutable, so reads hand out ``list(t)``, a fast C-level copy).
    return tuple(items) if all(type(v) not in (dict, list, tuple) for v in items) else items


def _normalize(value: Any, where: str) -> Any:
    """A fresh JSON-compatible copy of ``value`` held the embedded store's way; StoreError if not storable.

    Readers always get lists back (see ``_copy``).
    """
    return normalize_value(value, where, _hold)


_SCALARS = (str, int, float, bool, type(None))


def _copy(value: Any) -> Any:
    """A mutable deep copy of a normalized value, with lists for tuples (see ``_normalize``)."""
    kind = type(value)
    if kind is tuple:
        return list(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _copy(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else _copy(v) for v in value]
    return value


def _encode(value: Any) -> Any:
    if type(value) in (list, tuple):
        if len(value) >= PACK_MIN_FLOATS and all(type(v) is float for v in value):
            array = np.asarray(value, dtype="<f8")
            single = array.astype("<f4")
            if np.array_equal(single.astype("<f8"), array):
                return {"$f32": base64.b64encode(single.tobytes()).decode("ascii")}
            return {"$f64": base64.b64encode(array.tobytes()).decode("ascii")}
        return [_encode(v) for v in value]
    if type(value) is dict:
        encoded = {k: _encode(v) for k, v in value.items()}
        if len(value) == 1 and next(iter(value)) in _TAGS:
            return {"$esc": encoded}
        return encoded
    return value


def _decode(value: Any) -> Any:
    """The in-memory (normalized) form of an encoded value."""
    if type(value) is list:
        items = [_decode(v) for v in value]
        if all(type(v) not in (dict, list, tuple) for v in items):
            return tuple(items)
        return items
    if type(value) is dict:
        if len(value) == 1:
            tag, inner = next(iter(value.items()))
            if tag == "$f32":
                return tuple(np.frombuffer(base64.b64decode(inner), dtype="<f4").astype(np.float64).tolist())
            if tag == "$f64":
                return tuple(np.frombuffer(base64.b64decode(inner), dtype="<f8").tolist())
            if tag == "$esc":
                return {k: _decode(v) for k, v in inner.items()}
        return {k: _decode(v) for k, v in value.items()}
    return value


def _line(record: list[Any] | dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from numbers (True is not 1), as Neo4j does."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return _copy(a) == _copy(b)


# --------------------------------------------------------------------------------------------
# caches derived from the graph


@dataclass
class _VectorIndex:
    ids: list[str]
    matrix: np.ndarray  # (n, dim) float32, rows normalized


@dataclass
class _TextIndex:
    ids: list[str]
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # token -> (doc indexes, BM25 tf weights)
    idf: dict[str, float]


class EmbeddedStore:
    """A ``GraphStore`` held in memory (networkx) and persisted atomically to ``data_dir``.

    Safe to share between threads (one lock) and between processes on the same folder (file
    lock for writes, reload on change for reads).
    """

    def __init__(self, data_dir: Path | str, lock_timeout_s: float | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.lock_timeout_s = lock_timeout_s if lock_timeout_s is not None else lock_timeout_from_env()
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"embedded store: cannot create the data folder {self.data_dir}: {exc}") from exc
        self._path = self.data_dir / STATE_FILE
        self._lock_path = self.data_dir / LOCK_FILE
        self._mutex = threading.RLock()  # guards the in-memory state (readers and writers)
        self._writer = threading.RLock()  # one writer at a time in this process; held with the file lock
        self._lock_handle: Any = None
        self._lock_depth = 0
        self._closed = False
        self._reset()
        self._refresh()

    def __repr__(self) -> str:
        return f"EmbeddedStore({str(self.data_dir)!r})"

    # ---------------------------------------------------------------- state and persistence

    def _reset(self) -> None:
        self._graph = nx.MultiDiGraph()
        self._node_lines: dict[str, str] = {}
        self._rel_lines: dict[tuple[str, str, str], str] = {}
        self._generation = 0
        self._identity: tuple[int, int, int] | None = None
        self._invalidate()

    def _invalidate(self) -> None:
        self._sorted_ids: dict[str, list[str]] = {}
        self._vectors: dict[tuple[str, str, int], _VectorIndex] = {}
        self._texts: dict[str, _TextIndex] = {}
        self._counts: dict[str, int] | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")

    def _refresh(self) -> None:
        """Reload when another process replaced the file since this store last read or wrote it."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            if self._identity is not None:
                self._reset()  # the folder was emptied behind our back: it now holds an empty graph
            return
        except OSError as exc:
            raise StoreError(f"embedded store: cannot read {self._path}: {exc}") from exc
        if (st.st_ino, st.st_mtime_ns, st.st_size) != self._identity:
            self._load()

    def _load(self) -> None:
        try:
            with open(self._path, encoding="utf-8") as f:
                st = os.fstat(f.fileno())
                lines = f.read().splitlines()
        except FileNotFoundError:
            self._reset()
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"embedded store: cannot read {self._path}: {exc}") from exc
        where = str(self._path)
        try:
            header = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError as exc:
            raise StoreError(f"{where}: line 1 is not JSON ({exc.msg}); the file is not an embedded "
                             "store") from exc
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise StoreError(f"{where}: not a KLineage embedded store (expected a header with format "
                             f"{FORMAT!r})")
        version = header.get("version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise StoreError(f"{where}: format version {version!r} was written by a newer KLineage; "
                             f"this one reads version {FORMAT_VERSION}")
        graph = nx.MultiDiGraph()
        node_lines: dict[str, str] = {}
        rel_lines: dict[tuple[str, str, str], str] = {}
        for number, text in enumerate(lines[1:], start=2):
            try:
                record = json.loads(text)
                kind = record[0]
                if kind == "N":
                    _, label, node_id, props = record
                    graph.add_node(node_id, label=label, props=_decode(props))
                    node_lines[node_id] = text
                elif kind == "R":
                    _, rel_type, source, target, props = record
                    graph.add_edge(source, target, key=rel_type, props=_decode(props))
                    rel_lines[(rel_type, source, target)] = text
                else:
                    raise ValueError(f"unknown record kind {kind!r}")
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                raise StoreError(f"{where}: line {number} is not a node or relationship record "
                                 f"({exc})") from exc
        if len(node_lines) != header.get("nodes") or len(rel_lines) != header.get("relationships"):
            raise StoreError(f"{where}: the header announces {header.get('nodes')} nodes and "
                             f"{header.get('relationships')} relationships, the file holds "
                             f"{len(node_lines)} and {len(rel_lines)}: the file is truncated or corrupt")
        if any("label" not in graph.nodes[n] for n in graph.nodes):
            raise StoreError(f"{where}: a relationship points at a node the file does not hold")
        self._graph = graph
        self._node_lines = node_lines
        self._rel_lines = rel_lines
        self._generation = int(header.get("generation") or 0)
        self._identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        self._invalidate()

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """Hold the writer lock: this process's writer mutex, then the ``flock`` on ``.lock`` (re-entrant
        in the holding thread). Waits at most ``lock_timeout_s``; StoreError after that."""
        deadline = time.monotonic() + self.lock_timeout_s
        if not self._writer.acquire(timeout=max(self.lock_timeout_s, 0.001)):
            raise self._timeout_error("another thread of this process")
        try:
            if self._lock_depth == 0:
                self._lock_handle = self._acquire_flock(deadline)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    handle, self._lock_handle = self._lock_handle, None
                    handle.close()  # closing releases the flock
        finally:
            self._writer.release()

    def _acquire_flock(self, deadline: float) -> Any:
        try:
            handle = open(self._lock_path, "a+")  # noqa: SIM115 - held until the outermost block ends
        except OSError as exc:
            raise StoreError(f"embedded store: cannot open the lock file {self._lock_path}: {exc}") from exc
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.close()
                    raise self._timeout_error("another process (another `klineage ingest` or server)") from None
                time.sleep(LOCK_POLL_S)
            except OSError as exc:
                handle.close()
                raise StoreError(f"embedded store: cannot lock {self._lock_path}: {exc}") from exc

    def _timeout_error(self, holder: str) -> StoreError:
        return StoreError(f"embedded store {self.data_dir}: {holder} has held the write lock {self._lock_path} "
                          f"for over {self.lock_timeout_s:g} s (the lock time-out); nothing was written. Wait for "
                          f"it to finish and retry, or set ${LOCK_TIMEOUT_ENV} to wait longer")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the write lock for a read-merge-write: nobody else writes to this data folder until the
        block ends, and reads inside it see the newest stored state. Re-entrant; upserts inside it do not
        wait. StoreError when the lock is not had within ``lock_timeout_s``."""
        self._check_open()
        with self._file_lock():
            yield

    def _write(self, generation: int, node_lines: Mapping[str, str],
               rel_lines: Mapping[tuple[str, str, str], str]) -> tuple[int, int, int]:
        """Write the whole state to a temporary file, fsync, and atomically replace the state file."""
        for stale in self.data_dir.glob(TEMP_PREFIX + "*"):
            with contextlib.suppress(OSError):
                stale.unlink()  # left by a writer that was killed; we hold the lock, so none is live
        header = {"format": FORMAT, "version": FORMAT_VERSION, "generation": generation,
                  "nodes": len(node_lines), "relationships": len(rel_lines)}
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=self.data_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(_line(header) + "\n")
                for node_id in sorted(node_lines):
                    f.write(node_lines[node_id])
                    f.write("\n")
                for key in sorted(rel_lines):
                    f.write(rel_lines[key])
                    f.write("\n")
                f.flush()
                os.fsync(f.fileno())
                st = os.fstat(f.fileno())
            os.replace(tmp, self._path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise StoreError(f"embedded store: cannot write {self._path}: {exc}") from exc
            raise
        dir_fd = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def state_token(self) -> tuple[int, tuple[int, int, int] | None]:
        """A value that changes whenever the stored graph may have changed (generation and file
        identity): callers cache derived data keyed on it."""
        with self._mutex:
            self._check_open()
            self._refresh()
            return (self._generation, self._identity)

    # ---------------------------------------------------------------- writes

    def upsert(self, batch: GraphBatch) -> None:
        """Write all nodes and relationships of ``batch`` atomically (all or nothing); idempotent.

        Nodes merge by id (the batch's properties replace the stored ones); relationships merge by
        (type, source, target). The whole batch is validated first against the newest stored state:
        labels and relationship types known, endpoints in the batch or the store, the relationship
        allowed between those labels, an id never changing label, properties storable. On any
        problem StoreError says which record and why, and nothing is written. A batch that changes
        nothing writes nothing.
        """
        if not isinstance(batch, GraphBatch):
            raise StoreError(f"upsert expects a GraphBatch, got {type(batch).__name__}")
        self._check_open()
        with self._file_lock(), self._mutex:
            self._refresh()
            nodes, rels = self._plan(batch)
            if not nodes and not rels:
                return
            node_lines = {**self._node_lines, **{nid: line for nid, (_, _, line) in nodes.items()}}
            rel_lines = {**self._rel_lines, **{key: line for key, (_, line) in rels.items()}}
            generation = self._generation + 1
            identity = self._write(generation, node_lines, rel_lines)
            for node_id, (label, props, _) in nodes.items():
                self._graph.add_node(node_id, label=label, props=props)
            for (rel_type, source, target), (props, _) in rels.items():
                self._graph.add_edge(source, target, key=rel_type, props=props)
            self._node_lines, self._rel_lines = node_lines, rel_lines
            self._generation, self._identity = generation, identity
            self._invalidate()

    def _plan(self, batch: GraphBatch) -> tuple[dict[str, tuple[str, Any, str]],
                                                 dict[tuple[str, str, str], tuple[Any, str]]]:
        """Validate ``batch`` against the current state; return only the records that change."""
        labels: dict[str, str] = {}
        staged: dict[str, tuple[str, Any]] = {}
        for node in batch.nodes:
            if not isinstance(node, Node):
                raise StoreError(f"batch holds {type(node).__name__} where a Node was expected")
            if node.label not in LABELS:
                raise StoreError(f"node {node.id!r}: unknown label {node.label!r}")
            stored = self._label(node.id)
            if stored is not None and stored != node.label:
                raise StoreError(f"node {node.id!r} is a {stored} in the store; the batch writes it as a "
                                 f"{node.label}")
            if labels.get(node.id, node.label) != node.label:
                raise StoreError(f"node {node.id!r} appears in the batch as both {labels[node.id]} and "
                                 f"{node.label}")
            labels[node.id] = node.label
            staged[node.id] = (node.label, _normalize(dict(node.props), f"{node.label} {node.id!r} property"))
        rel_staged: dict[tuple[str, str, str], Any] = {}
        for rel in batch.relationships:
            if not isinstance(rel, Relationship):
                raise StoreError(f"batch holds {type(rel).__name__} where a Relationship was expected")
            what = f"relationship ({rel.source!r})-[:{rel.type}]->({rel.target!r})"
            if rel.type not in RELATIONSHIP_NAMES:
                raise StoreError(f"{what}: unknown relationship type {rel.type!r}")
            ends = []
            for role, node_id in (("source", rel.source), ("target", rel.target)):
                label = labels.get(node_id) or self._label(node_id)
                if label is None:
                    raise StoreError(f"{what}: the {role} node {node_id!r} is neither in the batch nor in "
                                     "the store; nothing was written")
                ends.append(label)
            if not allowed_relationship(rel.type, ends[0], ends[1]):
                raise StoreError(f"{what}: (:{ends[0]})-[:{rel.type}]->(:{ends[1]}) is not in the graph "
                                 "model (graph_spec.RELATIONSHIPS); nothing was written")
            rel_staged[rel.key] = _normalize(dict(rel.props), f"{what} property")
        nodes: dict[str, tuple[str, Any, str]] = {}
        for node_id, (label, props) in staged.items():
            line = _line(["N", label, node_id, _encode(props)])
            if self._node_lines.get(node_id) != line:
                nodes[node_id] = (label, props, line)
        rels: dict[tuple[str, str, str], tuple[Any, str]] = {}
        for key, props in rel_staged.items():
            line = _line(["R", *key, _encode(props)])
            if self._rel_lines.get(key) != line:
                rels[key] = (props, line)
        return nodes, rels

    # ---------------------------------------------------------------- reads

    def _label(self, node_id: str) -> str | None:
        data = self._graph.nodes.get(node_id)
        return None if data is None else data.get("label")

    def _node(self, node_id: str) -> Node:
        data = self._graph.nodes[node_id]
        return Node(data["label"], node_id, _copy(data["props"]))

    def _ids(self, label: str) -> list[str]:
        ids = self._sorted_ids.get(label)
        if ids is None:
            ids = sorted(n for n, d in self._graph.nodes(data=True) if d.get("label") == label)
            self._sorted_ids[label] = ids
        return ids

    @staticmethod
    def _check_label(label: str) -> None:
        if label not in LABELS:
            raise StoreError(f"unknown label {label!r}; expected one of {', '.join(LABELS)}")

    def unlink(self, relationships: Sequence[tuple[str, str, str]]) -> int:
        """Remove the (type, source, target) relationships in one atomic write; missing ones are ignored."""
        wanted = {(str(t), str(a), str(b)) for t, a, b in relationships}
        unknown = sorted(t for t, _, _ in wanted if t not in RELATIONSHIP_NAMES)
        if unknown:
            raise StoreError(f"unknown relationship type {unknown[0]!r}")
        self._check_open()
        with self._file_lock(), self._mutex:
            self._refresh()
            present = [key for key in wanted if key in self._rel_lines]
            if not present:
                return 0
            rel_lines = {k: v for k, v in self._rel_lines.items() if k not in set(present)}
            generation = self._generation + 1
            identity = self._write(generation, self._node_lines, rel_lines)
            for rel_type, source, target in present:
                self._graph.remove_edge(source, target, key=rel_type)
            self._rel_lines = rel_lines
            self._generation, self._identity = generation, identity
            self._invalidate()
            return len(present)

    def get(self, label: str, node_id: str) -> Node | None:
        """The node with this label and id, or None."""
        self._check_label(label)
        with self._mutex:
            self._check_open()
            self._refresh()
            return self._node(node_id) if self._label(node_id) == label else None

    def get_many(self, label: str, node_ids: Sequence[str]) -> list[Node | None]:
        """Nodes for ``node_ids`` in the same order (None where missing or of another label)."""
        self._check_label(label)
        with self._mutex:
            self._check_open()
            self._refresh()
            return [self._node(i) if self._label(i) == label else None for i in node_ids]

    def find(self, label: str, where: Mapping[str, Any] | None = None, limit: int | None = None,
             after: str | None = None) -> list[Node]:
        """Nodes of ``label`` whose properties equal ``where`` (booleans never equal numbers), ordered by
        id, ids > ``after``, at most ``limit``."""
        self._check_label(label)
        if limit is not None and limit < 0:
            raise StoreError(f"find: limit must be >= 0, got {limit}")
        conditions = list((where or {}).items())
        with self._mutex:
            self._check_open()
            self._refresh()
            ids = self._ids(label)
            start = bisect.bisect_right(ids, after) if after is not None else 0
            out: list[Node] = []
            for node_id in ids[start:]:
                if limit is not None and len(out) >= limit:
                    break
                props = self._graph.nodes[node_id]["props"]
                if all(key in props and _same(props[key], value) for key, value in conditions):
                    out.append(self._node(node_id))
            return out

    def neighbors(self, node_ids: Sequence[str], rel_type: str, direction: str = "out"
                  ) -> dict[str, list[tuple[Relationship, Node]]]:
        """For each id, its ``rel_type`` relationships (``out``: id is the source; ``in``: the target)
        with the node at the other end, ordered by that node's id; unknown ids map to []."""
        if rel_type not in RELATIONSHIP_NAMES:
            raise StoreError(f"unknown relationship type {rel_type!r}")
        if direction not in ("out", "in"):
            raise StoreError(f"direction must be 'out' or 'in', got {direction!r}")
        outgoing = direction == "out"
        with self._mutex:
            self._check_open()
            self._refresh()
            adjacency = self._graph.succ if outgoing else self._graph.pred
            result: dict[str, list[tuple[Relationship, Node]]] = {}
            for node_id in node_ids:
                if node_id in result:
                    continue
                found: list[tuple[Relationship, Node]] = []
                if node_id in self._graph:
                    for other in sorted(o for o, keys in adjacency[node_id].items() if rel_type in keys):
                        props = _copy(adjacency[node_id][other][rel_type]["props"])
                        rel = (Relationship(rel_type, node_id, other, props) if outgoing
                               else Relationship(rel_type, other, node_id, props))
                        found.append((rel, self._node(other)))
                result[node_id] = found
            return result

    def lineage(self, lineage_id: str) -> LineageView | None:
        """The lineage, its workload, starting kernel and steps ordered by HAS_STEP index."""
        with self._mutex:
            lineage = self.get("Lineage", lineage_id)
            if lineage is None:
                return None
            workload = self.neighbors([lineage_id], "OF")[lineage_id]
            start = self.neighbors([lineage_id], "STARTS_AT")[lineage_id]
            steps = self.neighbors([lineage_id], "HAS_STEP")[lineage_id]

            def order(item: tuple[Relationship, Node]) -> tuple[int, str]:
                rel, node = item
                index = rel.props.get("index", node.props.get("index"))
                return (index if isinstance(index, int) else 2**62, node.id)

            return LineageView(lineage, workload[0][1] if workload else None, start[0][1] if start else None,
                               tuple(node for _, node in sorted(steps, key=order)))

    def vector_top_k(self, label: str, prop: str, vector: Sequence[float], k: int) -> list[ScoredNode]:
        """The ``k`` nodes whose ``prop`` vector is most cosine-similar to ``vector`` (score = cosine),
        best first, ties by id. Nodes without a vector of the query's dimension are not candidates."""
        self._check_label(label)
        query = np.asarray(vector, dtype=np.float32)
        if query.ndim != 1 or query.size == 0:
            raise StoreError(f"vector_top_k: expected a non-empty 1-D vector, got shape {query.shape}")
        norm = float(np.linalg.norm(query))
        if not math.isfinite(norm) or norm == 0.0:
            raise StoreError("vector_top_k: the query vector has zero or non-finite norm")
        if k <= 0:
            return []
        with self._mutex:
            self._check_open()
            self._refresh()
            index = self._vector_index(label, prop, int(query.size))
            if not index.ids:
                return []
            # einsum runs single-threaded C loops: a multi-threaded BLAS gemv on 2 busy cores was 10x
            # slower here (16 ms vs 1.4 ms at 10,000 x 384), and the product is memory-bound anyway
            scores = np.einsum("ij,j->i", index.matrix, query / norm)
            return [ScoredNode(self._node(index.ids[i]), float(scores[i])) for i in _top(scores, k)]

    def _vector_index(self, label: str, prop: str, dim: int) -> _VectorIndex:
        key = (label, prop, dim)
        index = self._vectors.get(key)
        if index is None:
            ids: list[str] = []
            rows: list[Any] = []
            for node_id in self._ids(label):
                value = self._graph.nodes[node_id]["props"].get(prop)
                if isinstance(value, (list, tuple)) and len(value) == dim:
                    ids.append(node_id)
                    rows.append(value)
            matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), dim)
            norms = np.linalg.norm(matrix, axis=1)
            keep = norms > 0
            matrix = matrix[keep] / norms[keep, None]
            index = _VectorIndex([i for i, k in zip(ids, keep, strict=True) if k],
                                 np.ascontiguousarray(matrix, dtype=np.float32))
            self._vectors[key] = index
        return index

    def fulltext_top_k(self, index: str, text: str, k: int) -> list[ScoredNode]:
        """The ``k`` best BM25 matches of ``text`` in the named full-text index, best first, ties by id;
        only nodes sharing at least one token with ``text`` are returned."""
        spec = next((i for i in FULLTEXT_INDEXES if i.name == index), None)
        if spec is None:
            raise StoreError(f"unknown full-text index {index!r}; expected one of "
                             f"{', '.join(i.name for i in FULLTEXT_INDEXES)}")
        tokens = set(tokenize(text or ""))
        if k <= 0 or not tokens:
            return []
        with self._mutex:
            self._check_open()
            self._refresh()
            built = self._text_index(spec.name, spec.label, spec.properties)
            scores = np.zeros(len(built.ids), dtype=np.float64)
            hit = False
            for token in tokens:
                posting = built.postings.get(token)
                if posting is not None:
                    docs, weights = posting
                    scores[docs] += built.idf[token] * weights
                    hit = True
            if not hit:
                return []
            matched = np.flatnonzero(scores > 0)
            order = matched[_top(scores[matched], k)]
            return [ScoredNode(self._node(built.ids[i]), float(scores[i])) for i in order]

    def _text_index(self, name: str, label: str, properties: Sequence[str]) -> _TextIndex:
        built = self._texts.get(name)
        if built is None:
            ids = self._ids(label)
            counts: list[Counter[str]] = []
            for node_id in ids:
                props = self._graph.nodes[node_id]["props"]
                text = " ".join(str(props[p]) for p in properties if isinstance(props.get(p), str))
                counts.append(Counter(tokenize(text)))
            lengths = np.asarray([sum(c.values()) for c in counts], dtype=np.float64)
            avg = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
            norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / avg)
            gathered: dict[str, tuple[list[int], list[int]]] = {}
            for doc, counter in enumerate(counts):
                for token, tf in counter.items():
                    docs, tfs = gathered.setdefault(token, ([], []))
                    docs.append(doc)
                    tfs.append(tf)
            postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            idf: dict[str, float] = {}
            n_docs = len(ids)
            for token, (docs, tfs) in gathered.items():
                d = np.asarray(docs, dtype=np.int64)
                freqs = np.asarray(tfs, dtype=np.float64)
                postings[token] = (d, freqs * (BM25_K1 + 1) / (freqs + norm[d]))
                idf[token] = math.log(1 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5))
            built = _TextIndex(list(ids), postings, idf)
            self._texts[name] = built
        return built

    def counts(self) -> dict[str, int]:
        """Nodes per label (every label, zeros included) and relationships per type (keys ``:TYPE``)."""
        with self._mutex:
            self._check_open()
            self._refresh()
            if self._counts is None:
                counts = dict.fromkeys(LABELS, 0)
                counts.update(Counter(d["label"] for _, d in self._graph.nodes(data=True)))
                rels = dict.fromkeys((f":{t}" for t in sorted(RELATIONSHIP_NAMES)), 0)
                rels.update(Counter(f":{key}" for _, _, key in self._graph.edges(keys=True)))
                self._counts = {**counts, **rels}
            return dict(self._counts)

    def export(self) -> GraphBatch:
        """Every node and relationship, ordered by (label, id) and (type, source, target)."""
        with self._mutex:
            self._check_open()
            self._refresh()
            nodes = sorted((d["label"], n) for n, d in self._graph.nodes(data=True))
            rels = sorted((key, s, t) for s, t, key in self._graph.edges(keys=True))
            return GraphBatch(
                tuple(self._node(n) for _, n in nodes),
                tuple(Relationship(key, s, t, _copy(self._graph.succ[s][t][key]["props"]))
                      for key, s, t in rels),
            )

    def close(self) -> None:
        """Forget the in-memory graph; later calls raise StoreError. The data on disk stays."""
        with self._mutex:
            self._closed = True
            self._reset()


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indexes of the ``k`` largest scores, best first; equal scores in index (= id) order."""
    n = scores.shape[0]
    candidates = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order]
