"""Fixtures for tests that need a real Neo4j (``@pytest.mark.real("neo4j")``).

``neo4j_server`` (session): the server of ``NEO4J_URI``, or the local one of ``deploy/neo4j/start``,
started here when nothing answers (and stopped at the end of the session). When none can be had
the test is skipped with the reason, which ``KLINEAGE_REQUIRE_REAL=1`` turns into a failure.

This folder has no ``__init__.py`` on purpose: as a package named ``neo4j`` under ``tests/`` it would
shadow the driver. Its helper module is loaded by path (``_load_helper``).

``neo4j_stores``: a factory of connected ``Neo4jStore`` objects on one freshly cleared database
(the first call clears it); every store it made is closed after the test.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def _load_helper() -> Any:
    """``local_neo4j.py`` as one shared module (``klineage_local_neo4j``), loaded by path."""
    name = "klineage_local_neo4j"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("local_neo4j.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


local_neo4j = _load_helper()


@pytest.fixture(scope="session")
def neo4j_server() -> Iterator[Any]:
    try:
        conn = local_neo4j.neo4j_connection()
    except local_neo4j.Neo4jUnavailable as exc:
        pytest.skip(f"no Neo4j: {exc}")
    yield conn
    local_neo4j.stop_started_servers()


@pytest.fixture
def neo4j_stores(neo4j_server: Any) -> Iterator[Callable[[], Any]]:
    made: list[Any] = []

    def make() -> Any:
        store = local_neo4j.open_store(neo4j_server, clear=not made)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def neo4j_store(neo4j_stores: Callable[[], Any]) -> Any:
    return neo4j_stores()
