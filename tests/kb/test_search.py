"""Hybrid search: applicability rules, explanations, ranking by relevance × gain × confidence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.search import (
    APPLICABLE,
    NOT_APPLICABLE,
    UNKNOWN,
    OperatorAnchor,
    SearchError,
    SkillHit,
    _Point,
    make_request,
    nearest_shape_gain,
    reciprocal_rank_fusion,
)
from klineage.kb.service import KnowledgeBase
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.records import Anchor, Condition, Effect, Skill

from .conftest import GEMM_FIXTURE, SOFTMAX_FIXTURE, load_doc

pytestmark = pytest.mark.real("embedder")

GEMM_KERNEL = {"has_dot": True, "has_k_loop": True, "num_warps": 8, "num_stages": 3, "row_reduction": False}
ROW_KERNEL = {"has_dot": False, "has_k_loop": False, "num_warps": 4, "row_reduction": True}


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> KnowledgeBase:
    kb = KnowledgeBase(EmbeddedStore(tmp_path_factory.mktemp("search-kb")), embedder)
    for path in (GEMM_FIXTURE, SOFTMAX_FIXTURE):
        kb.ingest(load_doc(path))
    return kb


def by_operator(hits: list[SkillHit]) -> dict[str, SkillHit]:
    return {h.skill.operator: h for h in hits}


def check_order(hits: list[SkillHit]) -> None:
    """NOT_APPLICABLE hits come last with score 0, hits with a false PROFITABLE_WHEN just before them;
    within each of those tiers scores never increase down the list."""
    states = [h.applicable for h in hits]
    first_na = states.index(NOT_APPLICABLE) if NOT_APPLICABLE in states else len(states)
    assert all(s == NOT_APPLICABLE for s in states[first_na:]), states
    assert all(h.score == 0.0 for h in hits[first_na:])
    tiers = [2 if h.applicable == NOT_APPLICABLE else 1 if h.unprofitable else 0 for h in hits]
    assert tiers == sorted(tiers), tiers
    for tier in (0, 1):
        scores = [h.score for h, t in zip(hits, tiers, strict=True) if t == tier]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({}, "nothing to search for"),
        ({"text": "   "}, "nothing to search for"),
        ({"context": {}}, "nothing to search for"),
        ({"text": "x", "limit": 0}, "limit"),
        ({"text": "x", "context": {"colz": 1}}, "unknown feature 'colz'"),
        ({"text": "x", "context": {"dtype": "int4"}}, "dtype"),
        ({"text": "x", "context": [1, 2]}, "context: expected a mapping"),
    ],
)
def test_bad_requests_are_search_errors(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(SearchError, match=needle) as info:
        make_request(**kwargs)
    assert isinstance(info.value, ValueError)


def test_an_empty_search_names_what_to_give(kb: KnowledgeBase) -> None:
    with pytest.raises(SearchError) as info:
        kb.search()
    assert "text" in str(info.value) and "context" in str(info.value) and "kernel" in str(info.value)


def test_context_only_search_ranks_every_skill(kb: KnowledgeBase) -> None:
    hits = kb.search(context={"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "arch": 90}, limit=50)
    assert {h.skill.operator for h in hits} == {"grouped-order", "tile-size", "num-warps", "exp2"}
    check_order(hits)
    assert all(h.relevance == 1.0 for h in hits)
    top = hits[0]
    assert top.skill.operator == "tile-size"  # 2.08x measured at 4096^3 beats 1.05-1.1x
    assert top.expected_gain == pytest.approx(0.470 / 0.226)
    assert "nearest shape" in top.gain_basis and "M=4096" in top.gain_basis


def test_a_false_valid_when_makes_a_skill_not_applicable_and_last(kb: KnowledgeBase) -> None:
    hits = kb.search(context={"rows": 16384, "cols": 100000, "dtype": "bf16"}, limit=10)
    check_order(hits)
    warps = by_operator(hits)["num-warps"]
    assert warps.applicable == NOT_APPLICABLE and hits[-1] is warps and warps.score == 0.0
    assert len(warps.failed) == 1
    assert "cols <= 65536" in warps.failed[0] and "cols=100000" in warps.failed[0]
    assert any("cols >= 2048" in line for line in warps.passed)
    assert any("M * N >= 2 ** 20" in line and "missing M, N" in line for line in warps.unknown)


def test_anchor_decides_with_a_kernel(kb: KnowledgeBase) -> None:
    context = {"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16", "arch": 90}
    hits = by_operator(kb.search(text="tiles for a matrix multiply", context=context,
                                 kernel_features=ROW_KERNEL, limit=10))
    assert hits["tile-size"].applicable == NOT_APPLICABLE  # anchor has_dot is false on a row kernel
    assert any(line.startswith("anchor: has_dot") for line in hits["tile-size"].failed)
    assert hits["exp2"].applicable == APPLICABLE  # row_reduction and not has_dot; no VALID_WHEN
    gemm = by_operator(kb.search(context=context, kernel_features=GEMM_KERNEL, limit=10))
    assert gemm["tile-size"].applicable == APPLICABLE  # anchor true, arch >= 80 true
    assert gemm["grouped-order"].applicable == APPLICABLE
    assert gemm["num-warps"].applicable == UNKNOWN  # its VALID_WHEN cols <= 65536 is unknown for a GEMM
    assert "exp2" not in gemm  # a kernel-only search takes anchor matches; exp2's anchor is false here


def test_without_a_kernel_an_anchor_on_kernel_features_is_unknown(kb: KnowledgeBase) -> None:
    hits = by_operator(kb.search(context={"M": 8192, "N": 8192, "K": 8192, "arch": 90}, limit=10))
    tile = hits["tile-size"]
    assert tile.applicable == UNKNOWN
    assert any(line.startswith("anchor: has_dot") and "missing has_dot" in line for line in tile.unknown)
    assert "valid: arch >= 80" in tile.passed


def test_explanations_carry_evidence_and_risks(kb: KnowledgeBase) -> None:
    hits = by_operator(kb.search(text="more warps per program", context={"cols": 4096}, limit=10))
    warps = hits["num-warps"]
    assert {e.workload for e in warps.evidence} == {"gemm", "softmax"}
    assert len({e.lineage_id for e in warps.evidence}) == 2
    for ev in warps.evidence:
        assert ev.gpu == "NVIDIA H200" and ev.sample is True and ev.step_id.startswith("step:")
        assert ev.speedups and all({"shape", "dtype", "speedup"} <= set(s) for s in ev.speedups)
    softmax = next(e for e in warps.evidence if e.workload == "softmax")
    assert [s["speedup"] for s in softmax.speedups] == pytest.approx([0.301 / 0.262, 0.036 / 0.034, 0.030 / 0.031])
    assert [r.kind for r in warps.risks] == ["regression"]
    assert warps.skill.sample is True and warps.skill.support_steps == 2
    kinds = [c.kind for c in warps.checks]
    assert kinds[0] == "anchor" and set(kinds) == {"anchor", "valid", "profitable"}


def test_gain_uses_the_nearest_measured_shape(kb: KnowledgeBase) -> None:
    big = by_operator(kb.search(context={"M": 8192, "N": 8192, "K": 512, "dtype": "bf16"}, limit=10))
    grouped = big["grouped-order"]
    assert grouped.expected_gain == pytest.approx(0.128 / 0.135)  # lost 5% at 8192x8192x512
    assert any("K >= 1024" in line and "K=512" in line for line in grouped.failed)
    square = by_operator(kb.search(context={"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16"}, limit=10))
    assert square["grouped-order"].expected_gain == pytest.approx(1.81 / 1.70)
    assert square["grouped-order"].score > grouped.score


def test_text_relevance_orders_otherwise_equal_skills(tmp_path: Path, embedder: Any) -> None:
    kb = KnowledgeBase(EmbeddedStore(tmp_path), embedder)
    texts = {
        "exp": ("Exponential via exp2", "Compute the softmax exponential with exp2 and a folded log2(e) scale."),
        "tile": ("Large GEMM tiles", "Use bigger BLOCK_M and BLOCK_N tiles in a matrix multiplication."),
        "atomic": ("Split-K with atomics", "Partition the reduction dimension and add partial sums atomically."),
    }
    skills = [Skill(op, name, intent, Anchor("", "anywhere"), "c", {"operator": op}, support_steps=1)
              for op, (name, intent) in texts.items()]
    vectors = embedder.embed([s.embedding_text() for s in skills])
    kb.store.upsert(GraphBatch.of([Skill(**{**s.__dict__, "embedding": tuple(map(float, v))}).to_node()
                                   for s, v in zip(skills, vectors, strict=True)]))
    hits = kb.search(text="faster softmax exponential", limit=3)
    assert hits[0].skill.operator == "exp" and hits[0].relevance == pytest.approx(1.0)
    assert kb.search(text="matrix multiplication tiles", limit=1)[0].skill.operator == "tile"
    assert all(h.applicable == APPLICABLE for h in hits)  # no anchor, no conditions
    assert all(h.expected_gain == 1.0 and "unmeasured" in h.gain_basis for h in hits)


def synthetic_skill(op: str, speedups: list[float], support: int, embedding: tuple[float, ...]) -> Skill:
    return Skill(op, op, "synthetic", Anchor("", ""), "c", {"operator": op}, effect=Effect.of(speedups),
                 support_steps=support, support_lineages=1, embedding=embedding)


def test_confidence_grows_with_support_and_profitability_caps_gain(tmp_path: Path) -> None:
    vec = tuple([1.0] + [0.0] * 383)
    strong = synthetic_skill("strong", [1.5], 6, vec)
    weak = synthetic_skill("weak", [1.5], 1, vec)
    capped = synthetic_skill("capped", [3.0], 6, vec)
    rule = Condition("M >= 4096", "profitable", "induced")
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([strong.to_node(), weak.to_node(), capped.to_node(), rule.to_node()],
                               [Relationship("PROFITABLE_WHEN", capped.id, rule.id)]))
    kb = KnowledgeBase(store, embedder=None)
    hits = kb.search(context={"M": 1024}, limit=3)
    # strong 1.5 × 7/8 = 1.31 > weak 1.5 × 2/3 = 1.0 > capped: 3.0× measured but M >= 4096 is false, 1.0 × 7/8
    assert [h.skill.operator for h in hits] == ["strong", "weak", "capped"]
    assert hits[0].confidence == pytest.approx(7 / 8) and hits[1].confidence == pytest.approx(2 / 3)
    assert [h.score for h in hits] == pytest.approx([1.5 * 7 / 8, 1.5 * 2 / 3, 1.0 * 7 / 8])
    assert hits[2].expected_gain == 1.0 and "capped" in hits[2].gain_basis
    assert by_operator(kb.search(context={"M": 8192}, limit=3))["capped"].expected_gain == 3.0
    assert kb.search(context={"M": 8192}, limit=1)[0].skill.operator == "capped"


def test_the_catalog_is_refreshed_after_a_write(kb: KnowledgeBase, tmp_path: Path) -> None:
    local = KnowledgeBase(EmbeddedStore(tmp_path), kb.embedder)
    local.ingest(load_doc(GEMM_FIXTURE))
    first = {h.skill.operator for h in local.search(context={"cols": 4096}, limit=10)}
    assert first == {"grouped-order", "tile-size", "num-warps"}
    local.ingest(load_doc(SOFTMAX_FIXTURE))
    second = {h.skill.operator for h in local.search(context={"cols": 4096}, limit=10)}
    assert second == first | {"exp2"}


@settings(max_examples=60, deadline=None)
@given(cols=st.integers(1, 200_000), m=st.integers(1, 20_000), k=st.integers(1, 20_000),
       arch=st.sampled_from([None, 70, 80, 90]), kernel=st.sampled_from([None, GEMM_KERNEL, ROW_KERNEL]),
       text=st.sampled_from([None, "softmax warps", "matrix multiply tiles"]))
def test_not_applicable_is_never_ranked_above_applicable(kb: KnowledgeBase, cols: int, m: int, k: int,
                                                         arch: int | None, kernel: dict[str, Any] | None,
                                                         text: str | None) -> None:
    context = {"cols": cols, "M": m, "N": m, "K": k, "dtype": "bf16", "arch": arch}
    hits = kb.search(text=text, context=context, kernel_features=kernel, limit=10)
    check_order(hits)
    for hit in hits:
        failed_valid = [c for c in hit.checks if c.kind in ("valid", "anchor") and c.value is False]
        assert (hit.applicable == NOT_APPLICABLE) == bool(failed_valid)
        if hit.applicable == APPLICABLE:
            assert all(c.value is True for c in hit.checks if c.kind in ("valid", "anchor"))


def test_fusion_and_nearest_shape_helpers() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]], k=60)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61) and fused["a"] == pytest.approx(1 / 61)
    assert max(fused, key=fused.__getitem__) == "b"
    points = [_Point({"M": 1024, "N": 1024}, "bf16", 0.9), _Point({"M": 8192, "N": 8192}, "bf16", 2.0),
              _Point({"M": 8192, "N": 8192}, "fp16", 3.0), _Point({"rows": 10}, "bf16", 9.0)]
    assert nearest_shape_gain(points, {"M": 6000, "N": 8192, "dtype": "bf16"})[0] == 2.0
    assert nearest_shape_gain(points, {"M": 6000, "N": 8192, "dtype": "fp16"})[0] == 3.0
    assert nearest_shape_gain(points, {"M": 8192, "N": 8192})[0] == pytest.approx(2.5)  # tie: median
    assert nearest_shape_gain(points, {"M": 1500, "N": 900})[0] == 0.9
    assert nearest_shape_gain(points, {"K": 5}) is None
    assert nearest_shape_gain(points, {"rows": 5, "dtype": "bf16"})[0] == 9.0
    # comparable only when the context gives every feature the shape was measured over
    assert nearest_shape_gain(points, {"M": 1500}) is None
    row_points = [_Point({"rows": 8192, "cols": 1000}, "bf16", 21.0)]
    assert nearest_shape_gain(row_points, {"rows": 8192, "vocab": 32768, "dtype": "bf16"}) is None
    assert nearest_shape_gain(row_points, {"rows": 4096, "cols": 1000, "vocab": 7})[0] == 21.0


def test_a_stored_condition_outside_the_language_is_reported_not_fatal(tmp_path: Path) -> None:
    bad = Node("Condition", "condition:bad", {"expr": "os.system('x')", "kind": "valid"})
    skill = synthetic_skill("s", [1.2], 1, ())
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([skill.to_node(), bad], [Relationship("VALID_WHEN", skill.id, bad.id)]))
    hit = KnowledgeBase(store).search(context={"M": 1}, limit=1)[0]
    assert hit.applicable == UNKNOWN
    assert "cannot evaluate: a function call" in hit.unknown[0]


# ------------------------------------------------------------------------------------------------
# operator anchors: the caller's detect says where each operator could be ADDED to the kernel

GEMM_ANCHORS = {"tile-size": OperatorAnchor("applicable", "BLOCK_M=32 in matmul (line 9)"),
                "grouped-order": "present", "num-warps": {"state": "applicable", "detail": "launch (line 20)"},
                "exp2": OperatorAnchor("absent", "it needs tl.exp calls in softmax-like code")}


def test_operator_anchors_decide_what_can_be_added(kb: KnowledgeBase) -> None:
    context = {"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16", "arch": 90, "cols": 8192}
    kernel_only = by_operator(kb.search(context=context, kernel_features=GEMM_KERNEL,
                                        operator_anchors=GEMM_ANCHORS, limit=10))
    assert set(kernel_only) == {"tile-size", "num-warps"}  # anchor retrieval skips present/absent ones
    hits = by_operator(kb.search(text="matrix multiply", context=context, kernel_features=GEMM_KERNEL,
                                 operator_anchors=GEMM_ANCHORS, limit=10))
    assert hits["tile-size"].applicable == APPLICABLE
    assert "anchor applicable: tile-size can be added in the kernel at BLOCK_M=32 in matmul (line 9)" \
        in hits["tile-size"].passed
    # grouped-order's stored anchor holds on these features, but the kernel already has it
    grouped = hits["grouped-order"]
    assert grouped.applicable == NOT_APPLICABLE and grouped.score == 0.0
    assert any(line.startswith("anchor present: grouped-order is already in the kernel") for line in grouped.failed)
    assert hits["num-warps"].applicable == APPLICABLE  # num_warps=8 >= 4 and cols <= 65536
    check_order(list(hits.values()))
    # with a kernel every skill comes back explained for it (the relevance floor is for text alone)
    assert hits["exp2"].applicable == NOT_APPLICABLE
    exp2 = by_operator(kb.search(text="exp2 exponential", context=context, kernel_features=GEMM_KERNEL,
                                 operator_anchors=GEMM_ANCHORS, limit=10))["exp2"]
    assert exp2.applicable == NOT_APPLICABLE
    assert ("anchor absent: nowhere in the kernel to add exp2 (it needs tl.exp calls in softmax-like code)"
            in exp2.failed)


def test_an_absent_anchor_overrides_a_stored_predicate_that_holds(kb: KnowledgeBase) -> None:
    anchors = {"tile-size": "absent", "grouped-order": "absent", "num-warps": "absent", "exp2": "absent"}
    hits = kb.search(text="matrix multiply tiles", context={"M": 4096, "N": 4096, "K": 4096, "arch": 90},
                     kernel_features=GEMM_KERNEL, operator_anchors=anchors, limit=10)
    assert hits and all(h.applicable == NOT_APPLICABLE for h in hits)
    tile = by_operator(hits)["tile-size"]
    assert any(line.startswith("anchor absent: nowhere in the kernel to add tile-size (it needs ")
               for line in tile.failed), tile.failed  # the skill's own anchor description, given no detail


def test_an_operator_the_caller_did_not_detect_is_unknown_not_guessed(kb: KnowledgeBase) -> None:
    hits = by_operator(kb.search(context={"M": 8192, "N": 8192, "K": 8192, "arch": 90},
                                 kernel_features=GEMM_KERNEL, operator_anchors={"tile-size": "applicable"},
                                 limit=10))
    assert hits["tile-size"].applicable == APPLICABLE
    grouped = hits["grouped-order"]
    assert grouped.applicable == UNKNOWN
    assert any(line.startswith("anchor unknown: grouped-order") for line in grouped.unknown)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"kernel_features": GEMM_KERNEL, "operator_anchors": {"tile-size": "maybe"}}, "anchor state 'maybe'"),
        ({"kernel_features": GEMM_KERNEL, "operator_anchors": ["tile-size"]}, "operator_anchors: expected"),
        ({"kernel_features": GEMM_KERNEL, "operator_anchors": {"tile-size": 3}}, "operator_anchors"),
        ({"text": "x", "operator_anchors": {"tile-size": "applicable"}}, "kernel_features"),
    ],
)
def test_bad_operator_anchors_are_search_errors(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(SearchError, match=needle):
        make_request(**kwargs)
