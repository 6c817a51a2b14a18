"""What Neo4j Browser shows of the measured knowledge base (the committed lineages ingested into the
real Neo4j): each lineage is a chain of kernels ``(:Kernel)-[:EVOLVES_TO {skill, speedup}]->(:Kernel)``
from naive to expert, rejected steps are dead-end branches, the saved queries run, and the data nodes
hold only what a person wants to read (no ``__json``/``__sig``/``__ft_`` bookkeeping, no 'null'
strings for missing values)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.neo4j_store import META_LABEL, PROPS_LABEL, Neo4jStore

ROOT = Path(__file__).resolve().parents[2]
LINEAGES = ROOT / "lineages"
QUERIES = ROOT / "deploy" / "neo4j" / "browser" / "lineage-queries.cypher"
GRASS = ROOT / "deploy" / "neo4j" / "browser" / "klineage.grass"


def _run(store: Neo4jStore, query: str, **params: Any) -> list[dict[str, Any]]:
    with store._driver.session(database=store.database) as session:  # raw Cypher, as Browser runs it
        return [dict(record.items()) for record in session.run(query, params)]


def saved_queries(text: str) -> list[str]:
    """The queries of a .cypher file of saved queries (comment lines dropped, split at ';')."""
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))
    return [q.strip() for q in body.split(";") if q.strip()]


@pytest.fixture(scope="module")
def measured(neo4j_server: Any) -> Any:
    """The real Neo4j, emptied, holding the committed lineages ingested (``ingest_lineages``)."""
    import klineage_local_neo4j as local_neo4j

    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    store = local_neo4j.open_store(neo4j_server, clear=True)
    docs = [load_lineage_document(p) for p in sorted(LINEAGES.glob("*.lineage.json"))]
    assert docs and not any(d.sample for d in docs)
    ingest_lineages(KnowledgeBase(store), docs)
    yield store, [json.loads(p.read_text(encoding="utf-8")) for p in sorted(LINEAGES.glob("*.lineage.json"))]
    store.close()


@pytest.mark.real("neo4j")
@pytest.mark.slow
def test_each_lineage_is_a_chain_from_naive_to_expert(measured: Any) -> None:
    store, docs = measured
    for data in docs:
        lineage = f"{data['workload']['name']}"
        accepted = [s for s in data["steps"] if s["accepted"]]
        rows = _run(store, "MATCH (l:Lineage {workload: $w})-[:STARTS_AT]->(expert:Kernel) "
                    "MATCH p = (naive:Kernel)-[:EVOLVES_TO*]->(expert) "
                    "WHERE all(r IN relationships(p) WHERE r.lineage = l.id AND r.accepted) "
                    "AND NOT EXISTS { MATCH (:Kernel)-[x:EVOLVES_TO {lineage: l.id}]->(naive) } "
                    "RETURN naive.name AS naive, expert.name AS expert, "
                    "[r IN relationships(p) | r {.skill, .speedup, .label}] AS chain", w=lineage)
        assert len(rows) == 1, (lineage, rows)
        chain = rows[0]["chain"]
        assert rows[0]["naive"] == f"{lineage} v0 naive"
        assert rows[0]["expert"] == f"{lineage} v{len(accepted)} expert"
        # forward order: the last simplification the walk accepted is the first skill applied
        assert [r["skill"] for r in chain] == [s["operator"] for s in reversed(accepted)]
        for edge in chain:
            assert isinstance(edge["speedup"], float) and edge["speedup"] > 0
            assert edge["label"] == f"{edge['skill']} ×{edge['speedup']:.2f}"
        # a rejected step hangs off the chain: its kernel leads into the chain and nothing leads to it
        for step in (s for s in data["steps"] if not s["accepted"]):
            dead = _run(store, "MATCH (l:Lineage {workload: $w}) "
                        "MATCH (k:Kernel)-[e:EVOLVES_TO {lineage: l.id, step: $i}]->(:Kernel) "
                        "RETURN e {.*} AS e, COUNT { (:Kernel)-[:EVOLVES_TO]->(k) } AS incoming",
                        w=lineage, i=step["index"])
            assert len(dead) == 1 and dead[0]["incoming"] == 0
            assert dead[0]["e"]["accepted"] is False and dead[0]["e"]["gate"] == step["gate"]
            assert "speedup" not in dead[0]["e"]  # no timings: absent, not null


@pytest.mark.real("neo4j")
@pytest.mark.slow
def test_data_nodes_hold_no_bookkeeping_and_no_null_strings(measured: Any) -> None:
    store, _ = measured
    rows = _run(store, f"MATCH (n) WHERE NOT n:{PROPS_LABEL} AND NOT n:{META_LABEL} "
                "UNWIND keys(n) AS key WITH n, key WHERE key STARTS WITH '__' OR n[key] = 'null' "
                "RETURN labels(n)[0] AS label, n.id AS id, key LIMIT 5")
    assert rows == []
    rows = _run(store, "MATCH ()-[r]->() UNWIND keys(r) AS key WITH r, key "
                "WHERE key STARTS WITH '__' OR r[key] = 'null' RETURN type(r) AS t, key LIMIT 5")
    assert rows == []
    # a missing value is absent: a step accepted by every gate has no `gate` property
    assert _run(store, "MATCH (s:Step {accepted: true}) WHERE s.gate IS NOT NULL RETURN s.id LIMIT 1") == []
    step = next(n for n in store.find("Step", {"accepted": True}, limit=1))
    assert step.props["gate"] is None  # ...and still reads back as None through the store


@pytest.mark.real("neo4j")
@pytest.mark.slow
def test_saved_queries_draw_the_chain_and_a_skill_with_its_evidence(measured: Any) -> None:
    store, _ = measured
    queries = saved_queries(QUERIES.read_text(encoding="utf-8"))
    chain = _run(store, queries[0])
    assert chain and {r["e"]["skill"] for r in chain} >= {"pipelining", "num-warps"}
    evidence = _run(store, queries[1])
    assert evidence and all(r["sk"]["operator"] == "pipelining" for r in evidence)
    assert {r["l"]["workload"] for r in evidence if r["l"]} >= {"gemm", "attention"}
    for query in queries[2:]:
        assert _run(store, query), query
    grass = GRASS.read_text(encoding="utf-8")
    evolves = re.search(r'relationship\.EVOLVES_TO\s*\{((?:[^{}"]|"[^"]*")*)\}', grass)
    assert evolves and 'caption: "{label}"' in evolves.group(1)
    kernel = re.search(r'node\.Kernel\s*\{((?:[^{}"]|"[^"]*")*)\}', grass)
    assert kernel and 'caption: "{name}"' in kernel.group(1)


@pytest.mark.real("neo4j")
@pytest.mark.slow
def test_a_legacy_layout_is_rewritten_when_the_store_opens(neo4j_server: Any) -> None:
    import klineage_local_neo4j as local_neo4j

    store = local_neo4j.open_store(neo4j_server, clear=True)
    try:
        _run(store, "CREATE (:Risk {id: 'risk:old', kind: 'regression', detail: 'null', extra: '{\"a\":1}', "
             "__json: ['detail', 'extra'], __sig: 'x', __ft_skill_text: 'old'})")
        reopened = local_neo4j.open_store(neo4j_server, clear=False)
        try:
            node = reopened.get("Risk", "risk:old")
            assert node is not None and node.props == {"kind": "regression", "detail": None, "extra": {"a": 1}}
            stored = _run(reopened, "MATCH (n:Risk {id: 'risk:old'}) RETURN properties(n) AS p")[0]["p"]
            assert stored == {"id": "risk:old", "kind": "regression", "extra": '{"a":1}'}
        finally:
            reopened.close()
    finally:
        store.close()
