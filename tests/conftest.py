"""Test-session rules shared by every test.

Tests that need a real component (Neo4j, the embedding model, Chromium) carry
``@pytest.mark.real("neo4j")``. With ``KLINEAGE_REQUIRE_REAL=1`` (set by ``.ci/run``) a skipped
real test is reported as a failure, so CI cannot pass by skipping what it claims to test.
Tests that need a GPU carry ``@pytest.mark.gpu`` and are skipped on CPU machines (CI has none).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped on CPU machines")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("real")
    if report.skipped and marker is not None and os.environ.get("KLINEAGE_REQUIRE_REAL") == "1":
        component = marker.args[0] if marker.args else "a real component"
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid}: needs {component}, but was skipped while "
                           f"KLINEAGE_REQUIRE_REAL=1: {report.longrepr}")


# -- one validator result cache and one warm worker pool for the whole session ---------------------------
# The interpreter-heavy tests (tests/transfer, tests/agent, tests/transforms, tests/hostile) validate through
# ``cpu_validator``: every job of the session lands in one SQLite result cache, so a (kernel, workload,
# shapes, gates, seeds) job that two tests ask for runs once, and every job runs in the process-wide warm
# pool (``pool.default_pool``). Tests about the cache itself (a miss, a key, a forged result) and about
# isolation or a cold start keep a validator and a cache of their own.

_VALIDATOR_STATS = {"asked": 0, "cached": 0}


@pytest.fixture(scope="session")
def validator_cache_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one validator result cache (SQLite), in a session temporary folder."""
    return tmp_path_factory.mktemp("validator-cache") / "results.sqlite"


@pytest.fixture(scope="session")
def cpu_validator(validator_cache_path: Path) -> Callable[..., Any]:
    """``cpu_validator(seeds=1)``: the session's interpreter-mode ``LocalValidator`` for ``seeds``, all of
    them on the one result cache and the process-wide warm worker pool."""
    from klineage.validator import LocalValidator
    from klineage.validator.cache import ResultCache

    cache = ResultCache(validator_cache_path)
    made: dict[int, LocalValidator] = {}
    lock = threading.Lock()

    class _Counted(LocalValidator):
        def cached(self, key: str) -> Any:
            hit = super().cached(key)
            with lock:
                _VALIDATOR_STATS["asked"] += 1
                _VALIDATOR_STATS["cached"] += hit is not None
            return hit

    def get(seeds: int = 1) -> LocalValidator:
        with lock:
            if seeds not in made:
                made[seeds] = _Counted(cache=cache, device="cpu", seeds=seeds)
            return made[seeds]

    return get


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _VALIDATOR_STATS["asked"]:
        terminalreporter.write_line(f"shared validator cache: {_VALIDATOR_STATS['asked']} jobs asked, "
                                    f"{_VALIDATOR_STATS['cached']} answered from the cache")


# -- the knowledge base of the committed lineages, built once ----------------------------------------------


@pytest.fixture(scope="session")
def committed_kb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The committed H200 lineages (``lineages/*.lineage.json``) ingested with the real embedder into an
    embedded store, once per session: ``(store folder, ingest summary)``. Its users only read it (the agent
    tests, tests/ingest/test_committed_kb.py); a test that writes builds a store of its own."""
    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.embedder import Embedder
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    folder = tmp_path_factory.mktemp("committed-kb")
    lineages = sorted((Path(__file__).resolve().parents[1] / "lineages").glob("*.lineage.json"))
    summary = ingest_lineages(KnowledgeBase(EmbeddedStore(folder), Embedder()),
                              [load_lineage_document(p) for p in lineages])
    return folder, summary
