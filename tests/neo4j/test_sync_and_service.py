"""``klineage sync --to neo4j`` and the knowledge-base service (ingest, search, demo) on a real Neo4j."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from klineage.cli import neo4j_commands
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.neo4j_store import Neo4jStore

real = pytest.mark.real("neo4j")
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"


def _app() -> typer.Typer:
    app = typer.Typer()
    neo4j_commands.register(app)

    @app.command()
    def noop() -> None:  # a second command keeps `sync` a named subcommand
        """Nothing."""

    return app


def _env(neo4j_server: Any, data_dir: Path) -> dict[str, str]:
    return {**neo4j_server.env(), "KLINEAGE_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


@real
def test_sync_copies_the_embedded_store_into_neo4j_and_back(neo4j_store: Neo4jStore, neo4j_server: Any,
                                                            tmp_path: Path) -> None:
    from test_neo4j_store import sample_batch

    source = EmbeddedStore(tmp_path / "kb")
    source.upsert(sample_batch(n_skills=250, seed=1))
    runner = CliRunner()
    env = _env(neo4j_server, tmp_path / "kb")
    for _ in range(2):  # idempotent
        result = runner.invoke(_app(), ["sync", "--to", "neo4j", "--batch-size", "64"], env=env)
        assert result.exit_code == 0, result.output
        assert "copied" in result.output
        assert neo4j_store.export() == source.export()
        assert neo4j_store.counts() == source.counts()
    back = _env(neo4j_server, tmp_path / "back")
    result = runner.invoke(_app(), ["sync", "--to", "embedded"], env=back)
    assert result.exit_code == 0, result.output
    assert EmbeddedStore(tmp_path / "back").export() == source.export()
    result = runner.invoke(_app(), ["sync", "--to", "mysql"], env=env)
    assert result.exit_code == 2 and "expected one of neo4j, embedded" in result.output


@real
def test_sync_reports_an_unreachable_neo4j(tmp_path: Path) -> None:
    env = {"KLINEAGE_DATA_DIR": str(tmp_path / "kb"), "NEO4J_URI": "bolt://127.0.0.1:1"}
    result = CliRunner().invoke(_app(), ["sync", "--to", "neo4j"], env=env)
    assert result.exit_code == 2
    assert "cannot reach Neo4j at bolt://127.0.0.1:1" in result.output


@pytest.fixture(scope="module")
def embedder() -> Any:
    from klineage.kb.embedder import Embedder

    try:
        return Embedder()
    except Exception as exc:  # pragma: no cover - the model package is a dependency
        pytest.skip(f"embedding model unavailable: {exc}")


@real
def test_knowledge_base_on_neo4j_answers_like_the_embedded_one(neo4j_store: Neo4jStore, embedder: Any,
                                                               tmp_path: Path) -> None:
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    docs = [load_lineage_document(p) for p in sorted(FIXTURES.glob("*.json"))]
    assert docs
    neo, emb = KnowledgeBase(neo4j_store, embedder), KnowledgeBase(EmbeddedStore(tmp_path / "kb"), embedder)
    for kb in (neo, emb):
        for doc in docs:
            kb.ingest(doc)
    before = neo4j_store.counts()
    for doc in docs:
        neo.ingest(doc)  # re-ingesting changes nothing
    assert neo4j_store.counts() == before == emb.store.counts()
    assert neo4j_store.export() == emb.store.export()
    for text, context in [("make a matrix multiply faster on large square shapes",
                           {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "arch": 90}),
                          ("softmax over long rows", {"rows": 4096, "cols": 8192}),
                          (None, {"M": 128, "N": 128, "K": 64})]:
        a = neo.search(text=text, context=context, limit=5)
        b = emb.search(text=text, context=context, limit=5)
        assert [(h.skill.id, h.applicable) for h in a] == [(h.skill.id, h.applicable) for h in b], text
        assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-3, abs=1e-6)


@real
@pytest.mark.slow
def test_demo_runs_on_neo4j(neo4j_store: Neo4jStore, neo4j_server: Any, tmp_path: Path) -> None:
    env = {**os.environ, **_env(neo4j_server, tmp_path / "kb")}
    result = subprocess.run([sys.executable, "-m", "klineage.cli.main", "demo"], env=env, capture_output=True,
                            text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Neo4jStore('" in result.stdout and "Example search" in result.stdout
    assert neo4j_store.counts()["Skill"] > 0


@real
def test_graphql_api_serves_from_neo4j(neo4j_store: Neo4jStore, embedder: Any, tmp_path: Path) -> None:
    """What `klineage serve` runs, on Neo4j: searchSkills and lineages answer like on the embedded store."""
    from fastapi.testclient import TestClient

    from klineage.graphql.app import create_app
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    query = """query($ctx: JSON) {
        searchSkills(text: "faster matrix multiply", context: $ctx, limit: 5) {
            score applicable skill { id name } explanation { passed failed unknown evidence { workload } } }
        lineages { id workload steps { index operator accepted from { sha } to { sha } skill { operator } } } }"""
    answers = []
    for store in (neo4j_store, EmbeddedStore(tmp_path / "kb")):
        kb = KnowledgeBase(store, embedder)
        for path in sorted(FIXTURES.glob("*.json")):
            kb.ingest(load_lineage_document(path))
        with TestClient(create_app(kb)) as client:
            assert client.get("/healthz").status_code == 200
            response = client.post("/graphql", json={"query": query, "variables": {"ctx": {
                "M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}})
            data = response.json()
            assert response.status_code == 200 and "errors" not in data, data
            answers.append(data["data"])
    neo, emb = answers
    assert neo["lineages"] == emb["lineages"] and neo["lineages"]
    assert [h["skill"] for h in neo["searchSkills"]] == [h["skill"] for h in emb["searchSkills"]]
    assert [h["explanation"] for h in neo["searchSkills"]] == [h["explanation"] for h in emb["searchSkills"]]
