"""The feedback loop: verified applications move a skill's effect on new code and its confidence,
unverified claims never do, and enough verified ones re-induce its PROFITABLE_WHEN."""

from __future__ import annotations

from pathlib import Path

import pytest

from klineage.ingest.feedback import MIN_VERIFIED, record_with_feedback
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase, KnowledgeBaseError
from klineage.schema.gate_result import GateOutcome, GateResult
from klineage.schema.ids import kernel_sha

from .conftest import FIXTURES

SKILL = "skill:7c96e7e93d11cfbc"  # tile-size in the gemm fixture


def gate(source: str, verdict: str = "pass") -> GateResult:
    status = "pass" if verdict == "pass" else "fail"
    return GateResult(kernel_sha(source), "cpu", {"torch": "2.11.0"},
                      (GateOutcome("static", "pass"), GateOutcome("correctness", status, "checked")))


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.real("neo4j"))])
def kb(request: pytest.FixtureRequest, tmp_path: Path) -> KnowledgeBase:
    """The sample lineages in an embedded store, and in the real Neo4j (the tests/neo4j test server)."""
    from klineage.schema.lineage_document import load_lineage_document

    store = EmbeddedStore(tmp_path / "kb") if request.param == "embedded" else request.getfixturevalue("neo4j_store")
    kb = KnowledgeBase(store)
    for path in sorted(FIXTURES.glob("*.json")):
        kb.ingest(load_lineage_document(path))
    return kb


def test_verified_and_unverified_applications(kb: KnowledgeBase) -> None:
    before = kb.skill(SKILL)
    assert before is not None and before.applied == 0
    kb.record_application(SKILL, "k1 = 1\n", "improved", 9.0)  # a claim without a gate result
    claimed = kb.skill(SKILL)
    assert claimed is not None and (claimed.applied, claimed.verified, claimed.field_effect.n) == (1, 0, 0)
    app = kb.record_application(SKILL, "k2 = 2\n", "improved", 1.5, gate_result=gate("k2 = 2\n"))
    assert app.verified and app.verdict == "pass"
    runs = kb.gate_runs([kb.kernel(kernel_sha("k2 = 2\n")).id])  # type: ignore[union-attr]
    assert [r.verdict for found in runs.values() for r in found] == ["pass"]
    kb.record_application(SKILL, "k3 = 3\n", "fail-correctness", None, gate_result=gate("k3 = 3\n", "fail"))
    after = kb.skill(SKILL)
    assert after is not None
    assert (after.applied, after.verified, after.paid) == (3, 2, 1)
    assert after.field_effect.n == 1 and after.field_effect.median == 1.5
    assert after.effect == before.effect
    assert after.usage() == "applied 3 times by agents, paid 1 times (2 verified by the gates)"
    hit = next(h for h in kb.search(text="large gemm tiles", limit=10) if h.skill.id == SKILL)
    support = before.support_steps
    assert hit.confidence == pytest.approx((support + 1 + 1) / (support + 2 + 2))
    with pytest.raises(KnowledgeBaseError, match="judged kernel"):
        kb.record_application(SKILL, "k4 = 4\n", "pass", 1.1, gate_result=gate("other\n"))


def test_a_pass_with_nothing_timed_is_no_trial_of_profit(kb: KnowledgeBase) -> None:
    """Agents on a machine without a GPU validate under the interpreter: the kernel passed, nothing was timed.
    Recorded (applied), such a pass neither pays nor counts against the skill (it was no trial of its profit),
    so CPU runs cannot talk a measured skill out of its confidence."""
    before = next(h for h in kb.search(text="large gemm tiles", limit=10) if h.skill.id == SKILL)
    for i in range(4):
        source = f"cpu = {i}\n"
        app = kb.record_application(SKILL, source, "pass", None, gate_result=gate(source))
        assert not app.verified and app.gate_run_id
    skill = kb.skill(SKILL)
    assert skill is not None and (skill.applied, skill.verified, skill.paid) == (4, 0, 0)
    assert skill.admission.startswith("hypothesis: no timed trial")
    after = next(h for h in kb.search(text="large gemm tiles", limit=10) if h.skill.id == SKILL)
    assert after.confidence == before.confidence and after.score == before.score
    source = "cpu = fail\n"  # a failed gate judged the move: that is a trial (it did not pay)
    assert kb.record_application(SKILL, source, "fail-correctness", None, gate_result=gate(source, "fail")).verified
    failed = kb.skill(SKILL)
    assert failed is not None and (failed.applied, failed.verified, failed.paid) == (5, 1, 0)


def test_enough_verified_applications_reinduce_the_rule(kb: KnowledgeBase) -> None:
    old = [c.expr for c in kb.conditions([SKILL], "profitable")[SKILL]]
    n = MIN_VERIFIED + 6
    for i in range(n):  # contexts in portable features (what Problem.search_context gives)
        big = i % 2 == 0
        source = f"k = {i}\n"
        record_with_feedback(kb, SKILL, source, "improved" if big else "no-gain", 1.4 if big else 0.9,
                             gate(source), {"flops": 2.0 ** (40 if big else 30), "dtype_bytes": 2})
    new = kb.conditions([SKILL], "profitable")[SKILL]
    assert len(new) == 1 and new[0].source == "induced-feedback" and "flops" in new[0].expr, (old, new)
    assert new[0].oos_accuracy is not None and new[0].oos_accuracy > new[0].majority  # type: ignore[operator]
