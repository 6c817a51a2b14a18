"""The GraphStore conformance suite: every store kind (tests/kb/conftest.py STORE_KINDS) passes it.

Each test gets an EMPTY store from the ``store`` fixture and uses only the GraphStore protocol.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klineage.kb.store import GraphStore, StoreError
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.graph_spec import EMBEDDING_DIM, LABELS, RELATIONSHIP_NAMES
from klineage.schema.lineage_document import lineage_to_batch

from .conftest import GEMM_FIXTURE, SOFTMAX_FIXTURE, load_doc


def condition(i: int, **props: Any) -> Node:
    return Node("Condition", f"condition:{i:04d}", {"expr": f"K >= {i}", "kind": "valid", **props})


def skill(key: str, embedding: list[float] | None = None, **props: Any) -> Node:
    base = {"operator": key, "name": key, "intent": "", "anchor_text": "", **props}
    if embedding is not None:
        base["embedding"] = embedding
    return Node("Skill", f"skill:{key}", base)


def unit(*weights: float) -> list[float]:
    """A 384-float vector with the given leading components (rest zero)."""
    return [float(w) for w in weights] + [0.0] * (EMBEDDING_DIM - len(weights))


def test_the_store_satisfies_the_protocol(store: GraphStore) -> None:
    assert isinstance(store, GraphStore)


def test_ingest_a_lineage_batch(store: GraphStore) -> None:
    batch = lineage_to_batch(load_doc(GEMM_FIXTURE))
    store.upsert(batch)
    counts = store.counts()
    for label in LABELS:
        assert counts.get(label, 0) == sum(1 for n in batch.nodes if n.label == label), label
    for rel_type in RELATIONSHIP_NAMES:
        expected = sum(1 for r in batch.relationships if r.type == rel_type)
        assert counts.get(f":{rel_type}", 0) == expected, rel_type
    exported = store.export()
    assert {(n.label, n.id): dict(n.props) for n in exported.nodes} == {
        (n.label, n.id): dict(n.props) for n in batch.nodes}
    assert {r.key: dict(r.props) for r in exported.relationships} == {
        r.key: dict(r.props) for r in batch.relationships}


def test_get_and_get_many(store: GraphStore) -> None:
    store.upsert(GraphBatch.of([condition(1), condition(2), skill("a")]))
    assert store.get("Condition", "condition:0001") == condition(1)
    assert store.get("Condition", "condition:0009") is None
    assert store.get("Skill", "condition:0001") is None  # right id, wrong label
    found = store.get_many("Condition", ["condition:0002", "missing", "condition:0001", "skill:a"])
    assert found == [condition(2), None, condition(1), None]
    assert store.get_many("Condition", []) == []


def test_find_filters_orders_and_paginates(store: GraphStore) -> None:
    nodes = [condition(i, kind="valid" if i % 3 else "profitable", support=i % 2, flag=bool(i % 2))
             for i in range(25, 0, -1)]
    store.upsert(GraphBatch.of(nodes))
    all_ids = [n.id for n in store.find("Condition")]
    assert all_ids == sorted(n.id for n in nodes)
    pages, after = [], None
    while True:
        page = store.find("Condition", limit=10, after=after)
        if not page:
            break
        pages.append([n.id for n in page])
        after = page[-1].id
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [i for p in pages for i in p] == all_ids
    profitable = store.find("Condition", where={"kind": "profitable"})
    assert [n.id for n in profitable] == sorted(n.id for n in nodes if n.props["kind"] == "profitable")
    both = store.find("Condition", where={"kind": "valid", "support": 1}, limit=3)
    assert len(both) == 3 and all(n.props["kind"] == "valid" and n.props["support"] == 1 for n in both)
    flagged = store.find("Condition", where={"flag": True})
    assert [n.id for n in flagged] == sorted(n.id for n in nodes if n.props["flag"] is True)
    assert store.find("Condition", where={"kind": "nope"}) == []
    assert store.find("Condition", limit=0) == []
    assert store.find("Skill") == []


def test_neighbors_in_both_directions_in_one_call(store: GraphStore) -> None:
    conds = [condition(i) for i in (3, 1, 2)]
    store.upsert(GraphBatch.of(
        [skill("b"), skill("a"), *conds],
        [Relationship("VALID_WHEN", "skill:a", "condition:0003"),
         Relationship("VALID_WHEN", "skill:a", "condition:0001", {"note": "first"}),
         Relationship("VALID_WHEN", "skill:b", "condition:0001"),
         Relationship("PROFITABLE_WHEN", "skill:b", "condition:0002"),
         Relationship("ENABLES", "skill:a", "skill:b")]))
    out = store.neighbors(["skill:a", "skill:b", "skill:none"], "VALID_WHEN")
    assert set(out) == {"skill:a", "skill:b", "skill:none"}
    assert [node.id for _, node in out["skill:a"]] == ["condition:0001", "condition:0003"]
    rel, node = out["skill:a"][0]
    assert (rel.type, rel.source, rel.target) == ("VALID_WHEN", "skill:a", "condition:0001")
    assert dict(rel.props) == {"note": "first"} and node == condition(1)
    assert [node.id for _, node in out["skill:b"]] == ["condition:0001"]
    assert out["skill:none"] == []
    incoming = store.neighbors(["condition:0001", "condition:0002"], "VALID_WHEN", "in")
    assert [node.id for _, node in incoming["condition:0001"]] == ["skill:a", "skill:b"]
    assert all(rel.target == "condition:0001" for rel, _ in incoming["condition:0001"])
    assert incoming["condition:0002"] == []  # it is PROFITABLE_WHEN, not VALID_WHEN
    enabled = store.neighbors(["skill:a", "skill:b"], "ENABLES")
    assert [n.id for _, n in enabled["skill:a"]] == ["skill:b"] and enabled["skill:b"] == []
    assert [n.id for _, n in store.neighbors(["skill:b"], "ENABLES", "in")["skill:b"]] == ["skill:a"]


def test_unlink_removes_only_the_named_relationships(store: GraphStore) -> None:
    store.upsert(GraphBatch.of(
        [skill("a"), skill("b"), condition(1), condition(2)],
        [Relationship("VALID_WHEN", "skill:a", "condition:0001"),
         Relationship("VALID_WHEN", "skill:a", "condition:0002"),
         Relationship("VALID_WHEN", "skill:b", "condition:0001"),
         Relationship("ENABLES", "skill:a", "skill:b")]))
    removed = store.unlink([("VALID_WHEN", "skill:a", "condition:0001"),
                            ("VALID_WHEN", "skill:a", "condition:0009"),  # absent: ignored
                            ("PROFITABLE_WHEN", "skill:b", "condition:0001")])  # wrong type: absent
    assert removed == 1
    out = store.neighbors(["skill:a", "skill:b"], "VALID_WHEN")
    assert [n.id for _, n in out["skill:a"]] == ["condition:0002"]
    assert [n.id for _, n in out["skill:b"]] == ["condition:0001"]
    assert store.get("Condition", "condition:0001") is not None, "unlink never removes nodes"
    assert [n.id for _, n in store.neighbors(["skill:a"], "ENABLES")["skill:a"]] == ["skill:b"]
    assert store.counts().get(":VALID_WHEN") == 2
    assert store.unlink([]) == 0
    with pytest.raises(StoreError, match="relationship type"):
        store.unlink([("NOT_A_TYPE", "skill:a", "skill:b")])


def test_lineage_steps_come_in_index_order(store: GraphStore) -> None:
    doc = load_doc(GEMM_FIXTURE)
    store.upsert(lineage_to_batch(doc))
    view = store.lineage(doc.id)
    assert view is not None
    assert view.lineage.id == doc.id
    assert view.workload is not None and view.workload.props["name"] == "gemm"
    assert view.start is not None and view.start.props["sha"] == doc.data["start"]
    indexes = [s.props["index"] for s in view.steps]
    assert indexes == sorted(s["index"] for s in doc.data["steps"])
    assert store.lineage("lineage:missing") is None


def test_lineage_order_follows_the_index_not_the_id(store: GraphStore) -> None:
    steps = [Node("Step", f"step:{name}", {"index": index, "operator": name})
             for name, index in (("a", 2), ("b", 0), ("c", 10), ("d", 1))]
    store.upsert(GraphBatch.of(
        [Node("Lineage", "lineage:x", {"workload": "w"}), Node("Workload", "workload:w", {"name": "w"}), *steps],
        [Relationship("OF", "lineage:x", "workload:w"),
         *[Relationship("HAS_STEP", "lineage:x", s.id, {"index": s.props["index"]}) for s in steps]]))
    view = store.lineage("lineage:x")
    assert view is not None and view.start is None
    assert [s.id for s in view.steps] == ["step:b", "step:d", "step:a", "step:c"]


def test_vector_top_k_ranks_by_cosine(store: GraphStore) -> None:
    store.upsert(GraphBatch.of([
        skill("x", unit(1, 0, 0)), skill("xy", unit(1, 1, 0)), skill("y", unit(0, 1, 0)),
        skill("minus-x", unit(-1, 0.1, 0)), skill("scaled-x", unit(5, 0.5, 0)), skill("no-vector"),
    ]))
    hits = store.vector_top_k("Skill", "embedding", unit(1, 0, 0), 3)
    assert [h.node.id for h in hits] == ["skill:x", "skill:scaled-x", "skill:xy"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score == pytest.approx(5 / math.hypot(5, 0.5), abs=1e-5)
    assert hits[2].score == pytest.approx(1 / math.sqrt(2), abs=1e-5)
    everything = store.vector_top_k("Skill", "embedding", unit(0, 3, 0), 50)
    assert [h.node.id for h in everything][:2] == ["skill:y", "skill:xy"]
    assert "skill:no-vector" not in {h.node.id for h in everything}
    assert len(everything) == 5
    assert everything[-1].node.id == "skill:x" and everything[-1].score == pytest.approx(0.0, abs=1e-6)
    assert hits[0].node.props["embedding"] == unit(1, 0, 0)


def test_fulltext_top_k_ranks_matches(store: GraphStore) -> None:
    store.upsert(GraphBatch.of([
        skill("tiles", name="Large GEMM tiles", intent="Use big tiles in a matrix multiply kernel",
              anchor_text="a tl.dot loop"),
        skill("warps", name="Match warps", intent="More warps for wide softmax rows", anchor_text="any launch"),
        skill("group", name="Grouped order", intent="Swizzle program ids for L2 reuse in a matrix multiply",
              anchor_text="a 2-D tiled matrix multiply kernel"),
        skill("other", name="Unrelated", intent="Nothing in common", anchor_text="elsewhere"),
    ]))
    hits = store.fulltext_top_k("skill_text", "softmax warps", 10)
    assert [h.node.id for h in hits] == ["skill:warps"]
    hits = store.fulltext_top_k("skill_text", "matrix multiply", 10)
    assert {h.node.id for h in hits} == {"skill:group", "skill:tiles"}
    assert hits[0].node.id == "skill:group"  # "matrix multiply" twice beats once
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert store.fulltext_top_k("skill_text", "matrix multiply", 1)[0].node.id == "skill:group"
    assert store.fulltext_top_k("skill_text", "zebra", 10) == []
    store.fulltext_top_k("skill_text", 'K % 64 == 0 (fp16) AND "tiles" OR -x* ~ [a TO b] \\ /', 5)  # no error
    with pytest.raises(StoreError, match="skill_text"):
        store.fulltext_top_k("no_such_index", "tiles", 5)


def test_reingesting_the_same_batches_changes_nothing(store: GraphStore) -> None:
    batches = [lineage_to_batch(load_doc(GEMM_FIXTURE)), lineage_to_batch(load_doc(SOFTMAX_FIXTURE))]
    for batch in batches:
        store.upsert(batch)
    counts, exported = store.counts(), store.export()
    for batch in batches:
        store.upsert(batch)
    assert store.counts() == counts
    assert store.export() == exported


def test_nodes_merge_by_id_and_relationships_by_key(store: GraphStore) -> None:
    store.upsert(GraphBatch.of([skill("a", extra=1, more="x"), condition(1)],
                               [Relationship("VALID_WHEN", "skill:a", "condition:0001", {"w": 1})]))
    store.upsert(GraphBatch.of([skill("a", extra=2)],
                               [Relationship("VALID_WHEN", "skill:a", "condition:0001", {"w": 2})]))
    node = store.get("Skill", "skill:a")
    assert node is not None and node.props["extra"] == 2 and "more" not in node.props  # replaced, not merged
    assert store.counts()["Skill"] == 1 and store.counts()[":VALID_WHEN"] == 1
    rel, _ = store.neighbors(["skill:a"], "VALID_WHEN")["skill:a"][0]
    assert dict(rel.props) == {"w": 2}


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (Relationship("VALID_WHEN", "skill:a", "condition:missing"), "condition:missing"),
        (Relationship("VALID_WHEN", "skill:missing", "condition:0001"), "skill:missing"),
        (Relationship("OF", "skill:a", "condition:0001"), "OF"),
        (Relationship("ENABLES", "skill:a", "condition:0001"), "ENABLES"),
    ],
)
def test_a_bad_batch_is_rejected_whole(store: GraphStore, bad: Relationship, needle: str) -> None:
    store.upsert(GraphBatch.of([condition(0)]))
    before_counts, before = store.counts(), store.export()
    batch = GraphBatch.of([skill("a"), condition(1), condition(0, expr="changed")],
                          [Relationship("VALID_WHEN", "skill:a", "condition:0001"), bad])
    with pytest.raises(StoreError, match=needle):
        store.upsert(batch)
    assert store.counts() == before_counts
    assert store.export() == before  # nothing of the batch was written, not even its valid part


def test_an_id_cannot_change_label(store: GraphStore) -> None:
    store.upsert(GraphBatch.of([condition(1)]))
    before = store.export()
    with pytest.raises(StoreError, match="condition:0001"):
        store.upsert(GraphBatch.of([Node("Risk", "condition:0001", {"kind": "x", "description": "y"}), skill("z")]))
    assert store.export() == before


def test_two_writers_at_once_both_land(store: GraphStore) -> None:
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for i in range(15):
                nodes = [Node("Condition", f"condition:{name}-{i}-{j}", {"expr": f"{name} {i} {j}", "kind": "valid"})
                         for j in range(5)]
                store.upsert(GraphBatch.of([*nodes, skill(f"{name}-{i}")],
                                           [Relationship("VALID_WHEN", f"skill:{name}-{i}", n.id) for n in nodes]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    counts = store.counts()
    assert counts["Skill"] == 30 and counts["Condition"] == 150 and counts[":VALID_WHEN"] == 150


def test_export_is_ordered(store: GraphStore) -> None:
    store.upsert(lineage_to_batch(load_doc(SOFTMAX_FIXTURE)))
    exported = store.export()
    keys = [(n.label, n.id) for n in exported.nodes]
    assert keys == sorted(keys)
    rel_keys = [r.key for r in exported.relationships]
    assert rel_keys == sorted(rel_keys) and len(set(rel_keys)) == len(rel_keys)


def test_counts_of_an_empty_store(store: GraphStore) -> None:
    counts = store.counts()
    assert all(counts.get(label, 0) == 0 for label in LABELS)
    store.upsert(GraphBatch.of([skill("a"), skill("b"), condition(1)],
                               [Relationship("VALID_WHEN", "skill:a", "condition:0001")]))
    counts = store.counts()
    assert (counts["Skill"], counts["Condition"], counts[":VALID_WHEN"]) == (2, 1, 1)
    assert counts.get(":RISKS", 0) == 0


NESTED = {
    "none": None, "t": True, "f": False, "zero": 0, "int": -(2**53), "float": 0.1, "tiny": 5e-324,
    "big": 1.7976931348623157e308, "neg": -2.5, "text": "ünïcödé \u2603 \"quoted\" \n newline", "empty": "",
    "ints": [1, 2, 3], "floats": [0.1 * i for i in range(20)], "mixed": [1, "a", None, 2.5, True],
    "nested": {"a": {"b": [1, {"c": None}], "d": []}, "e": {}}, "empty_list": [], "empty_map": {},
    "tag_like": {"$f32": "not a vector"}, "embedding": [1.0 / (i + 1) for i in range(EMBEDDING_DIM)],
}


def test_properties_round_trip_exactly(store: GraphStore) -> None:
    store.upsert(GraphBatch.of([skill("p", **NESTED)], []))
    node = store.get("Skill", "skill:p")
    assert node is not None
    assert dict(node.props) == {**skill("p").props, **NESTED}
    for key, value in NESTED.items():
        assert type(node.props[key]) is type(value), key
    assert node.props["mixed"][4] is True and type(node.props["nested"]["a"]["b"][0]) is int


json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=25)
counter = iter(range(10**9))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(props=st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda k: k not in ("operator", "name")),
                             json_values, max_size=6))
def test_any_json_properties_round_trip(store: GraphStore, props: dict[str, Any]) -> None:
    node = Node("Risk", f"risk:{next(counter)}", props)
    store.upsert(GraphBatch.of([node]))
    found = store.get("Risk", node.id)
    assert found is not None
    assert _typed(found.props) == _typed(props)


def _typed(value: Any) -> Any:
    """A comparable form that tells 1, 1.0 and True apart (and -0.0 from 0.0)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def test_applications_and_gate_runs_round_trip(store: GraphStore) -> None:
    """The feedback loop's nodes (what ``KnowledgeBase.record_application`` writes) read back exactly."""
    from klineage.schema.gate_result import GateOutcome, GateResult
    from klineage.schema.ids import content_id, kernel_sha
    from klineage.schema.records import Application, kernel_id

    source = "k = 1\n"
    sha, kid = kernel_sha(source), kernel_id(kernel_sha(source))
    result = GateResult(sha, "cpu", {"torch": "2.11.0", "triton": "3.5"},
                        (GateOutcome("static", "pass"),
                         GateOutcome("correctness", "fail", "max abs err 0.5", {"max_abs": 0.5, "cases": [1, 2]})))
    run_id = content_id("GateRun", result.kernel_sha, result.verdict)
    run = Node("GateRun", run_id, {**result.to_dict(), "sample": False})
    apps = [Application("skill:a", sha, "fail-correctness", None, "2026-12-04T10:00:00.000001+00:00", run_id,
                        result.verdict, {"flops": 2.0 ** 40, "dtype": "bf16", "contiguous": True}),
            Application("skill:a", sha, "improved", 1.5, "2026-12-04T10:00:01.000000+00:00")]
    kernel = Node("Kernel", kid, {"sha": sha, "source": source, "features": {}, "summary": "", "sample": False})
    store.upsert(GraphBatch.of(
        [skill("a"), kernel, run, *(a.to_node() for a in apps)],
        [Relationship("VALIDATED_BY", kid, run_id),
         *(r for a in apps for r in (Relationship("USED", a.id, "skill:a"), Relationship("ON", a.id, kid)))]))
    got = store.get("GateRun", run_id)
    assert got is not None and dict(got.props) == dict(run.props)
    assert GateResult.from_dict(got.props) == result and got.props["verdict"] == "fail"
    [(_, judged)] = store.neighbors([kid], "VALIDATED_BY")[kid]
    assert judged == got
    used = store.neighbors(["skill:a"], "USED", "in")["skill:a"]
    back = sorted((Application.from_node(n) for _, n in used), key=lambda a: a.recorded_at)
    assert back == apps and back[0].verified and not back[1].verified and back[0].context["contiguous"] is True
    assert all(n.id == kid for app in apps for _, n in store.neighbors([app.id], "ON")[app.id])
    assert [n.id for n in store.find("Application", {"skill_id": "skill:a"})] == sorted(a.id for a in apps)


