"""Durability of ingest (issue 18, item 12): concurrent ingests keep each other's merged evidence, a
writer waiting on a held lock gives up with a clear message, and sample evidence never merges into
measured skills."""

from __future__ import annotations

import copy
import fcntl
import json
import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from klineage.ingest.pipeline import ingest_lineages
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import IngestError, KnowledgeBase
from klineage.kb.store import StoreError
from klineage.schema.graph import GraphBatch, Node
from klineage.schema.lineage_document import LineageDocument, parse_lineage_document

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lineages" / "gemm.sample.json"


class SlowEmbedder:
    """A fixed vector after a pause: the pause sits between an ingest's read and its write, where two
    unlocked ingests lose each other's evidence."""

    def __init__(self, pause_s: float = 0.0) -> None:
        self.pause_s = pause_s

    def embed(self, texts: list[str]) -> list[list[float]]:
        time.sleep(self.pause_s)
        return [[1.0] + [0.0] * 15 for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0] + [0.0] * 15


def _variant(gpu: str, sample: bool = True) -> LineageDocument:
    """The GEMM fixture as measured on another GPU: a distinct lineage with the same operators."""
    data: dict[str, Any] = copy.deepcopy(json.loads(FIXTURE.read_text()))
    data["gpu"]["name"] = gpu
    data["sample"] = sample
    return parse_lineage_document(data, f"{gpu}.json")


def _ingest_in_process(folder: str, gpu: str, start: Any) -> None:
    kb = KnowledgeBase(EmbeddedStore(folder), SlowEmbedder(pause_s=1.0))  # type: ignore[arg-type]
    doc = _variant(gpu)
    start.wait()
    ingest_lineages(kb, [doc])


def test_two_concurrent_ingests_keep_each_others_evidence(tmp_path: Path) -> None:
    folder = str(tmp_path / "kb")
    EmbeddedStore(folder)
    context = multiprocessing.get_context("fork")
    start = context.Barrier(2)
    workers = [context.Process(target=_ingest_in_process, args=(folder, gpu, start)) for gpu in ("GPU-A", "GPU-B")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    kb = KnowledgeBase(EmbeddedStore(folder), SlowEmbedder())  # type: ignore[arg-type]
    skills = kb.skills(first=100).items
    assert skills
    lineages = {_variant("GPU-A").id, _variant("GPU-B").id}
    for skill in skills:
        assert skill.support_lineages == 2, (skill.id, skill.support_lineages)
        cited = {e.lineage_id for e in kb.evidence([skill.id])[skill.id]}
        assert cited == lineages, (skill.id, cited)


def test_a_writer_waiting_on_a_held_lock_times_out_with_a_clear_message(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "kb", lock_timeout_s=0.5)
    outcome: dict[str, Any] = {}
    with open(tmp_path / "kb" / ".lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another writer holds the lock and never lets go

        def write() -> None:
            try:
                store.upsert(GraphBatch.of([Node("Workload", "workload:x", {"name": "x"})], []))
            except StoreError as exc:
                outcome["error"] = str(exc)

        writer = threading.Thread(target=write, daemon=True)
        started = time.monotonic()
        writer.start()
        writer.join(10)
        assert not writer.is_alive(), "the writer waited forever on the held lock"
        assert time.monotonic() - started < 5
    assert "lock" in outcome["error"] and "0.5 s" in outcome["error"]
    assert store.counts()["Workload"] == 0


def test_sample_evidence_never_merges_into_measured_skills(tmp_path: Path) -> None:
    kb = KnowledgeBase(EmbeddedStore(tmp_path / "kb"), SlowEmbedder())  # type: ignore[arg-type]
    ingest_lineages(kb, [_variant("H200", sample=False)])
    before = {s.id: (s.support_steps, s.support_lineages, s.effect, s.sample) for s in kb.skills(first=100).items}
    conditions = kb.conditions(sorted(before), "profitable")
    counts = kb.store.counts()
    assert before and not any(v[3] for v in before.values())
    for ingest in (lambda: ingest_lineages(kb, [_variant("fixture-gpu")]), lambda: kb.ingest(_variant("fixture-2"))):
        with pytest.raises(IngestError, match="sample"):
            ingest()
    after = {s.id: (s.support_steps, s.support_lineages, s.effect, s.sample) for s in kb.skills(first=100).items}
    assert after == before
    assert kb.conditions(sorted(before), "profitable") == conditions
    assert kb.store.counts() == counts


def test_measured_evidence_does_not_average_with_sample_evidence(tmp_path: Path) -> None:
    kb = KnowledgeBase(EmbeddedStore(tmp_path / "kb"), SlowEmbedder())  # type: ignore[arg-type]
    ingest_lineages(kb, [_variant("fixture-gpu")])
    ingest_lineages(kb, [_variant("H200", sample=False)])
    alone = KnowledgeBase(EmbeddedStore(tmp_path / "alone"), SlowEmbedder())  # type: ignore[arg-type]
    ingest_lineages(alone, [_variant("H200", sample=False)])
    for skill in kb.skills(first=100).items:
        measured = alone.skill(skill.id)
        assert measured is not None and not skill.sample
        assert (skill.effect, skill.support_steps, skill.support_lineages) == (
            measured.effect, measured.support_steps, measured.support_lineages)
