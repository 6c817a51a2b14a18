"""The Neo4j store: the ``GraphStore`` protocol on the official ``neo4j`` driver (Neo4j 5.13 or newer).

Configuration (``Neo4jStore.from_env``): ``NEO4J_URI`` (default ``bolt://127.0.0.1:7687``),
``NEO4J_USER`` (``neo4j``), ``NEO4J_PASSWORD`` (``klineage-test``, the password ``deploy/neo4j/start``
gives a local server), ``NEO4J_DATABASE`` (``neo4j``). The database name goes to
``driver.session(database=...)``, never into a query.

Schema, from ``klineage.schema.graph_spec`` and created one statement at a time with ``IF NOT EXISTS``
when the store opens: a uniqueness constraint on every label's ``id``, the vector index (cosine, 384
dimensions) on ``Skill.embedding``, the full-text index, the range indexes; then
``db.awaitIndexes``. Every index is then checked to be present and ONLINE.

How records map onto Neo4j:

* a node is ``(:Label {id, ...props})``; a relationship ``(a)-[:TYPE {...props}]->(b)``, at most one
  of a type between two nodes (``MERGE``);
* a node holds its caller's properties and nothing else, so that Neo4j Browser shows what a person
  wants to read: a ``None`` value is absent (Neo4j's own meaning of null), values Neo4j cannot hold
  (maps, lists of maps or of mixed types, integers beyond 64 bits) are canonical JSON strings;
* what the store needs to read a node back exactly lives on a companion node
  ``(:_KLineageProps {id})`` with the same id (no relationship, so nothing draws it next to the
  data): ``json`` (the names holding JSON), ``nulls`` (the names whose value is None), ``sig`` (a
  type-exact fingerprint: an unchanged node is not rewritten) and ``ft_<index>`` (below);
* the full-text index of ``graph_spec`` (e.g. ``skill_text`` over name, intent and anchor text) is
  built over the companion's derived property ``ft_<index>`` that holds the lower-cased alphanumeric
  tokens of those properties joined by spaces: the same analyzer as the embedded store, so both rank
  with BM25 (k1 = 1.2, b = 0.75) over the same tokens. Scores are scaled by ``k1 + 1`` to match the
  embedded store's BM25 formula (Lucene omits that constant); Lucene quantizes document lengths, so
  scores agree closely and rankings agree apart from near-ties;
* a relationship keeps the older in-place encoding (the graph model's relationships hold plain
  values, so Browser sees none of it): JSON values, ``None`` included, listed under ``__json``;
* a caller's property named ``id`` or ``__...`` is stored as ``__u<name>`` and returned under its name;
* a database written by an older KLineage (``__json``/``__sig``/``__ft_*`` on the nodes) is rewritten
  to this layout when the store opens (``ensure_schema``).

Writes: ``upsert`` runs in ONE transaction (``session.execute_write``, which retries transient
errors such as deadlocks and leader switches): it reads the labels of every id the batch touches,
validates the batch against them (an id never changes label; a relationship's endpoints exist, in
the batch or the store, and the graph model allows it), then writes nodes with ``UNWIND $rows AS
row MERGE (n:Label {id: row.id}) SET n = row.props`` per label and relationships with ``UNWIND ...
MATCH ... MERGE`` per type, checking that every relationship row found its endpoints. Any failure
raises StoreError inside the transaction, so it rolls back: all of a batch or nothing.

``state_token`` (epoch, generation) comes from a ``_KLineageMeta`` node that every write bumps, so
``KnowledgeBase`` can cache what it derives from the store between writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from klineage.kb.store import (
    LOCK_TIMEOUT_ENV,
    LineageView,
    ScoredNode,
    StoreError,
    lock_timeout_from_env,
    normalize_value,
)
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.graph_spec import (
    FULLTEXT_INDEXES,
    LABELS,
    RANGE_INDEXES,
    RELATIONSHIP_NAMES,
    RELATIONSHIPS,
    UNIQUE_ID_CONSTRAINTS,
    VECTOR_INDEXES,
    FulltextIndex,
    allowed_relationship,
)

DEFAULT_URI = "bolt://127.0.0.1:7687"
DEFAULT_USER = "neo4j"
DEFAULT_PASSWORD = "klineage-test"
DEFAULT_DATABASE = "neo4j"
MIN_VERSION = (5, 13)
ROWS_PER_STATEMENT = 2000
BM25_K1 = 1.2

JSON_KEYS = "__json"
USER_PREFIX = "__u"
HEX_PREFIX = "__x"  # a caller's name Neo4j cannot hold as a token (NUL bytes): stored hex-encoded
SIGNATURE = "__sig"  # legacy layout (on the node itself): migrated by ensure_schema
PROPS_LABEL = "_KLineageProps"  # the companion node of a data node: what reads need, hidden from Browser
FT_PROPERTY = "ft_"  # the companion's full-text property prefix
META_LABEL = "_KLineageMeta"
#: The write lock of ``Neo4jStore.exclusive``: a lease on one meta node, renewed while held.
LOCK_ID = "write-lock"
LOCK_LEASE_S = 60.0
META_ID = "state"
QUANTIZATION_OFF = "`vector.quantization.enabled`: false"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_TOKEN = re.compile(r"[0-9a-z]+")
_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/]|&&|\|\|)')
_LUCENE_OPERATORS = frozenset({"AND", "OR", "NOT", "TO"})

T = TypeVar("T")

# relationship type -> (labels its source may have, labels its target may have), from graph_spec
_ENDPOINT_LABELS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (tuple(sorted({r.source for r in RELATIONSHIPS if r.name == name})),
           tuple(sorted({r.target for r in RELATIONSHIPS if r.name == name})))
    for name in RELATIONSHIP_NAMES
}


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs: the full-text analyzer both stores share."""
    return _TOKEN.findall(text.lower())


def escape_lucene(text: str) -> str:
    """``text`` as literal Lucene query terms: special characters backslash-escaped, and the
    bare words AND, OR, NOT and TO lower-cased so the query parser does not read them as operators."""
    escaped = _LUCENE_SPECIAL.sub(lambda m: "".join("\\" + ch for ch in m.group(0)), text)
    return " ".join(w.lower() if w in _LUCENE_OPERATORS else w for w in escaped.split())


