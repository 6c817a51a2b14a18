"""A knowledge base built from the committed H200 lineages (the real embedder), shared by the agent tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from klineage.ingest.pipeline import ingest_lineages
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.embedder import Embedder
from klineage.kb.service import KnowledgeBase
from klineage.schema.lineage_document import load_lineage_document

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="package")
def kb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the embedded store built from ``lineages/*.lineage.json``."""
    folder = tmp_path_factory.mktemp("agent-kb")
    kb = KnowledgeBase(EmbeddedStore(folder), Embedder())
    ingest_lineages(kb, [load_lineage_document(p) for p in sorted((ROOT / "lineages").glob("*.lineage.json"))])
    return folder


@pytest.fixture(scope="package")
def kb(kb_dir: Path) -> KnowledgeBase:
    """The knowledge base of the measured lineages."""
    return KnowledgeBase(EmbeddedStore(kb_dir), Embedder())
