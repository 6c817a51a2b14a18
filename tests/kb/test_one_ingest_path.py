"""One way in: ingesting the committed lineages through GraphQL gives the knowledge base the CLI gives
(conditions re-induced from all the evidence, stale ones dropped), on both stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from klineage.graphql.app import create_app
from klineage.ingest.pipeline import ingest_lineages
from klineage.kb.service import KnowledgeBase
from klineage.schema.lineage_document import load_lineage_document

from .conftest import make_store

ROOT = Path(__file__).resolve().parents[2]
LINEAGES = sorted((ROOT / "lineages").glob("*.lineage.json"))
TOKEN = "one-path-token"
INGEST = "mutation($doc: JSON!) { ingestLineage(document: $doc) { lineageId skills } }"

pytestmark = pytest.mark.real("embedder")


def snapshot(kb: KnowledgeBase) -> dict[str, Any]:
    """Every skill with its effect, support and conditions of each kind (what search and agents read)."""
    skills = kb.skills(first=1000).items
    ids = [s.id for s in skills]
    conditions = {kind: kb.conditions(ids, kind) for kind in ("valid", "profitable")}
    return {s.id: {"effect": s.effect.to_dict(), "support": (s.support_steps, s.support_lineages),
                   "profitability": s.profitability,
                   **{kind: sorted(c.expr for c in conditions[kind][s.id]) for kind in conditions}}
            for s in skills}


def test_graphql_and_the_cli_ingest_to_the_same_knowledge_base(store_kind: str, tmp_path: Path, embedder: Any,
                                                                request: pytest.FixtureRequest,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    docs = [load_lineage_document(p) for p in LINEAGES]
    cli_store = make_store(store_kind, tmp_path / "cli", request)
    try:
        ingest_lineages(KnowledgeBase(cli_store, embedder), docs)  # what `klineage ingest lineages/` does
        by_cli = snapshot(KnowledgeBase(cli_store, embedder))
    finally:
        cli_store.close()
    api_store = make_store(store_kind, tmp_path / "api", request)  # Neo4j: the same database, emptied
    try:
        kb = KnowledgeBase(api_store, embedder)
        monkeypatch.setenv("KLINEAGE_API_TOKEN", TOKEN)
        with TestClient(create_app(kb)) as client:
            for path in LINEAGES:
                response = client.post("/graphql", json={"query": INGEST,
                                                         "variables": {"doc": json.loads(path.read_text())}},
                                       headers={"Authorization": f"Bearer {TOKEN}"})
                assert response.status_code == 200 and "errors" not in response.json(), response.text
        by_api = snapshot(kb)
    finally:
        api_store.close()
    assert by_cli and any(s["profitable"] for s in by_cli.values())
    assert by_api == by_cli
