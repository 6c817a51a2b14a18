"""The Neo4j store against a real Neo4j 5.26 (never a mocked driver), side by side with the embedded
store where the protocol promises the same answers."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.neo4j_store import Neo4jStore, decode_props, encode_props, escape_lucene
from klineage.kb.store import GraphStore, StoreError
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.graph_spec import EMBEDDING_DIM, FULLTEXT_INDEXES, RANGE_INDEXES, VECTOR_INDEXES

real = pytest.mark.real("neo4j")

WORDS = ["tile", "pipeline", "fuse", "vectorize", "swizzle", "split", "persist", "unroll", "gemm", "softmax",
         "layernorm", "attention", "reduction", "loop", "stages", "warps", "block", "k", "dot", "mask"]


def _vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1.0, 1.0) for _ in range(EMBEDDING_DIM)]


def sample_batch(n_skills: int = 12, seed: int = 7) -> GraphBatch:
    """A small graph touching every label and relationship type, with nested and odd values."""
    rng = random.Random(seed)
    nodes = [
        Node("Workload", "workload:gemm", {"name": "gemm", "family": "matmul",
                                           "shapes": [{"M": 4096, "N": 64}]}),
        Node("Kernel", "kernel:k0", {"sha": "a" * 64, "features": {"has_dot": True, "num_stages": 3}}),
        Node("Kernel", "kernel:k1", {"sha": "b" * 64, "features": {}}),
        Node("Kernel", "kernel:k2", {"sha": "c" * 64, "features": {"block": [64, 128]}}),
        Node("Lineage", "lineage:l0", {"gpu": "H200", "sample": True}),
        Node("Architecture", "architecture:sm_90", {"arch": "sm_90", "sm_count": 132}),
        Node("GateRun", "gaterun:g0", {"verdict": "pass", "metrics": {"ms": 0.25}, "reason": None}),
        Node("Risk", "risk:r0", {"kind": "out-of-resources", "description": "smem"}),
        Node("Condition", "condition:c0", {"expr": "K % 64 == 0", "kind": "valid", "accuracy": None}),
        Node("Condition", "condition:c1", {"expr": "M * N >= 2 ** 22", "kind": "profitable",
                                           "accuracy": 0.9}),
        Node("Application", "application:a0", {"outcome": "pass", "speedup": 1.3}),
    ]
    steps = []
    for i in range(3):
        steps.append(Node("Step", f"step:s{i}", {"operator": f"op{i}", "accepted": i != 1, "index": 2 - i,
                                                  "timings": [{"shape": {"M": 1}, "ms": 0.5 + i}]}))
    skills = []
    for i in range(n_skills):
        words = rng.sample(WORDS, 6)
        skills.append(Node("Skill", f"skill:{i:03d}", {
            "operator": f"op{i}", "name": " ".join(words[:2]), "intent": " ".join(words[2:5]) + ".",
            "anchor_predicate": "has_dot", "anchor_text": f"a {words[5]} kernel", "carrier": "tl.dot",
            "transform": {"operator": f"op{i}", "params": {"BLOCK": 64}}, "effect": {"median": 1.1, "n": 2},
            "support_steps": i, "support_lineages": 1, "architectures": ["sm_90"], "embedding": _vector(rng),
            "sample": True, "mixed": [1, "a"], "big": 2**70, "empty": [], "ratio": 0.1}))
    rels = [
        Relationship("OF", "lineage:l0", "workload:gemm"),
        Relationship("STARTS_AT", "lineage:l0", "kernel:k0"),
        Relationship("VALIDATED_BY", "kernel:k0", "gaterun:g0"),
        Relationship("ON", "gaterun:g0", "architecture:sm_90"),
        Relationship("USED", "application:a0", "skill:000"),
        Relationship("ON", "application:a0", "kernel:k2"),
        Relationship("ENABLES", "skill:000", "skill:001", {"note": {"why": "x"}}),
        Relationship("RISKS", "skill:000", "risk:r0"),
        Relationship("VALID_WHEN", "skill:000", "condition:c0"),
        Relationship("PROFITABLE_WHEN", "skill:000", "condition:c1"),
    ]
    for i, step in enumerate(steps):
        rels += [Relationship("HAS_STEP", "lineage:l0", step.id, {"index": 2 - i}),
                 Relationship("FROM", step.id, f"kernel:k{i}"),
                 Relationship("TO", step.id, f"kernel:k{(i + 1) % 3}"),
                 Relationship("REVERSES_INTO", step.id, f"skill:{i:03d}")]
    return GraphBatch.of([*nodes, *steps, *skills], rels)


@pytest.fixture
def both(neo4j_store: Neo4jStore, tmp_path: Path) -> tuple[Neo4jStore, EmbeddedStore]:
    return neo4j_store, EmbeddedStore(tmp_path / "embedded")


# ------------------------------------------------------------------ pure helpers (no server)


def test_escape_lucene_makes_user_text_literal() -> None:
    assert escape_lucene('a+b (c) "d" AND e || f: g/h*') == 'a\\+b \\(c\\) \\"d\\" and e \\|\\| f\\: g\\/h\\*'
    assert escape_lucene("NOT OR TO") == "not or to"


def test_property_encoding_round_trips_what_neo4j_cannot_hold() -> None:
    props = {"m": {"b": [1, {"c": None}]}, "none": None, "mixed": [1, "a"], "nums": [1, 2.5], "big": 2**64,
             "s": "null", "floats": [0.5, 1.5], "b": True, "empty": []}
    encoded = encode_props(props, "test")
    assert encoded["s"] == "null" and encoded["floats"] == [0.5, 1.5] and encoded["empty"] == []
    assert sorted(encoded["__json"]) == ["big", "m", "mixed", "none", "nums"]
    assert decode_props({**encoded, "id": "x"}) == props
    odd = {"id": 1, "__json": {"a": 1}, "__u": "x", "_x": 2, "a\x00b": 3, "__x00": 4}
    assert decode_props({**encode_props(odd, "test"), "id": "node-id"}) == odd
    with pytest.raises(StoreError, match="non-finite"):
        encode_props({"x": math.nan}, "test")


def test_old_server_versions_are_refused_with_a_clear_error() -> None:
    with pytest.raises(StoreError, match=r"needs Neo4j 5\.13 or newer"):
        Neo4jStore._check_version("Neo4j/5.12.0")
    with pytest.raises(StoreError, match=r"needs Neo4j 5\.13"):
        Neo4jStore._check_version("Neo4j/4.4.30")
    assert Neo4jStore._check_version("Neo4j/5.26.30") == (5, 26, 30)
    assert Neo4jStore._check_version("Neo4j/2025.01.0")[0] == 2025


# ------------------------------------------------------------------ against the real server


@real
def test_schema_is_created_from_graph_spec(neo4j_store: Neo4jStore) -> None:
    rows = neo4j_store._autocommit("SHOW INDEXES YIELD name, type, labelsOrTypes, properties, state, options "
                                   "RETURN *", "test")
    by_name = {r["name"]: r for r in rows}
    for v in VECTOR_INDEXES:
        row = by_name[v.name]
        assert row["type"] == "VECTOR" and row["labelsOrTypes"] == [v.label] and row["state"] == "ONLINE"
        config = row["options"]["indexConfig"]
        assert config["vector.dimensions"] == v.dimensions == 384
        assert config["vector.similarity_function"].lower() == "cosine"
    for f in FULLTEXT_INDEXES:
        assert by_name[f.name]["type"] == "FULLTEXT"
    for r in RANGE_INDEXES:
        assert by_name[r.name]["type"] == "RANGE" and by_name[r.name]["properties"] == [r.property]
    constraints = neo4j_store._autocommit("SHOW CONSTRAINTS YIELD labelsOrTypes, properties, type RETURN *",
                                          "test")
    unique = {r["labelsOrTypes"][0] for r in constraints
              if r["type"] == "UNIQUENESS" and r["properties"] == ["id"]}
    assert {"Workload", "Kernel", "Lineage", "Step", "Skill", "Condition", "Risk", "GateRun", "Architecture",
            "Application"} <= unique
    neo4j_store.ensure_schema()  # idempotent


@real
def test_same_answers_as_the_embedded_store(both: tuple[Neo4jStore, EmbeddedStore]) -> None:
    neo, emb = both
    batch = sample_batch()
    for store in (neo, emb):
        store.upsert(batch)
        store.upsert(batch)  # idempotent
    assert neo.counts() == emb.counts()
    assert neo.export() == emb.export()
    ids = ["skill:000", "nope", "skill:003", "kernel:k0"]
    assert neo.get_many("Skill", ids) == emb.get_many("Skill", ids)
    assert neo.get("Kernel", "kernel:k2") == emb.get("Kernel", "kernel:k2")
    assert neo.get("Skill", "kernel:k2") is None
    transform = {"params": {"BLOCK": 64}, "operator": "op1"}
    for where, limit, after in [(None, None, None), (None, 4, "skill:002"), ({"sample": True}, 3, None),
                                ({"support_steps": 3}, None, None), ({"transform": transform}, None, None),
                                ({"sample": 1}, None, None), ({"missing": None}, None, None)]:
        assert neo.find("Skill", where, limit, after) == emb.find("Skill", where, limit, after), where
    assert neo.find("Condition", {"accuracy": None}) == emb.find("Condition", {"accuracy": None})
    for rel_type, direction, node_ids in [("ON", "out", ["gaterun:g0", "application:a0", "x"]),
                                          ("ON", "in", ["kernel:k2", "architecture:sm_90"]),
                                          ("HAS_STEP", "out", ["lineage:l0"]), ("REVERSES_INTO", "in",
                                                                              ["skill:000", "skill:005"]),
                                          ("ENABLES", "out", ["skill:000", "skill:000"])]:
        assert neo.neighbors(node_ids, rel_type, direction) == emb.neighbors(node_ids, rel_type, direction)
    view = neo.lineage("lineage:l0")
    assert view == emb.lineage("lineage:l0")
    assert view is not None and [s.id for s in view.steps] == ["step:s2", "step:s1", "step:s0"]
    assert neo.lineage("lineage:none") is None


@real
def test_vector_search_ranks_like_the_embedded_store(both: tuple[Neo4jStore, EmbeddedStore]) -> None:
    neo, emb = both
    batch = sample_batch(n_skills=60, seed=3)
    neo.upsert(batch)
    emb.upsert(batch)
    rng = random.Random(11)
    for _ in range(5):
        query = _vector(rng)
        a = neo.vector_top_k("Skill", "embedding", query, 10)
        b = emb.vector_top_k("Skill", "embedding", query, 10)
        assert [h.node.id for h in a] == [h.node.id for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
        assert a[0].node == b[0].node
    skill = next(n for n in batch.nodes if n.id == "skill:007")
    top = neo.vector_top_k("Skill", "embedding", skill.props["embedding"], 1)
    assert top[0].node.id == "skill:007" and top[0].score == pytest.approx(1.0, abs=1e-5)
    assert neo.vector_top_k("Skill", "embedding", [1.0, 2.0], 3) == []  # another dimension: no candidates
    with pytest.raises(StoreError, match="zero"):
        neo.vector_top_k("Skill", "embedding", [0.0] * EMBEDDING_DIM, 3)


@real
def test_fulltext_search_ranks_like_the_embedded_store(both: tuple[Neo4jStore, EmbeddedStore]) -> None:
    neo, emb = both
    batch = sample_batch(n_skills=60, seed=5)
    neo.upsert(batch)
    emb.upsert(batch)
    for text in ["gemm", "fuse the softmax loop", "tile AND (warps)", "k-loop: dot/mask*", "TILE stages"]:
        a, b = neo.fulltext_top_k("skill_text", text, 10), emb.fulltext_top_k("skill_text", text, 10)
        assert a and len(a) == len(b)
        # BM25 over the same tokens (short texts: Lucene's length quantization is exact here), so the
        # scores agree and the order is the same apart from ties (the embedded store's float64 sums
        # differ in the last bits where Lucene's float32 scores are exactly equal and break ties by id).
        assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-5), text
        everything = {h.node.id: h.score for h in emb.fulltext_top_k("skill_text", text, 1000)}
        for hit in a:
            assert everything[hit.node.id] == pytest.approx(hit.score, rel=1e-5), (text, hit.node.id)
        assert [h.node.id for h in a] == sorted((h.node.id for h in a),
                                                key=lambda i: (-round(everything[i], 4), i))
    assert neo.fulltext_top_k("skill_text", "+-!(){}", 5) == []
    assert neo.fulltext_top_k("skill_text", "zzzz", 5) == []
    with pytest.raises(StoreError, match="unknown full-text index"):
        neo.fulltext_top_k("nope", "gemm", 5)


@real
def test_a_relationship_to_a_missing_node_rolls_back_the_whole_batch(neo4j_store: Neo4jStore) -> None:
    ok = GraphBatch.of([Node("Skill", "skill:ok", {"name": "ok"})])
    neo4j_store.upsert(ok)
    before = neo4j_store.export()
    bad = GraphBatch.of([Node("Skill", "skill:new", {"name": "new"}),
                         Node("Risk", "risk:new", {"kind": "x"})],
                        [Relationship("RISKS", "skill:new", "risk:new"),
                         Relationship("RISKS", "skill:ok", "risk:absent")])
    with pytest.raises(StoreError, match="neither in the batch nor in the store"):
        neo4j_store.upsert(bad)
    assert neo4j_store.export() == before
    with pytest.raises(StoreError, match="not in the graph model"):
        neo4j_store.upsert(GraphBatch.of([Node("Risk", "risk:r", {})],
                                         [Relationship("RISKS", "risk:r", "skill:ok")]))
    with pytest.raises(StoreError, match="in the store"):
        neo4j_store.upsert(GraphBatch.of([Node("Risk", "skill:ok", {})]))  # an id never changes label
    assert neo4j_store.export() == before


@real
def test_two_writers_at_once(neo4j_stores: Callable[[], Neo4jStore]) -> None:
    first, second = neo4j_stores(), neo4j_stores()
    batch = sample_batch(n_skills=40, seed=9)
    errors: list[BaseException] = []

    def write(store: Neo4jStore, offset: int) -> None:
        try:
            for i in range(6):
                store.upsert(batch)
                extra = GraphBatch.of([Node("Risk", f"risk:w{offset}-{i}", {"kind": "k"})],
                                      [Relationship("RISKS", f"skill:{i:03d}", f"risk:w{offset}-{i}")])
                store.upsert(extra)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counts = first.counts()
    assert counts["Skill"] == 40 and counts["Risk"] == 1 + 12
    assert counts[":RISKS"] == 1 + 12 and counts[":REVERSES_INTO"] == 3
    assert first.export() == second.export()


@real
def test_state_token_changes_on_writes(neo4j_store: Neo4jStore) -> None:
    assert neo4j_store.state_token is None
    neo4j_store.upsert(GraphBatch.of([Node("Risk", "risk:a", {})]))
    token = neo4j_store.state_token
    assert token is not None and neo4j_store.state_token == token
    neo4j_store.upsert(GraphBatch.of([Node("Risk", "risk:b", {})]))
    assert neo4j_store.state_token != token


@real
def test_missing_index_gives_a_clear_error_and_reopening_restores_it(neo4j_stores: Callable[[], Any]) -> None:
    store = neo4j_stores()
    store._autocommit("DROP INDEX skill_embedding IF EXISTS", "test")
    with pytest.raises(StoreError, match="index is missing"):
        store.vector_top_k("Skill", "embedding", [1.0] * EMBEDDING_DIM, 3)
    again = neo4j_stores()
    assert again.vector_top_k("Skill", "embedding", [1.0] * EMBEDDING_DIM, 3) == []


@real
def test_bad_credentials_and_unreachable_server_are_clear(neo4j_server: Any) -> None:
    with pytest.raises(StoreError, match=r"refused the credentials.*NEO4J_PASSWORD"):
        Neo4jStore(neo4j_server.uri, neo4j_server.user, "wrong-password-123", neo4j_server.database)
    with pytest.raises(StoreError, match=r"(?s)cannot reach Neo4j at bolt://127\.0\.0\.1:1 .*make neo4j"):
        Neo4jStore("bolt://127.0.0.1:1", "neo4j", "x", connection_timeout=3.0)
    with pytest.raises(StoreError, match="no database 'nope'"):
        Neo4jStore(neo4j_server.uri, neo4j_server.user, neo4j_server.password, "nope")


@real
def test_from_env_and_open_store(neo4j_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from klineage.kb.settings import open_store

    for key, value in neo4j_server.env().items():
        monkeypatch.setenv(key, value)
    store = open_store()
    try:
        assert isinstance(store, Neo4jStore) and isinstance(store, GraphStore)
        assert store.database == neo4j_server.database and "Neo4jStore" in repr(store)
    finally:
        store.close()
    with pytest.raises(StoreError, match="closed"):
        store.counts()