def _ident(name: str) -> str:
    """A Cypher identifier in backticks (backticks inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


# --------------------------------------------------------------------------------------------
# property values: validation and the JSON encoding of what Neo4j cannot hold


def _normalize(value: Any, where: str) -> Any:
    """A fresh JSON-compatible copy of ``value`` (tuples become lists); StoreError if it is not one."""
    return normalize_value(value, where)


def _scalar_kind(value: Any) -> type | None:
    """The Neo4j property kind of a scalar (bool, int, float, str), or None when Neo4j cannot hold it."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, int):
        return int if INT64_MIN <= value <= INT64_MAX else None
    if isinstance(value, (float, str)):
        return type(value)
    return None


def _native(value: Any) -> bool:
    """True when Neo4j stores ``value`` as it is: a scalar, or a list of scalars of one kind."""
    if isinstance(value, list):
        kinds = {_scalar_kind(v) for v in value}
        return len(kinds) <= 1 and None not in kinds
    return _scalar_kind(value) is not None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def stored_key(key: str) -> str:
    """The Neo4j property name of a caller's property: itself, except ``id`` (the node id's place)
    and names starting with ``__`` (the store's own), which get the prefix ``__u``."""
    if "\x00" in key:
        return HEX_PREFIX + key.encode("utf-8").hex()
    return USER_PREFIX + key if key == "id" or key.startswith("__") else key


