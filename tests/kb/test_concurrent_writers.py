"""Two writers ingesting at once into one knowledge base keep each other's merged evidence, on every store
kind (the embedded store's file lock, the Neo4j store's lease lock): issue 18, item 12."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from klineage.ingest.pipeline import ingest_lineages
from klineage.kb.service import KnowledgeBase
from klineage.kb.store import GraphStore
from klineage.schema.graph_spec import EMBEDDING_DIM
from klineage.schema.lineage_document import LineageDocument, parse_lineage_document

from .conftest import GEMM_FIXTURE


class SlowEmbedder:
    """A fixed vector after a pause: the pause sits between an ingest's read and its write, where two
    unlocked ingests lose each other's evidence."""

    def __init__(self, pause_s: float = 0.0) -> None:
        self.pause_s = pause_s

    def embed(self, texts: list[str]) -> list[list[float]]:
        time.sleep(self.pause_s)
        return [[1.0] + [0.0] * (EMBEDDING_DIM - 1) for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0] + [0.0] * (EMBEDDING_DIM - 1)


def _variant(gpu: str) -> LineageDocument:
    """The GEMM fixture as measured on another GPU: a distinct lineage with the same operators."""
    data: dict[str, Any] = copy.deepcopy(json.loads(GEMM_FIXTURE.read_text()))
    data["gpu"]["name"] = gpu
    return parse_lineage_document(data, f"{gpu}.json")


def test_two_writers_ingesting_at_once_keep_each_others_evidence(
        store: GraphStore, another_handle: Callable[[GraphStore], GraphStore]) -> None:
    handles = [store, another_handle(store)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def ingest(handle: GraphStore, gpu: str) -> None:
        try:
            kb = KnowledgeBase(handle, SlowEmbedder(pause_s=1.0))  # type: ignore[arg-type]
            start.wait(10)
            ingest_lineages(kb, [_variant(gpu)])
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(h, gpu)) for h, gpu in zip(handles, ("GPU-A", "GPU-B"),
                                                                                 strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)  # the writers take turns, each with slow embeddings: minutes on a loaded CI machine
    # a writer still running would go on writing into the next test's store: wait for it, or say so
    assert not any(t.is_alive() for t in threads), "a writer was still ingesting after 15 minutes"
    assert not errors, errors
    kb = KnowledgeBase(store, SlowEmbedder())  # type: ignore[arg-type]
    skills = kb.skills(first=100).items
    assert skills
    lineages = {_variant("GPU-A").id, _variant("GPU-B").id}
    for skill in skills:
        assert skill.support_lineages == 2, (skill.id, skill.support_lineages)
        assert {e.lineage_id for e in kb.evidence([skill.id])[skill.id]} == lineages, skill.id
