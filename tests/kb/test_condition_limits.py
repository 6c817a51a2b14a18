"""The condition language refuses what it cannot evaluate safely, and a broken stored condition never
breaks a search (issue 18, item 11)."""

from __future__ import annotations

import contextlib
import logging
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.conditions import ConditionError, parse_condition
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import IngestError, KnowledgeBase
from klineage.schema.graph import GraphBatch, Relationship
from klineage.schema.lineage_document import load_lineage_document, parse_lineage_document
from klineage.schema.records import Condition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lineages"
SUM_600 = "+".join(["M"] * 600) + " > 0"  # 1,205 characters: under the length limit


@pytest.mark.parametrize("expr", [
    SUM_600,
    "(" * 60 + "M" + ")" * 60 + " > 0",
    " and ".join(f"M>{i}" for i in range(150)),
    "9**9**9 > 0",
    "M ** 1000 > 0",
    "2 ** M > 0",
    "1 / 0 > M",
    "'a' + 1 > M",
    "M > 0  # always",
    "Ｍ > 0",  # full-width M: NFKC-normalizes to the feature M
    "dtype == 'ｂｆ16'",
])
def test_expressions_that_cannot_evaluate_safely_are_refused_at_parse(expr: str) -> None:
    with pytest.raises(ConditionError):
        parse_condition(expr)


@pytest.mark.parametrize("expr", ["M > 0", "0 < K <= 8192", "M * N * K > 2 ** 30", "dtype in ('bf16', 'fp16')",
                                  "M % 64 == 0 and not causal", "-M < 3", "bytes / flops < 0.5"])
def test_ordinary_expressions_still_parse(expr: str) -> None:
    assert parse_condition(expr).expr == expr


def test_a_long_sum_is_refused_at_ingest() -> None:
    import json

    data = json.loads(sorted(FIXTURES.glob("*.json"))[0].read_text())
    data["skills"][0].setdefault("valid_when", []).append({"expr": SUM_600, "description": "junk"})
    doc = parse_lineage_document(data, "junk.json")
    kb = KnowledgeBase(EmbeddedStore(Path(__import__("tempfile").mkdtemp()) / "kb"), _NoEmbedder())
    with pytest.raises(IngestError):
        kb.ingest(doc)


class _NoEmbedder:
    """Search without text needs no embedder; ingest embeds skill texts: a fixed vector is enough here."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 15 for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0] + [0.0] * 15


def test_a_broken_stored_condition_is_skipped_with_a_warning(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    store = EmbeddedStore(tmp_path / "kb")
    kb = KnowledgeBase(store, _NoEmbedder())  # type: ignore[arg-type]
    for path in sorted(FIXTURES.glob("*.json")):
        kb.ingest(load_lineage_document(path))
    skill = kb.skills(first=1).items[0]
    broken = Condition(SUM_600, "valid", "declared")  # written behind ingest's back: a stored outage
    store.upsert(GraphBatch.of([broken.to_node()], [Relationship("VALID_WHEN", skill.id, broken.id)]))
    context: dict[str, Any] = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}
    with caplog.at_level(logging.WARNING):
        hits = kb.search(context=context, limit=10)
        again = kb.search(context=context, limit=10)
    assert hits and again
    hit = next(h for h in hits if h.skill.id == skill.id)
    assert hit.applicable != "APPLICABLE"  # the broken rule did not pass; it was not evaluated either
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and skill.id in r.getMessage()]
    assert warnings, [r.getMessage() for r in caplog.records]


def test_the_parse_cache_is_bounded() -> None:
    parse_condition.cache_clear()
    for i in range(1500):
        parse_condition(f"M > {i}")
    info = parse_condition.cache_info()
    assert info.maxsize is not None and info.maxsize <= 1024 and info.currsize <= 1024
    parse_condition.cache_clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(30):  # the longest expressions accepted before the bounds: ~1800 nodes, ~0.6 MiB each
            with contextlib.suppress(ConditionError):
                parse_condition("+".join(["M"] * 900) + f" > {i}")
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        parse_condition.cache_clear()
    assert retained < 8 * 1024 * 1024, f"{retained / 2**20:.0f} MiB retained by the parse cache"