def encode_props(props: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Properties as Neo4j holds them: native values as they are, the others as canonical JSON with
    their (stored) names listed under ``__json``. StoreError for unstorable names and values."""
    out: dict[str, Any] = {}
    json_keys: list[str] = []
    for key, value in props.items():
        if not isinstance(key, str) or not key:
            raise StoreError(f"{where}: property name {key!r} is not a non-empty string")
        name = stored_key(key)
        normalized = _normalize(value, f"{where} property {key!r}")
        if _native(normalized):
            out[name] = normalized
        else:
            out[name] = _canonical(normalized)
            json_keys.append(name)
    if json_keys:
        out[JSON_KEYS] = sorted(json_keys)
    return out


def encode_node_props(props: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """A node's properties as Neo4j holds them, with the bookkeeping its companion node keeps:
    (stored properties without the None-valued ones, names holding JSON, names whose value is None)."""
    encoded = encode_props(props, where)
    json_keys = list(encoded.pop(JSON_KEYS, ()))
    nulls = sorted(name for name in json_keys if encoded[name] == "null")
    for name in nulls:
        del encoded[name]
    return encoded, [k for k in json_keys if k not in nulls], nulls


def decode_node_props(wrapped: Mapping[str, Any]) -> dict[str, Any]:
    """A node's caller properties from ``{p: properties(n), m: [companion {json, nulls}]}`` (``_props``);
    a node of the legacy layout (no companion, ``__json`` on itself) decodes too."""
    raw = wrapped["p"]
    meta = (wrapped.get("m") or [None])[0]
    if not meta:
        return decode_props(raw)
    decoded = decode_props({**raw, JSON_KEYS: list(meta.get("json") or ())})
    for name in meta.get("nulls") or ():
        decoded.update(decode_props({name: None}))
    return decoded


def _props(var: str) -> str:
    """A Cypher expression of node ``var``'s properties with its companion's bookkeeping, for
    ``decode_node_props``."""
    return (f"{{p: properties({var}), m: COLLECT {{ MATCH (kl_m:{PROPS_LABEL} {{id: {var}.id}}) "
            "RETURN kl_m {.json, .nulls} }}")


def _meta_list(var: str, field: str) -> str:
    """A Cypher expression: the companion's list ``field`` of node ``var`` ([] when it has none)."""
    return f"coalesce(head(COLLECT {{ MATCH (kl_m:{PROPS_LABEL} {{id: {var}.id}}) RETURN kl_m.{field} }}), [])"


def decode_props(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The properties a caller wrote, from what Neo4j returns (without ``id`` and the store's own)."""
    json_keys = set(raw.get(JSON_KEYS) or ())
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name.startswith(USER_PREFIX):
            key = name[len(USER_PREFIX):]
        elif name.startswith(HEX_PREFIX):
            key = bytes.fromhex(name[len(HEX_PREFIX):]).decode("utf-8")
        elif name == "id" or name.startswith("__"):
            continue
        else:
            key = name
        out[key] = json.loads(value) if name in json_keys and isinstance(value, str) else value
    return out


def _tagged(value: Any) -> Any:
    """``value`` with every scalar tagged by its type (1, 1.0, True and -0.0 all differ)."""
    if isinstance(value, dict):
        return {k: _tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    return [type(value).__name__, repr(value) if isinstance(value, float) else value]


def _signature(props: Mapping[str, Any]) -> str:
    """A type-exact fingerprint of stored properties: equal signatures mean nothing to write."""
    text = json.dumps(_tagged(dict(props)), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _fulltext_value(spec: FulltextIndex, props: Mapping[str, Any]) -> str:
    text = " ".join(str(props[p]) for p in spec.properties if isinstance(props.get(p), str))
    return " ".join(tokenize(text))


def _where_clause(where: Mapping[str, Any], params: dict[str, Any]) -> tuple[list[str], bool]:
    """Cypher conditions for ``find``'s equality filter; False when nothing can match."""
    clauses: list[str] = []
    for i, (key, value) in enumerate(where.items()):
        if not isinstance(key, str) or not key:
            return [], False
        normalized = _normalize(value, f"find: where {key!r}")
        name = f"w{i}"
        key = stored_key(key)
        prop = f"n.{_ident(key)}"
        if normalized is None:
            clauses.append(f"{prop} IS NULL AND $k{i} IN {_meta_list('n', 'nulls')}")
        elif _native(normalized):  # Cypher never equals booleans and numbers, as the protocol wants
            params[name] = normalized
            clauses.append(f"{prop} = ${name} AND NOT $k{i} IN {_meta_list('n', 'json')}")
        else:
            params[name] = _canonical(normalized)
            clauses.append(f"{prop} = ${name} AND $k{i} IN {_meta_list('n', 'json')}")
        params[f"k{i}"] = key
    return clauses, True


# --------------------------------------------------------------------------------------------
# the store


class Neo4jStore:
    """A ``GraphStore`` in a Neo4j 5.13+ database (Community or Enterprise).

    Thread-safe: the driver pools connections and each call uses its own session. Creating the store
    connects, checks the server version and creates the schema (idempotent).
    """

    def __init__(self, uri: str = DEFAULT_URI, user: str = DEFAULT_USER, password: str = DEFAULT_PASSWORD,
                 database: str = DEFAULT_DATABASE, *, ensure_schema: bool = True,
                 connection_timeout: float = 10.0, max_retry_time: float = 30.0) -> None:
        try:
            import neo4j
        except ImportError as exc:  # pragma: no cover - neo4j is a dependency
            raise StoreError(f"the neo4j driver is not installed ({exc}); pip install neo4j") from exc
        self.uri = uri
        self.user = user
        self.database = database
        self._neo4j = neo4j
        self._closed = False
        self.lock_timeout_s = lock_timeout_from_env()
        self._writer = threading.RLock()  # the holding thread re-enters; other threads of this process wait
        self._lock_depth = 0
        self._lock_owner = ""
        self._lock_renewal: threading.Event | None = None
        try:
            self._driver = neo4j.GraphDatabase.driver(
                uri, auth=(user, password), connection_timeout=connection_timeout,
                max_transaction_retry_time=max_retry_time, connection_acquisition_timeout=60.0,
                notifications_min_severity="OFF")
        except (ValueError, neo4j.exceptions.ConfigurationError) as exc:
            raise StoreError(f"NEO4J_URI={uri!r} is not a Neo4j URI ({exc}); expected e.g. "
                             f"{DEFAULT_URI} or neo4j://host:7687") from exc
        try:
            self._driver.verify_connectivity()
            agent = self._driver.get_server_info().agent
        except Exception as exc:
            self._driver.close()
            raise self._translate(exc, "connect") from exc
        self.server_version = self._check_version(agent)
        if ensure_schema:
            self.ensure_schema()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Neo4jStore:
        """A store configured by ``NEO4J_URI``, ``NEO4J_USER``, ``NEO4J_PASSWORD``, ``NEO4J_DATABASE``."""
        env = os.environ if environ is None else environ
        return cls(env.get("NEO4J_URI") or DEFAULT_URI, env.get("NEO4J_USER") or DEFAULT_USER,
                   env.get("NEO4J_PASSWORD") or DEFAULT_PASSWORD,
                   env.get("NEO4J_DATABASE") or DEFAULT_DATABASE, **kwargs)

    def __repr__(self) -> str:
        return f"Neo4jStore({self.uri!r}, database={self.database!r})"

    # ---------------------------------------------------------------- connection and errors

    @staticmethod
    def _check_version(agent: str) -> tuple[int, ...]:
        match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", agent or "")
        if match is None:
            raise StoreError(f"cannot tell the Neo4j server's version from its agent string {agent!r}")
        version = tuple(int(x) for x in match.groups() if x is not None)
        if version[:2] < MIN_VERSION:
            wanted = ".".join(str(x) for x in MIN_VERSION)
            raise StoreError(f"the server runs {agent}; KLineage needs Neo4j {wanted} or newer (vector "
                             "indexes created with CREATE VECTOR INDEX). Use Neo4j 5.26 LTS: "
                             "deploy/neo4j/start or `docker compose up neo4j`.")
        return version

    def _translate(self, exc: Exception, what: str) -> StoreError:
        """A StoreError that says what went wrong and what to do about it."""
        ex = self._neo4j.exceptions
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, ex.AuthError):
            return StoreError(f"Neo4j at {self.uri} refused the credentials of user {self.user!r} "
                              f"({exc.message}); check NEO4J_USER and NEO4J_PASSWORD")
        if isinstance(exc, (ex.ServiceUnavailable, ex.SessionExpired)):
            reason = " ".join(str(exc).split())
            return StoreError(f"cannot reach Neo4j at {self.uri} ({reason}); start one with `make neo4j` "
                              "(deploy/neo4j/start) or `docker compose up neo4j`, or set NEO4J_URI")
        if isinstance(exc, ex.Neo4jError):
            code = exc.code or ""
            message = exc.message or str(exc)
            if code.endswith("DatabaseNotFound"):
                return StoreError(f"Neo4j at {self.uri} has no database {self.database!r} ({message}); set "
                                  "NEO4J_DATABASE (Community edition has only `neo4j`)")
            if "no such" in message and "index" in message:
                return StoreError(f"{what}: a KLineage index is missing in database {self.database!r} "
                                  f"({message}); opening a Neo4jStore creates it "
                                  "(Neo4jStore.ensure_schema())")
            return StoreError(f"Neo4j {what} failed: {code}: {message}")
        if isinstance(exc, ex.DriverError):
            return StoreError(f"Neo4j {what} failed: {type(exc).__name__}: {exc}")
        return StoreError(f"Neo4j {what} failed: {type(exc).__name__}: {exc}")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")

    def _read(self, work: Callable[[Any], T], what: str) -> T:
        self._check_open()
        try:
            with self._driver.session(database=self.database) as session:
                return session.execute_read(work)
        except StoreError:
            raise
        except Exception as exc:
            raise self._translate(exc, what) from exc

    def _write(self, work: Callable[[Any], T], what: str) -> T:
        self._check_open()
        try:
            with self._driver.session(database=self.database) as session:
                return session.execute_write(work)
        except StoreError:
            raise
        except Exception as exc:
            raise self._translate(exc, what) from exc

    # ---------------------------------------------------------------- the write lock

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the write lock for a read-merge-write, as ``EmbeddedStore.exclusive`` does: other writers
        that take it (other processes and hosts included) wait until the block ends. Re-entrant in the
        holding thread. The lock is a lease on one meta node (``LOCK_LEASE_S``), renewed while held, so a
        holder that dies frees it within a lease; a writer waits at most ``lock_timeout_s``
        (``$KLINEAGE_LOCK_TIMEOUT_S``, default 120) and then gets a StoreError naming the holder."""
        self._check_open()
        deadline = time.monotonic() + self.lock_timeout_s
        if not self._writer.acquire(timeout=max(self.lock_timeout_s, 0.001)):
            raise StoreError(f"{self!r}: another thread of this process held the write lock for over "
                             f"{self.lock_timeout_s:g} s; nothing was written")
        try:
            if self._lock_depth == 0:
                self._take_lease(deadline)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    self._drop_lease()
        finally:
            self._writer.release()

    def _take_lease(self, deadline: float) -> None:
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

        def grab(tx: Any) -> tuple[bool, str, float]:
            record = tx.run(
                f"MERGE (m:{META_LABEL} {{id: $id}}) "
                "WITH m, (m.lock_owner IS NULL OR m.lock_expires < $now) AS free "
                "SET m.lock_owner = CASE WHEN free THEN $owner ELSE m.lock_owner END, "
                "    m.lock_expires = CASE WHEN free THEN $now + $lease ELSE m.lock_expires END, "
                "    m.lock_since = CASE WHEN free THEN $now ELSE m.lock_since END "
                "RETURN free, m.lock_owner AS holder, m.lock_since AS since",
                id=LOCK_ID, now=time.time(), owner=owner, lease=LOCK_LEASE_S).single()
            return bool(record["free"]), str(record["holder"]), float(record["since"] or 0.0)

        while True:
            free, holder, since = self._write(grab, "take the write lock")
            if free:
                break
            if time.monotonic() >= deadline:
                raise StoreError(f"{self!r}: {holder} has held the write lock for {time.time() - since:.0f} s, "
                                 f"over the lock time-out of {self.lock_timeout_s:g} s; nothing was written. Wait "
                                 f"for it to finish and retry, or set ${LOCK_TIMEOUT_ENV} to wait longer")
            time.sleep(0.05)
        self._lock_owner = owner
        stop = threading.Event()
        self._lock_renewal = stop

        def renew() -> None:
            while not stop.wait(LOCK_LEASE_S / 3):
                with contextlib.suppress(StoreError):
                    self._write(lambda tx: tx.run(
                        f"MATCH (m:{META_LABEL} {{id: $id, lock_owner: $owner}}) SET m.lock_expires = $until",
                        id=LOCK_ID, owner=owner, until=time.time() + LOCK_LEASE_S).consume(), "renew the write lock")

        threading.Thread(target=renew, name="klineage-neo4j-lock-renewal", daemon=True).start()

    def _drop_lease(self) -> None:
        if self._lock_renewal is not None:
            self._lock_renewal.set()
            self._lock_renewal = None
        owner, self._lock_owner = self._lock_owner, ""
        if owner and not self._closed:
            self._write(lambda tx: tx.run(
                f"MATCH (m:{META_LABEL} {{id: $id, lock_owner: $owner}}) "
                "REMOVE m.lock_owner, m.lock_expires, m.lock_since", id=LOCK_ID, owner=owner).consume(),
                "release the write lock")

    def _autocommit(self, query: str, what: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        self._check_open()
        try:
            with self._driver.session(database=self.database) as session:
                return list(session.run(query, dict(params or {})))
        except Exception as exc:
            raise self._translate(exc, what) from exc

    # ---------------------------------------------------------------- schema

    def schema_statements(self) -> list[str]:
        """The constraint and index statements of ``graph_spec``, each idempotent (IF NOT EXISTS)."""
        out = [f"CREATE CONSTRAINT {_ident(label.lower() + '_id_unique')} IF NOT EXISTS "
               f"FOR (n:{_ident(label)}) REQUIRE n.id IS UNIQUE" for label in UNIQUE_ID_CONSTRAINTS]
        out.append(f"CREATE CONSTRAINT {_ident('klineage_meta_id_unique')} IF NOT EXISTS "
                   f"FOR (n:{_ident(META_LABEL)}) REQUIRE n.id IS UNIQUE")
        out.append(f"CREATE CONSTRAINT {_ident('klineage_props_id_unique')} IF NOT EXISTS "
                   f"FOR (n:{_ident(PROPS_LABEL)}) REQUIRE n.id IS UNIQUE")
        for v in VECTOR_INDEXES:
            # Exact float vectors (Neo4j >= 5.23 quantizes by default, which moves cosines by ~1e-3
            # and reorders near neighbours); _vector_index_fallback drops the key for older servers.
            out.append(f"CREATE VECTOR INDEX {_ident(v.name)} IF NOT EXISTS FOR (n:{_ident(v.label)}) "
                       f"ON (n.{_ident(v.property)}) OPTIONS {{indexConfig: {{`vector.dimensions`: "
                       f"{int(v.dimensions)}, `vector.similarity_function`: '{v.similarity}', "
                       f"{QUANTIZATION_OFF}}}}}")
        for f in FULLTEXT_INDEXES:
            out.append(f"CREATE FULLTEXT INDEX {_ident(f.name)} IF NOT EXISTS FOR (n:{_ident(PROPS_LABEL)}) "
                       f"ON EACH [n.{_ident(FT_PROPERTY + f.name)}] "
                       "OPTIONS {indexConfig: {`fulltext.analyzer`: 'standard-no-stop-words', "
                       "`fulltext.eventually_consistent`: false}}")
        for r in RANGE_INDEXES:
            out.append(f"CREATE RANGE INDEX {_ident(r.name)} IF NOT EXISTS FOR (n:{_ident(r.label)}) "
                       f"ON (n.{_ident(r.property)})")
        return out

    def expected_indexes(self) -> list[str]:
        """Names of the indexes this store needs (vector, full-text, range)."""
        return [*(i.name for i in VECTOR_INDEXES), *(i.name for i in FULLTEXT_INDEXES),
                *(i.name for i in RANGE_INDEXES)]

    def ensure_schema(self, timeout_s: int = 120, _rebuild: bool = True) -> None:
        """Create constraints and indexes one at a time (IF NOT EXISTS), wait until they are online,
        and check that every expected index exists; StoreError says which one is missing or failed."""
        for statement in self.schema_statements():
            try:
                try:
                    self._autocommit(statement, "schema creation")
                except StoreError as exc:
                    if QUANTIZATION_OFF not in statement or "quantization" not in str(exc):
                        raise
                    # A server before 5.23 knows no quantization setting (and does not quantize).
                    self._autocommit(statement.replace(", " + QUANTIZATION_OFF, ""), "schema creation")
            except StoreError as exc:
                # Two stores opening at once: the other one created it between our check and create.
                if "AlreadyExists" not in str(exc):
                    raise StoreError(f"could not create the schema ({statement}): {exc}") from exc
        self._autocommit(f"CALL db.awaitIndexes({int(timeout_s)})", "waiting for indexes")
        rows = self._autocommit("SHOW INDEXES YIELD name, state, failureMessage, options, labelsOrTypes "
                                "RETURN name, state, failureMessage, options, labelsOrTypes", "listing indexes")
        quantized = [r["name"] for r in rows if r["name"] in {v.name for v in VECTOR_INDEXES}
                     and ((r["options"] or {}).get("indexConfig") or {}).get("vector.quantization.enabled")]
        # full-text indexes of the legacy layout (over the data nodes' __ft_ property): rebuilt
        quantized += [r["name"] for r in rows if r["name"] in {f.name for f in FULLTEXT_INDEXES}
                      and list(r["labelsOrTypes"] or ()) != [PROPS_LABEL]]
        if quantized and _rebuild:
            # made by an older KLineage or by hand: rebuild it with exact vectors (same name, same data)
            for name in quantized:
                self._autocommit(f"DROP INDEX {_ident(name)} IF EXISTS", "rebuilding a vector index")
            self.ensure_schema(timeout_s, _rebuild=False)
            return
        found = {r["name"]: (r["state"], r["failureMessage"]) for r in rows}
        for name in self.expected_indexes():
            if name not in found:
                raise StoreError(f"index {name!r} is missing in database {self.database!r} after creation")
            state, failure = found[name]
            if state != "ONLINE":
                raise StoreError(f"index {name!r} is {state}, not ONLINE: {failure or 'no failure message'}")
        self._migrate_legacy_layout()

    def _migrate_legacy_layout(self, chunk: int = 2000) -> int:
        """Rewrite the nodes an older KLineage wrote with its bookkeeping on them (``__sig``, ``__json``,
        ``__ft_*``) into the companion layout; returns how many were rewritten."""
        query = (f"MATCH (n) WHERE n.{SIGNATURE} IS NOT NULL RETURN labels(n) AS l, n.id AS id, "
                 f"properties(n) AS p LIMIT {int(chunk)}")
        done = 0
        while True:
            rows = self._autocommit(query, "migrating the legacy node layout")
            nodes = [Node(label, r["id"], decode_props(r["p"])) for r in rows
                     for label in [next((x for x in r["l"] if x in LABELS), None)] if label is not None]
            if not nodes:
                return done
            self.upsert(GraphBatch(tuple(nodes), ()))
            done += len(nodes)

    def clear(self) -> None:
        """Delete every node and relationship and rebuild the search indexes from empty (so full-text
        statistics hold no deleted documents). For tests and ``sync --replace``."""
        self._autocommit("MATCH (n) CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS", "clear")
        for name in (*(v.name for v in VECTOR_INDEXES), *(f.name for f in FULLTEXT_INDEXES)):
            self._autocommit(f"DROP INDEX {_ident(name)} IF EXISTS", "clear")
        self.ensure_schema()

    # ---------------------------------------------------------------- writes

    def upsert(self, batch: GraphBatch) -> None:
        """Write all nodes and relationships of ``batch`` in one transaction (all or nothing);
        idempotent. Nodes merge by id (the batch's properties replace the stored ones); relationships
        merge by (type, source, target). StoreError, with nothing written, for an unknown label or
        type, an id that is stored under another label, a relationship whose endpoint is neither in
        the batch nor in the store or that the graph model does not allow, or an unstorable value."""
        if not isinstance(batch, GraphBatch):
            raise StoreError(f"upsert expects a GraphBatch, got {type(batch).__name__}")
        node_rows, batch_labels = self._node_rows(batch.nodes)
        rels = list(batch.relationships)
        for rel in rels:
            if not isinstance(rel, Relationship):
                raise StoreError(f"batch holds {type(rel).__name__} where a Relationship was expected")
            if rel.type not in RELATIONSHIP_NAMES:
                raise StoreError(f"relationship ({rel.source!r})-[:{rel.type}]->({rel.target!r}): "
                                 "unknown relationship type")
        rel_props = {rel.key: encode_props(rel.props, f"relationship ({rel.source!r})-[:{rel.type}]->"
                                                      f"({rel.target!r})") for rel in rels}
        if not node_rows and not rels:
            return
        def work(tx: Any) -> None:
            # Which stored labels to look an id up under: a batch node under every other label (an id
            # never changes label); an endpoint outside the batch under the labels its relationship
            # type allows there, then, only if not found, under every label (for a precise error).
            lookups: dict[str, set[str]] = {label: set() for label in LABELS}
            for node_id, label in batch_labels.items():
                for other in LABELS:
                    if other != label:
                        lookups[other].add(node_id)
            for rel in rels:
                for node_id, index in ((rel.source, 0), (rel.target, 1)):
                    if node_id not in batch_labels:
                        for label in _ENDPOINT_LABELS[rel.type][index]:
                            lookups[label].add(node_id)
            stored = _labels_of(tx, lookups)
            unresolved = {i for r in rels for i in (r.source, r.target)} - set(batch_labels) - set(stored)
            if unresolved:
                stored.update(_labels_of(tx, {label: unresolved for label in LABELS}))
            for node_id, label in batch_labels.items():
                clash = stored.get(node_id, set()) - {label}
                if clash:
                    raise StoreError(f"node {node_id!r} is a {sorted(clash)[0]} in the store; the batch "
                                     f"writes it as a {label}; nothing was written")
            groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
            for rel in rels:
                what = f"relationship ({rel.source!r})-[:{rel.type}]->({rel.target!r})"
                ends = []
                for role, node_id in (("source", rel.source), ("target", rel.target)):
                    end = batch_labels.get(node_id) or min(stored.get(node_id, ()), default=None)
                    if end is None:
                        raise StoreError(f"{what}: the {role} node {node_id!r} is neither in the batch nor "
                                         "in the store; nothing was written")
                    ends.append(end)
                if not allowed_relationship(rel.type, ends[0], ends[1]):
                    raise StoreError(f"{what}: (:{ends[0]})-[:{rel.type}]->(:{ends[1]}) is not in the graph "
                                     "model (graph_spec.RELATIONSHIPS); nothing was written")
                groups.setdefault((rel.type, ends[0], ends[1]), []).append(
                    {"s": rel.source, "t": rel.target, "props": rel_props[rel.key]})
            for label, rows in sorted(node_rows.items()):
                # Unchanged nodes (same type-exact signature) are left alone: no index churn, so
                # re-ingesting is cheap and full-text statistics count no replaced documents.
                query = (f"UNWIND $rows AS row MERGE (m:{_ident(PROPS_LABEL)} {{id: row.id}}) "
                         "WITH m, row WHERE m.sig IS NULL OR m.sig <> row.meta.sig SET m = row.meta "
                         f"MERGE (n:{_ident(label)} {{id: row.id}}) SET n = row.props")
                for chunk in _chunks(rows):
                    tx.run(query, {"rows": chunk}).consume()
            for (rel_type, source_label, target_label), rows in sorted(groups.items()):
                rows.sort(key=lambda r: (r["s"], r["t"]))
                query = (f"UNWIND $rows AS row MATCH (a:{_ident(source_label)} {{id: row.s}}) "
                         f"MATCH (b:{_ident(target_label)} {{id: row.t}}) "
                         f"MERGE (a)-[r:{_ident(rel_type)}]->(b) SET r = row.props "
                         "RETURN count(*) AS written")
                for chunk in _chunks(rows):
                    written = tx.run(query, {"rows": chunk}).single()["written"]
                    if written != len(chunk):
                        raise StoreError(f"{rel_type}: {len(chunk) - written} relationship(s) lost an "
                                         "endpoint while being written (deleted concurrently?); nothing "
                                         "was written")
            tx.run(f"MERGE (m:{META_LABEL} {{id: $id}}) "
                   "ON CREATE SET m.epoch = randomUUID(), m.generation = 0 "
                   "SET m.generation = m.generation + 1", {"id": META_ID}).consume()

        self._write(work, "upsert")

    def _node_rows(self, nodes: Iterable[Node]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
        rows: dict[str, dict[str, dict[str, Any]]] = {}
        labels: dict[str, str] = {}
        fulltext = {f.label: f for f in FULLTEXT_INDEXES}
        for node in nodes:
            if not isinstance(node, Node):
                raise StoreError(f"batch holds {type(node).__name__} where a Node was expected")
            if node.label not in LABELS:
                raise StoreError(f"node {node.id!r}: unknown label {node.label!r}")
            if labels.get(node.id, node.label) != node.label:
                raise StoreError(f"node {node.id!r} appears in the batch as both {labels[node.id]} and "
                                 f"{node.label}")
            labels[node.id] = node.label
            props, json_keys, nulls = encode_node_props(node.props, f"{node.label} {node.id!r}")
            props["id"] = node.id
            meta: dict[str, Any] = {"id": node.id, "json": sorted(json_keys), "nulls": nulls}
            spec = fulltext.get(node.label)
            if spec is not None:
                text = _fulltext_value(spec, node.props)
                if text:
                    meta[FT_PROPERTY + spec.name] = text
            # type-exact fingerprint of what the node and its companion hold
            meta["sig"] = _signature({**props, "json": meta["json"], "nulls": nulls, "label": node.label})
            rows.setdefault(node.label, {})[node.id] = {"id": node.id, "props": props, "meta": meta}
        return {label: [by_id[i] for i in sorted(by_id)] for label, by_id in rows.items()}, labels

    # ---------------------------------------------------------------- reads

    @staticmethod
    def _check_label(label: str) -> None:
        if label not in LABELS:
            raise StoreError(f"unknown label {label!r}; expected one of {', '.join(LABELS)}")

    @property
    def state_token(self) -> tuple[str, int] | None:
        """(epoch, generation) of the last write through a Neo4jStore; None before any (read fresh)."""
        def work(tx: Any) -> tuple[str, int] | None:
            record = tx.run(f"MATCH (m:{META_LABEL} {{id: $id}}) RETURN m.epoch AS e, m.generation AS g",
                            {"id": META_ID}).single()
            return None if record is None else (record["e"], record["g"])

        return self._read(work, "state_token")

    def get(self, label: str, node_id: str) -> Node | None:
        """The node with this label and id, or None."""
        return self.get_many(label, [node_id])[0]

    def get_many(self, label: str, node_ids: Sequence[str]) -> list[Node | None]:
        """Nodes for ``node_ids`` in the same order (None where missing or of another label): one query."""
        self._check_label(label)
        ids = list(node_ids)
        if not ids:
            return []

        def work(tx: Any) -> dict[str, Node]:
            result = tx.run(f"MATCH (n:{_ident(label)}) WHERE n.id IN $ids "
                            f"RETURN n.id AS id, {_props('n')} AS p",
                            {"ids": sorted(set(ids))})
            return {r["id"]: Node(label, r["id"], decode_node_props(r["p"])) for r in result}

        found = self._read(work, "get_many")
        return [found.get(i) for i in ids]

    def find(self, label: str, where: Mapping[str, Any] | None = None, limit: int | None = None,
             after: str | None = None) -> list[Node]:
        """Nodes of ``label`` whose properties equal ``where`` (booleans never equal numbers), ordered
        by id, ids > ``after``, at most ``limit``."""
        self._check_label(label)
        if limit is not None and limit < 0:
            raise StoreError(f"find: limit must be >= 0, got {limit}")
        if limit == 0:
            return []
        params: dict[str, Any] = {}
        clauses, possible = _where_clause(where or {}, params)
        if not possible:
            return []
        if after is not None:
            clauses.insert(0, "n.id > $after")
            params["after"] = after
        query = f"MATCH (n:{_ident(label)})"
        if clauses:
            query += " WHERE " + " AND ".join(f"({c})" for c in clauses)
        query += f" RETURN n.id AS id, {_props('n')} AS p ORDER BY n.id"
        if limit is not None:
            query += " LIMIT $limit"
            params["limit"] = int(limit)

        def work(tx: Any) -> list[Node]:
            return [Node(label, r["id"], decode_node_props(r["p"])) for r in tx.run(query, params)]

        return self._read(work, "find")

    def unlink(self, relationships: Sequence[tuple[str, str, str]]) -> int:
        """Remove the (type, source, target) relationships in one transaction; missing ones are ignored."""
        by_type: dict[str, list[dict[str, str]]] = {}
        for rel_type, source, target in relationships:
            if rel_type not in RELATIONSHIP_NAMES:
                raise StoreError(f"unknown relationship type {rel_type!r}")
            by_type.setdefault(rel_type, []).append({"s": str(source), "t": str(target)})
        if not by_type:
            return 0

        def work(tx: Any) -> int:
            removed = 0
            for rel_type, pairs in sorted(by_type.items()):
                for label in sorted({r.source for r in RELATIONSHIPS if r.name == rel_type}):
                    query = (f"UNWIND $pairs AS p MATCH (a:{_ident(label)} {{id: p.s}})-[x:{_ident(rel_type)}]->(b) "
                             "WHERE b.id = p.t DELETE x RETURN count(*) AS n")
                    removed += int(tx.run(query, {"pairs": pairs}).single()["n"])
            return removed

        return self._write(work, "unlink")

    def neighbors(self, node_ids: Sequence[str], rel_type: str, direction: str = "out"
                  ) -> dict[str, list[tuple[Relationship, Node]]]:
        """For each id, its ``rel_type`` relationships (``out``: id is the source; ``in``: the target)
        with the node at the other end, ordered by that node's id; unknown ids map to []. One query."""
        if rel_type not in RELATIONSHIP_NAMES:
            raise StoreError(f"unknown relationship type {rel_type!r}")
        if direction not in ("out", "in"):
            raise StoreError(f"direction must be 'out' or 'in', got {direction!r}")
        ids = list(dict.fromkeys(node_ids))
        if not ids:
            return {}
        outgoing = direction == "out"
        anchors = sorted({(r.source if outgoing else r.target) for r in RELATIONSHIPS if r.name == rel_type})
        arrow = f"-[r:{_ident(rel_type)}]->" if outgoing else f"<-[r:{_ident(rel_type)}]-"
        query = " UNION ALL ".join(
            f"MATCH (a:{_ident(label)}){arrow}(b) WHERE a.id IN $ids "
            f"RETURN a.id AS id, properties(r) AS rp, b.id AS other, labels(b) AS bl, {_props('b')} AS bp"
            for label in anchors)

        def work(tx: Any) -> list[Any]:
            return list(tx.run(query, {"ids": ids}))

        result: dict[str, list[tuple[Relationship, Node]]] = {i: [] for i in ids}
        for r in self._read(work, "neighbors"):
            node_id, other = r["id"], r["other"]
            label = next((x for x in r["bl"] if x in LABELS), None)
            if label is None:
                continue
            rel = (Relationship(rel_type, node_id, other, decode_props(r["rp"])) if outgoing
                   else Relationship(rel_type, other, node_id, decode_props(r["rp"])))
            result[node_id].append((rel, Node(label, other, decode_node_props(r["bp"]))))
        for found in result.values():
            found.sort(key=lambda item: item[1].id)
        return result

    def lineage(self, lineage_id: str) -> LineageView | None:
        """The lineage, its workload, starting kernel and steps ordered by HAS_STEP index (then id)."""
        query = (f"MATCH (l:Lineage {{id: $id}}) RETURN {_props('l')} AS l, "
                 f"[(l)-[:OF]->(w:Workload) | {_props('w')}] AS ws, "
                 f"[(l)-[:STARTS_AT]->(k:Kernel) | {_props('k')}] AS ks, "
                 f"[(l)-[h:HAS_STEP]->(s:Step) | {{h: properties(h), s: {_props('s')}}}] AS steps")

        def work(tx: Any) -> Any:
            return tx.run(query, {"id": lineage_id}).single()

        record = self._read(work, "lineage")
        if record is None:
            return None

        def first(label: str, rows: list[Mapping[str, Any]]) -> Node | None:
            if not rows:
                return None
            raw = min(rows, key=lambda p: p["p"]["id"])
            return Node(label, raw["p"]["id"], decode_node_props(raw))

        steps = []
        for item in record["steps"]:
            node = Node("Step", item["s"]["p"]["id"], decode_node_props(item["s"]))
            rel_props = decode_props(item["h"])
            index = rel_props.get("index", node.props.get("index"))
            key = index if isinstance(index, int) and not isinstance(index, bool) else 2**62
            steps.append((key, node.id, node))
        steps.sort(key=lambda s: (s[0], s[1]))
        return LineageView(Node("Lineage", lineage_id, decode_node_props(record["l"])),
                           first("Workload", record["ws"]), first("Kernel", record["ks"]),
                           tuple(node for _, _, node in steps))

    def vector_top_k(self, label: str, prop: str, vector: Sequence[float], k: int) -> list[ScoredNode]:
        """The ``k`` nodes whose ``prop`` vector is most cosine-similar to ``vector`` (score = cosine),
        best first, ties by id, through ``db.index.vector.queryNodes``. Nodes without a vector of the
        index's dimension are not candidates: a query of another dimension finds nothing."""
        self._check_label(label)
        spec = next((v for v in VECTOR_INDEXES if v.label == label and v.property == prop), None)
        if spec is None:
            raise StoreError(f"no vector index on {label}.{prop} in graph_spec.VECTOR_INDEXES "
                             f"(there is: {', '.join(f'{v.label}.{v.property}' for v in VECTOR_INDEXES)})")
        try:
            query_vector = [float(x) for x in vector]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"vector_top_k: expected a 1-D vector of numbers ({exc})") from exc
        if not query_vector:
            raise StoreError("vector_top_k: expected a non-empty 1-D vector, got an empty one")
        norm = math.sqrt(sum(x * x for x in query_vector))
        if not math.isfinite(norm) or norm == 0.0:
            raise StoreError("vector_top_k: the query vector has zero or non-finite norm")
        if k <= 0 or len(query_vector) != spec.dimensions:
            return []
        fetch = _candidates(k)

        def work(tx: Any) -> list[ScoredNode]:
            result = tx.run("CALL db.index.vector.queryNodes($index, $n, $vector) YIELD node, score "
                            "WITH node, score ORDER BY score DESC, node.id LIMIT $k "
                            f"RETURN node.id AS id, {_props('node')} AS p, score",
                            {"index": spec.name, "n": fetch, "vector": query_vector, "k": k})
            # Neo4j's cosine score is (1 + cosine) / 2; the protocol's score is the cosine itself.
            return [ScoredNode(Node(label, r["id"], decode_node_props(r["p"])), 2.0 * float(r["score"]) - 1.0)
                    for r in result]

        hits = self._read(work, "vector search")
        hits.sort(key=lambda h: (-h.score, h.node.id))
        return hits[:k]

    def fulltext_top_k(self, index: str, text: str, k: int) -> list[ScoredNode]:
        """The ``k`` best BM25 matches of ``text`` in the named full-text index (graph_spec), best first,
        ties by id, through ``db.index.fulltext.queryNodes``; only nodes sharing a token with ``text``."""
        spec = next((i for i in FULLTEXT_INDEXES if i.name == index), None)
        if spec is None:
            raise StoreError(f"unknown full-text index {index!r}; expected one of "
                             f"{', '.join(i.name for i in FULLTEXT_INDEXES)}")
        tokens = sorted(set(tokenize(text or "")))
        if k <= 0 or not tokens:
            return []
        lucene = " ".join(escape_lucene(t) for t in tokens)
        fetch = _candidates(k)

        def work(tx: Any) -> list[ScoredNode]:
            # the index is over the companion nodes: back to the data node with the same id
            result = tx.run("CALL db.index.fulltext.queryNodes($index, $query, {limit: $n}) "
                            f"YIELD node AS hit, score MATCH (node:{_ident(spec.label)} {{id: hit.id}}) "
                            "WITH node, score ORDER BY score DESC, node.id LIMIT $k "
                            f"RETURN node.id AS id, {_props('node')} AS p, score",
                            {"index": spec.name, "query": lucene, "n": fetch, "k": k})
            return [ScoredNode(Node(spec.label, r["id"], decode_node_props(r["p"])),
                               float(r["score"]) * (BM25_K1 + 1)) for r in result]

        hits = self._read(work, "full-text search")
        hits.sort(key=lambda h: (-h.score, h.node.id))
        return hits[:k]

    def counts(self) -> dict[str, int]:
        """Nodes per label (every label, zeros included) and relationships per type (keys ``:TYPE``)."""
        parts = [f"MATCH (n:{_ident(label)}) RETURN {label!r} AS k, count(n) AS c" for label in LABELS]
        parts += [f"MATCH ()-[r:{_ident(t)}]->() RETURN ':{t}' AS k, count(r) AS c"
                  for t in sorted(RELATIONSHIP_NAMES)]
        query = " UNION ALL ".join(parts)

        def work(tx: Any) -> dict[str, int]:
            return {r["k"]: int(r["c"]) for r in tx.run(query)}

        found = self._read(work, "counts")
        out = {label: found.get(label, 0) for label in LABELS}
        out.update({f":{t}": found.get(f":{t}", 0) for t in sorted(RELATIONSHIP_NAMES)})
        return out

    def export(self) -> GraphBatch:
        """Every node and relationship, ordered by (label, id) and (type, source, target)."""
        def work(tx: Any) -> GraphBatch:
            nodes: list[Node] = []
            for label in sorted(LABELS):
                result = tx.run(f"MATCH (n:{_ident(label)}) RETURN n.id AS id, {_props('n')} AS p "
                                "ORDER BY n.id")
                nodes.extend(Node(label, r["id"], decode_node_props(r["p"])) for r in result)
            rels: list[Relationship] = []
            for rel_type in sorted(RELATIONSHIP_NAMES):
                result = tx.run(f"MATCH (a)-[r:{_ident(rel_type)}]->(b) RETURN a.id AS s, b.id AS t, "
                                "properties(r) AS p")
                rels.extend(Relationship(rel_type, r["s"], r["t"], decode_props(r["p"])) for r in result)
            rels.sort(key=lambda r: r.key)
            nodes.sort(key=lambda n: (n.label, n.id))
            return GraphBatch(tuple(nodes), tuple(rels))

        return self._read(work, "export")

    def close(self) -> None:
        """Close the driver's connections; later calls raise StoreError. The data stays in Neo4j."""
        if not self._closed:
            self._closed = True
            self._driver.close()


def _labels_of(tx: Any, lookups: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The stored labels of ids: ``lookups`` maps a label to the ids to look up under it (one query,
    one unique-index seek per id and label). Ids found under no label are absent from the result."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    for i, (label, ids) in enumerate(sorted(lookups.items())):
        wanted = sorted(set(ids))
        if wanted:
            params[f"ids{i}"] = wanted
            parts.append(f"MATCH (n:{_ident(label)}) WHERE n.id IN $ids{i} RETURN n.id AS id, {label!r} AS label")
    out: dict[str, set[str]] = {}
    if not parts:
        return out
    for r in tx.run(" UNION ALL ".join(parts), params):
        out.setdefault(r["id"], set()).add(r["label"])
    return out


def _candidates(k: int) -> int:
    """How many index hits to rank for a top-``k``: more than ``k`` so that ties at the cut are broken
    by id like the embedded store, and so that the HNSW search of the vector index (whose beam is
    this number) finds the true nearest neighbours; only ``k`` rows come back."""
    return min(max(5 * k, 100), 10_000)


def _chunks(rows: list[T], size: int = ROWS_PER_STATEMENT) -> Iterable[list[T]]:
    for start in range(0, len(rows), size):
        yield rows[start:start + size]
