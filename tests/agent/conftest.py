"""A knowledge base built from the committed H200 lineages (the real embedder), shared by the agent tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.embedder import Embedder
from klineage.kb.service import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="package")
def kb_dir(committed_kb: tuple[Path, Any]) -> Path:
    """A folder holding the embedded store built from ``lineages/*.lineage.json`` (the session's one,
    tests/conftest.py: read only)."""
    return committed_kb[0]


@pytest.fixture(scope="package")
def kb(kb_dir: Path) -> KnowledgeBase:
    """The knowledge base of the measured lineages."""
    return KnowledgeBase(EmbeddedStore(kb_dir), Embedder())
