"""The KnowledgeBase service: ingest and merge, idempotence, refusal, batched reads, applications."""

from __future__ import annotations

import copy
import statistics
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import IngestError, KnowledgeBase, KnowledgeBaseError
from klineage.kb.settings import open_store
from klineage.kb.store import StoreError
from klineage.schema.ids import kernel_sha
from klineage.schema.records import skill_id

from .conftest import GEMM_FIXTURE, SOFTMAX_FIXTURE, doc_of, fixture_data, load_doc

pytestmark = pytest.mark.real("embedder")


class CountingStore:
    """A store wrapper that counts calls per method."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


def speedups(*paths: Path, operator: str) -> list[float]:
    out = []
    for path in paths:
        for step in fixture_data(path)["steps"]:
            if step["operator"] == operator and step["accepted"]:
                out += [t["to_ms"] / t["from_ms"] for t in step["timings"]]
    return out


@pytest.fixture
def kb(tmp_path: Path, embedder: Any) -> KnowledgeBase:
    return KnowledgeBase(EmbeddedStore(tmp_path / "kb"), embedder)


def test_skills_from_two_lineages_merge(kb: KnowledgeBase) -> None:
    gemm = kb.ingest(load_doc(GEMM_FIXTURE))
    assert gemm.merged == () and len(gemm.skill_ids) == 3 and gemm.sample is True
    warps_id = skill_id("num-warps")
    alone = kb.skill(warps_id)
    assert alone is not None and (alone.support_steps, alone.support_lineages, alone.effect.n) == (1, 1, 3)
    softmax = kb.ingest(load_doc(SOFTMAX_FIXTURE))
    assert softmax.merged == (warps_id,)
    merged = kb.skill(warps_id)
    assert merged is not None
    assert (merged.support_steps, merged.support_lineages) == (2, 2)
    expected = speedups(GEMM_FIXTURE, SOFTMAX_FIXTURE, operator="num-warps")
    assert merged.effect.n == len(expected) == 6
    assert merged.effect.median == pytest.approx(statistics.median(expected))
    assert (merged.effect.min, merged.effect.max) == pytest.approx((min(expected), max(expected)))
    assert merged.name == alone.name and merged.intent == alone.intent  # the text stays as first stored
    # ... and learns where the skill was measured: the embedded text names both workloads, embedded again
    assert (alone.workloads, merged.workloads) == (("gemm",), ("gemm", "softmax"))
    assert "gemm, softmax kernels" in merged.embedding_text() and merged.embedding != alone.embedding
    assert merged.embedding == tuple(float(x) for x in kb.embedder.embed([merged.embedding_text()])[0])
    again = kb.ingest(load_doc(SOFTMAX_FIXTURE))  # nothing new: the vector is kept, not computed again
    assert warps_id in again.merged and kb.skill(warps_id).embedding == merged.embedding
    assert merged.architectures == ("sm_90",)
    conditions = kb.conditions([warps_id], "valid")[warps_id]
    assert [c.expr for c in conditions] == ["cols <= 65536"]
    profitable = sorted(c.expr for c in kb.conditions([warps_id], "profitable")[warps_id])
    assert profitable == ["M * N >= 2 ** 20", "cols >= 2048"]
    assert [r.kind for r in kb.risks([warps_id])[warps_id]] == ["regression"]  # same risk: one node
    evidence = kb.evidence([warps_id])[warps_id]
    assert [e.workload for e in evidence] == ["gemm", "softmax"]
    assert {e.lineage_id for e in evidence} == {gemm.lineage_id, softmax.lineage_id}
    assert kb.effect_of([warps_id])[warps_id] == merged.effect


def test_merging_does_not_depend_on_the_order(tmp_path: Path, embedder: Any) -> None:
    one = KnowledgeBase(EmbeddedStore(tmp_path / "one"), embedder)
    two = KnowledgeBase(EmbeddedStore(tmp_path / "two"), embedder)
    for path in (GEMM_FIXTURE, SOFTMAX_FIXTURE):
        one.ingest(load_doc(path))
    for path in (SOFTMAX_FIXTURE, GEMM_FIXTURE):
        two.ingest(load_doc(path))
    a, b = one.skill(skill_id("num-warps")), two.skill(skill_id("num-warps"))
    assert a is not None and b is not None
    assert (a.effect, a.support_steps, a.support_lineages) == (b.effect, b.support_steps, b.support_lineages)
    assert one.store.counts() == two.store.counts()


def test_reingesting_changes_nothing(kb: KnowledgeBase) -> None:
    for path in (GEMM_FIXTURE, SOFTMAX_FIXTURE):
        kb.ingest(load_doc(path))
    counts, exported = kb.store.counts(), kb.store.export()
    token = kb.store.state_token  # type: ignore[attr-defined]
    for path in (SOFTMAX_FIXTURE, GEMM_FIXTURE):
        report = kb.ingest(load_doc(path))
        assert set(report.merged) == set(report.skill_ids)
    assert kb.store.counts() == counts
    assert kb.store.export() == exported
    assert kb.store.state_token == token  # type: ignore[attr-defined]  # nothing was even rewritten


@pytest.mark.parametrize(
    ("where", "expr", "needle"),
    [
        (("valid_when", 0), "__import__('os').system('true')", "a function call"),
        (("profitable_when", 0), "colz >= 3", "unknown feature(s) colz"),
        (("anchor",), "x.y", "attribute access"),
        (("profitable_when", 0), "K >", "not a valid expression"),
    ],
)
def test_a_bad_expression_rejects_the_whole_document(kb: KnowledgeBase, where: tuple[Any, ...], expr: str,
                                                     needle: str) -> None:
    kb.ingest(load_doc(GEMM_FIXTURE))
    before, counts = kb.store.export(), kb.store.counts()
    data = fixture_data(SOFTMAX_FIXTURE)
    skill = data["skills"][1]  # exp2
    if where[0] == "anchor":
        skill["anchor"]["predicate"] = expr
    else:
        skill.setdefault(where[0], [{"expr": "cols > 1"}])[where[1]] = {"expr": expr}
    with pytest.raises(IngestError) as info:
        kb.ingest(doc_of(data))
    message = str(info.value)
    assert needle in message and "'exp2'" in message and repr(expr) in message and "not ingested" in message
    assert kb.store.export() == before and kb.store.counts() == counts


def test_a_failing_store_write_leaves_nothing(kb: KnowledgeBase) -> None:
    kb.ingest(load_doc(GEMM_FIXTURE))
    before = kb.store.export()
    data = fixture_data(SOFTMAX_FIXTURE)
    data["kernels"][0]["features"] = {"bad": float("nan")}  # not storable: the store refuses the batch
    with pytest.raises(StoreError, match="non-finite"):
        kb.ingest(doc_of(data))
    assert kb.store.export() == before


def test_enables_links_skills_across_lineages(kb: KnowledgeBase) -> None:
    kb.ingest(load_doc(SOFTMAX_FIXTURE))
    data = copy.deepcopy(fixture_data(GEMM_FIXTURE))
    data["skills"][0]["enables"] = ["exp2"]  # grouped-order enables a skill learned in the softmax lineage
    kb.ingest(doc_of(data))
    enabled = kb.enables([skill_id("grouped-order"), skill_id("tile-size"), skill_id("num-warps")])
    assert [s.operator for s in enabled[skill_id("grouped-order")]] == ["exp2"]
    assert [s.operator for s in enabled[skill_id("tile-size")]] == ["num-warps"]
    assert [s.operator for s in enabled[skill_id("num-warps")]] == ["exp2"]


def test_batched_reads_cost_one_store_call_each(tmp_path: Path, embedder: Any) -> None:
    counting = CountingStore(EmbeddedStore(tmp_path))
    kb = KnowledgeBase(counting, embedder)  # type: ignore[arg-type]
    for path in (GEMM_FIXTURE, SOFTMAX_FIXTURE):
        kb.ingest(load_doc(path))
    ids = [s.id for s in kb.skills(first=100).items]
    assert len(ids) == 4
    for call, expected in [(lambda: kb.conditions(ids, "valid"), {"neighbors": 1}),
                           (lambda: kb.conditions(ids, "profitable"), {"neighbors": 1}),
                           (lambda: kb.risks(ids), {"neighbors": 1}),
                           (lambda: kb.enables(ids), {"neighbors": 1}),
                           (lambda: kb.evidence(ids), {"neighbors": 1, "get_many": 1}),
                           (lambda: kb.skills(first=2), {"find": 1})]:
        counting.calls.clear()
        result = call()
        assert counting.calls == expected
        assert result
    with pytest.raises(KnowledgeBaseError, match="kind"):
        kb.conditions(ids, "sometimes")


def test_skill_pages(kb: KnowledgeBase) -> None:
    for path in (GEMM_FIXTURE, SOFTMAX_FIXTURE):
        kb.ingest(load_doc(path))
    seen, after = [], None
    while True:
        page = kb.skills(first=3, after=after)
        seen += [s.id for s in page.items]
        if not page.has_next:
            break
        after = page.end_cursor
    assert seen == sorted(seen) and len(seen) == 4
    only = kb.skills(operator="exp2")
    assert [s.operator for s in only.items] == ["exp2"] and not only.has_next
    assert kb.skills(first=0).items == () and kb.skills(first=0).has_next
    assert kb.skill("skill:nope") is None


def test_lineages_kernels_and_gate_runs(kb: KnowledgeBase) -> None:
    report = kb.ingest(load_doc(GEMM_FIXTURE))
    kb.ingest(load_doc(SOFTMAX_FIXTURE))
    assert [w.name for w in kb.workloads()] == ["gemm", "softmax"]
    assert len(kb.lineages()) == 2 and [v.lineage.workload for v in kb.lineages("gemm")] == ["gemm"]
    view = kb.lineage(report.lineage_id)
    assert view is not None and [s.index for s in view.steps] == [0, 1, 2, 3]
    data = fixture_data(GEMM_FIXTURE)
    kernels = kb.lineage_kernels(view)
    assert [k.sha for k in kernels] == [k["sha"] for k in data["kernels"]]  # walk order
    start = kb.kernel(data["start"])
    assert start is not None and start.source == data["kernels"][0]["source"]
    assert kb.kernel("0" * 64) is None
    validated = data["steps"][0]["gate_runs"][0]["kernel_sha"]
    target = kb.kernel(validated)
    assert target is not None
    runs = kb.gate_runs([target.id, start.id])
    assert [r.verdict for r in runs[target.id]] == ["pass"] and runs[start.id] == []


def test_record_application(kb: KnowledgeBase) -> None:
    kb.ingest(load_doc(GEMM_FIXTURE))
    sid = skill_id("tile-size")
    source = "import triton\n# an agent's kernel\n"
    app = kb.record_application(sid, source, "pass", 1.4)
    assert (app.skill_id, app.kernel_sha, app.outcome, app.speedup) == (sid, kernel_sha(source), "pass", 1.4)
    counts = kb.store.counts()
    assert counts["Application"] == 1 and counts[":USED"] == 1
    kernel = kb.kernel(kernel_sha(source))
    assert kernel is not None and kernel.source == source
    kb.record_application(sid, source, "regression", 0.9)
    assert kb.store.counts()["Application"] == 2
    assert kb.store.counts()["Kernel"] == counts["Kernel"]  # the kernel node is reused
    assert sorted(a.outcome for a in kb.applications([sid])[sid]) == ["pass", "regression"]
    start = fixture_data(GEMM_FIXTURE)["kernels"][0]
    kb.record_application(sid, start["source"], "pass")
    kept = kb.kernel(start["sha"])
    assert kept is not None and kept.features == start["features"]  # not overwritten
    before = kb.store.export()
    for args, needle in [(("skill:nope", source, "pass"), "unknown skill skill:nope"),
                         ((sid, "  ", "pass"), "kernel_source"),
                         ((sid, source, "Passed!"), "outcome"),
                         ((sid, source, "pass", -1.0), "speedup"),
                         ((sid, source, "pass", float("nan")), "speedup")]:
        with pytest.raises(KnowledgeBaseError, match=needle):
            kb.record_application(*args)
    assert kb.store.export() == before


def test_open_store_from_the_environment(tmp_path: Path) -> None:
    store = open_store({"KLINEAGE_DATA_DIR": str(tmp_path / "data")})
    assert isinstance(store, EmbeddedStore) and store.data_dir == tmp_path / "data"
    explicit = open_store({"KLINEAGE_STORE": "Embedded", "KLINEAGE_DATA_DIR": str(tmp_path / "x")})
    assert isinstance(explicit, EmbeddedStore)
    with pytest.raises(StoreError, match="expected one of embedded, neo4j"):
        open_store({"KLINEAGE_STORE": "sqlite"})
