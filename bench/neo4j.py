"""Neo4j store benchmark on SYNTHETIC data (labelled synthetic; these are not measured skills).

Measured in one run against the Neo4j of NEO4J_URI (default: the local one of deploy/neo4j/start):

1. write throughput (nodes + relationships per second) of
   * batched writes: ``Neo4jStore.upsert`` of 1,000 records per transaction (UNWIND ... MERGE),
   * one record per transaction through ``Neo4jStore.upsert``,
   * one record per transaction as a bare ``MERGE`` through the driver (the floor of per-row writes);
2. searchSkills at 10,000 synthetic skills (embedded with the real model), Neo4j against the embedded
   store: p50/p99 of ``KnowledgeBase.search`` (text + context: vector index, full-text index, anchors,
   conditions) and of the two index queries alone (``vector_top_k`` and ``fulltext_top_k``, k = 50).

The benchmark EMPTIES the Neo4j database it uses: it refuses unless the database is empty or
``--clear`` is given.

    deploy/neo4j/start && .venv/bin/python bench/neo4j.py --clear
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# This file is named neo4j.py: drop its folder from the path so that `import neo4j` finds the driver.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

from klineage.kb.embedded_store import EmbeddedStore  # noqa: E402
from klineage.kb.neo4j_store import Neo4jStore  # noqa: E402
from klineage.kb.store import StoreError  # noqa: E402
from klineage.schema.graph import GraphBatch, Node, Relationship  # noqa: E402

SYNTHETIC = "SYNTHETIC data, not measured"


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3


def timed(fn: Callable[[int], Any], n: int) -> list[float]:
    """Wall-clock seconds of ``fn(i)`` for i in range(n)."""
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def write_records(prefix: str, n: int) -> tuple[list[Node], list[Relationship]]:
    """``n`` synthetic Skill nodes, ``n`` Risk nodes and ``n`` RISKS relationships between them."""
    nodes: list[Node] = []
    rels: list[Relationship] = []
    for i in range(n):
        skill, risk = f"skill:{prefix}-{i}", f"risk:{prefix}-{i}"
        nodes.append(Node("Skill", skill, {"name": f"synthetic skill {i}", "intent": "synthetic benchmark record",
                                           "anchor_text": "synthetic", "effect": {"median": 1.1, "n": 3},
                                           "support_steps": i, "sample": True}))
        nodes.append(Node("Risk", risk, {"kind": "synthetic", "description": f"synthetic risk {i}"}))
        rels.append(Relationship("RISKS", skill, risk))
    return nodes, rels


def bench_writes(store: Neo4jStore, batched_n: int, single_n: int) -> list[tuple[str, int, float]]:
    """(method, records, seconds) for the three write methods."""
    rows = []
    nodes, rels = write_records("batched", batched_n)
    t = time.perf_counter()
    for start in range(0, len(nodes), 1000):
        store.upsert(GraphBatch(tuple(nodes[start:start + 1000]), ()))
    for start in range(0, len(rels), 1000):
        store.upsert(GraphBatch((), tuple(rels[start:start + 1000])))
    rows.append(("batched UNWIND, 1000 records/tx (Neo4jStore.upsert)", len(nodes) + len(rels),
                 time.perf_counter() - t))

    nodes, rels = write_records("single", single_n)
    t = time.perf_counter()
    for node in nodes:
        store.upsert(GraphBatch((node,), ()))
    for rel in rels:
        store.upsert(GraphBatch((), (rel,)))
    rows.append(("one record/tx (Neo4jStore.upsert)", len(nodes) + len(rels), time.perf_counter() - t))

    nodes, rels = write_records("raw", single_n)
    driver = store._driver
    t = time.perf_counter()
    with driver.session(database=store.database) as session:
        for node in nodes:
            session.execute_write(lambda tx, n=node: tx.run(
                f"MERGE (n:{n.label} {{id: $id}}) SET n += $props",
                {"id": n.id, "props": {k: v for k, v in n.props.items() if not isinstance(v, dict)}}).consume())
        for rel in rels:
            session.execute_write(lambda tx, r=rel: tx.run(
                "MATCH (a:Skill {id: $s}) MATCH (b:Risk {id: $t}) MERGE (a)-[:RISKS]->(b)",
                {"s": r.source, "t": r.target}).consume())
    rows.append(("one record/tx (bare MERGE via the driver)", len(nodes) + len(rels), time.perf_counter() - t))
    return rows


def _load_bench_search() -> Any:
    """bench/search.py (its synthetic skill generator), loaded by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("klineage_bench_search", HERE / "search.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skills", type=int, default=10_000,
                        help="synthetic skills both stores hold for the search measurements")
    parser.add_argument("--queries", type=int, default=200, help="timed queries of each kind on each store")
    parser.add_argument("--batched", type=int, default=5_000, help="Skill+Risk pairs written in batches")
    parser.add_argument("--single", type=int, default=500, help="Skill+Risk pairs written one per tx")
    parser.add_argument("--clear", action="store_true", help="empty the Neo4j database first")
    args = parser.parse_args()

    try:
        neo = Neo4jStore.from_env()
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if sum(neo.counts().values()) and not args.clear:
        print(f"error: {neo!r} is not empty; the benchmark empties it: pass --clear", file=sys.stderr)
        return 2
    print(f"Neo4j {'.'.join(map(str, neo.server_version))} at {neo.uri}, database {neo.database!r}; "
          f"{os.cpu_count()} CPU(s). All data below is {SYNTHETIC}.\n")

    neo.clear()
    print("1. Write throughput (nodes + relationships per second)")
    for method, records, seconds in bench_writes(neo, args.batched, args.single):
        print(f"   {method:<55} {records:>7} records in {seconds:7.2f} s = {records / seconds:9.0f} /s")

    print(f"\n2. searchSkills at {args.skills} synthetic skills ({SYNTHETIC})")
    search = _load_bench_search()
    OBJECTS, VERBS, synthetic_batch = search.OBJECTS, search.VERBS, search.synthetic_batch

    from klineage.kb.embedder import Embedder
    from klineage.kb.service import KnowledgeBase

    embedder = Embedder()
    t = time.perf_counter()
    batch = synthetic_batch(args.skills, embedder)
    print(f"   embedded {args.skills} synthetic skills in {time.perf_counter() - t:.1f} s")
    neo.clear()
    emb = EmbeddedStore(Path(tempfile.mkdtemp(prefix="klineage-bench-neo4j-")))
    t = time.perf_counter()
    emb.upsert(batch)
    print(f"   embedded store: wrote {len(batch.nodes)} nodes + {len(batch.relationships)} rels in "
          f"{time.perf_counter() - t:.1f} s (one transaction)")
    t = time.perf_counter()
    nodes, rels = batch.nodes, batch.relationships
    for start in range(0, len(nodes), 1000):
        neo.upsert(GraphBatch(tuple(nodes[start:start + 1000]), ()))
    for start in range(0, len(rels), 1000):
        neo.upsert(GraphBatch((), tuple(rels[start:start + 1000])))
    seconds = time.perf_counter() - t
    print(f"   Neo4j: wrote {len(nodes)} nodes (with 384-float embeddings) + {len(rels)} rels in {seconds:.1f} s "
          f"= {(len(nodes) + len(rels)) / seconds:.0f} records/s (batches of 1000)")

    rng = random.Random(1)
    texts = [f"{rng.choice(VERBS)} a {rng.choice(OBJECTS)} kernel for large shapes variant {i}"
             for i in range(args.queries)]
    vectors = embedder.embed(texts)
    context = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "arch": 90}
    rows: list[tuple[str, str, float, float]] = []
    for name, store in (("embedded", emb), ("Neo4j", neo)):
        kb = KnowledgeBase(store, embedder)
        kb.search(text="warm up", context=context, limit=10)  # loads the skill catalog once
        samples = timed(lambda i, kb=kb: kb.search(text=texts[i], context=context, limit=10), args.queries)
        rows.append((name, "KnowledgeBase.search(text, context), limit 10", *percentiles(samples)))
        samples = timed(lambda i, s=store: s.vector_top_k("Skill", "embedding", list(vectors[i]), 50),
                        args.queries)
        rows.append((name, "vector_top_k, k = 50", *percentiles(samples)))
        samples = timed(lambda i, s=store: s.fulltext_top_k("skill_text", texts[i], 50), args.queries)
        rows.append((name, "fulltext_top_k, k = 50", *percentiles(samples)))
    print(f"   {'store':<9} {'query':<48} {'p50 ms':>8} {'p99 ms':>8}   ({args.queries} queries each)")
    for name, what, p50, p99 in rows:
        print(f"   {name:<9} {what:<48} {p50:8.2f} {p99:8.2f}")
    # The synthetic set has ~100 distinct texts (names differ by a number only), so ~100 skills share
    # each vector: compare the top-10 score lists (the ranking apart from ties), and the ids as well.
    same_scores = same_ids = 0
    checked = min(args.queries, 50)
    for i in range(checked):
        a = neo.vector_top_k("Skill", "embedding", list(vectors[i]), 10)
        b = emb.vector_top_k("Skill", "embedding", list(vectors[i]), 10)
        same_scores += [round(h.score, 4) for h in a] == [round(h.score, 4) for h in b]
        same_ids += len({h.node.id for h in a} & {h.node.id for h in b})
    print(f"   vector top-10, Neo4j (HNSW) vs embedded (exact): same scores in {same_scores}/{checked} queries; "
          f"{same_ids / (10 * checked):.0%} same ids (the rest are ties: equal vectors)")
    neo.clear()
    neo.close()
    emb.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
