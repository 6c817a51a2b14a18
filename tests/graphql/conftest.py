"""A knowledge base built from the sample lineage fixtures, and a GraphQL client over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from klineage.graphql.app import create_app
from klineage.ingest.pipeline import ingest_lineages
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase
from klineage.schema.lineage_document import load_lineage_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lineages"
TOKEN = "test-token-123"  # the same value as in test_api.py


class CountingStore:
    """Wraps a store and counts calls per method, to prove DataLoaders bound the round trips."""

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

    def total(self) -> int:
        return sum(self.calls.values())


@pytest.fixture(scope="session")
def embedder() -> Any:
    from klineage.kb.embedder import Embedder

    return Embedder()


@pytest.fixture
def kb(tmp_path: Path, embedder: Any) -> KnowledgeBase:
    kb = KnowledgeBase(CountingStore(EmbeddedStore(tmp_path / "kb")), embedder)  # type: ignore[arg-type]
    ingest_lineages(kb, [load_lineage_document(path) for path in sorted(FIXTURES.glob("*.json"))])  # the one path
    return kb


@pytest.fixture
def client(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("KLINEAGE_API_TOKEN", TOKEN)
    with TestClient(create_app(kb)) as c:
        yield c