def test_the_write_lock_keeps_other_writers_out_until_it_is_released(
        store: GraphStore, another_handle: Callable[[GraphStore], GraphStore]) -> None:
    other = another_handle(store)
    other.lock_timeout_s = 0.3  # type: ignore[attr-defined]
    with store.exclusive():  # type: ignore[attr-defined]
        with store.exclusive():  # type: ignore[attr-defined]  # re-entrant in the holding thread
            store.upsert(GraphBatch.of([condition(1)]))
        start = time.monotonic()
        with pytest.raises(StoreError, match="write lock"), other.exclusive():  # type: ignore[attr-defined]
            pytest.fail("a second writer got the lock while the first held it")
        assert time.monotonic() - start >= 0.3
    with other.exclusive():  # type: ignore[attr-defined]  # released: the other writer gets it at once
        other.upsert(GraphBatch.of([condition(2)]))
    assert [n.id for n in store.find("Condition")] == ["condition:0001", "condition:0002"]


def test_a_skills_moves_together_read_back_as_written(store: GraphStore) -> None:
    """``Skill.together`` (a list of records in one property) survives the store: the search reads it back."""
    from klineage.schema.records import LAUNCH_CONFIGURATION_SET, PAYING_PAIR, Anchor, Skill, Together

    written = Skill("autotune", "Autotune", "", Anchor("", ""), "", {}, workloads=("gemm",), together=(
        Together("gemm", (4, 10, 9, 2), ("autotune", "num-warps", "pipelining", "tile-size"), 6.1509,
                 LAUNCH_CONFIGURATION_SET),
        Together("gemm", (7, 6), ("autotune", "contiguity-hints"), 1.08, PAYING_PAIR)))
    store.upsert(GraphBatch.of([written.to_node()]))
    node = store.get("Skill", written.id)
    assert node is not None
    assert Skill.from_node(node).together == written.together
