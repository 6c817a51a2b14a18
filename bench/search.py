"""searchSkills latency on a SYNTHETIC store of 10,000 skills (named synthetic; not measured skills).

Measured in one run, on this machine:
  * in process: text query uncached / cached, context-only query, kernel-features query;
  * the same vector top-k done by brute-force numpy over the same vectors (the floor to compare with);
  * over HTTP (a `klineage serve` subprocess): p50/p99 of a text query, and 50 concurrent clients for 30 s.
Prints the figures and the ratios. Targets (2-core machine): text p50 <= 30 ms, p99 <= 80 ms uncached;
context-only p50 <= 5 ms; zero HTTP errors under 50 concurrent clients.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.embedder import Embedder
from klineage.kb.service import KnowledgeBase
from klineage.schema.graph import GraphBatch, Relationship
from klineage.schema.records import Anchor, Condition, Effect, Skill

VERBS = ["tile", "pipeline", "fuse", "vectorize", "swizzle", "split", "persist", "unroll", "hint", "cache"]
OBJECTS = ["gemm", "softmax", "layernorm", "attention", "cross entropy", "reduction", "convolution", "scan",
           "elementwise", "transpose"]
CONDITIONS = ["M * N >= 2 ** 22", "K % 64 == 0", "cols <= 8192", "dtype in ('bf16', 'fp16')", "rows >= 1024",
              "arch >= 90", "S >= 1024", "K >= 4096", "num_stages >= 2", "has_dot"]
ANCHORS = ["has_dot", "has_k_loop", "row_reduction", "has_dot and has_k_loop", "uses_autotune", "num_warps > 0"]


def synthetic_batch(n: int, embedder: Embedder, seed: int = 0) -> GraphBatch:
    """``n`` synthetic skills (operator ``synthetic-<i>``) with embeddings of their texts and conditions."""
    rng = random.Random(seed)
    skills, conds, rels = [], {}, []
    for i in range(n):
        verb, obj = rng.choice(VERBS), rng.choice(OBJECTS)
        speedups = [rng.uniform(0.8, 2.5) for _ in range(rng.randint(1, 8))]
        skills.append(Skill(
            operator=f"synthetic-{i}", name=f"synthetic {verb} {obj} #{i}",
            intent=f"Synthetic skill: {verb} the {obj} kernel's inner loop (benchmark data, not measured).",
            anchor=Anchor(rng.choice(ANCHORS), f"a {obj} kernel"), carrier="synthetic",
            transform={"operator": f"synthetic-{i}", "params": {}}, effect=Effect.of(speedups),
            support_steps=len(speedups), support_lineages=1, architectures=("sm_90",), sample=True))
    # Names differ only by their number, so embed each distinct text once (10k model calls take minutes here).
    texts = [s.embedding_text().replace(f" #{i}.", ".") for i, s in enumerate(skills)]
    unique = sorted(set(texts))
    by_text = dict(zip(unique, embedder.embed(unique), strict=True))
    vectors = [by_text[t] for t in texts]
    nodes = []
    for skill, vec in zip(skills, vectors, strict=True):
        node = Skill(**{**skill.__dict__, "embedding": tuple(float(x) for x in vec)}).to_node()
        nodes.append(node)
        for kind in ("valid", "profitable"):
            c = Condition(rng.choice(CONDITIONS), kind, "synthetic")
            conds[c.id] = c.to_node()
            rels.append(Relationship("VALID_WHEN" if kind == "valid" else "PROFITABLE_WHEN", node.id, c.id))
    return GraphBatch.of([*nodes, *conds.values()], rels)


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3


def timed(fn: Callable[[int], Any], n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def http_load(url: str, clients: int, seconds: float) -> tuple[int, int, list[float]]:
    import httpx

    query = {"query": '{ searchSkills(context: {M: 4096, N: 4096, K: 4096, dtype: "bf16"}, limit: 5) { score } }'}
    ok = errors = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal ok, errors
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            try:
                r = await client.post(url, json=query)
                good = r.status_code == 200 and "errors" not in r.json()
            except httpx.HTTPError:
                good = False
            latencies.append(time.perf_counter() - t)
            ok, errors = (ok + 1, errors) if good else (ok, errors + 1)

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=clients)) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    return ok, errors, latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skills", type=int, default=10_000, help="synthetic skills in the store searched")
    parser.add_argument("--queries", type=int, default=200,
                        help="timed queries of each kind (in process, vector top-k, HTTP text query)")
    parser.add_argument("--clients", type=int, default=50, help="concurrent HTTP clients of the load test")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the HTTP load test, in seconds")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="klineage-bench-"))
    embedder = Embedder()
    t0 = time.perf_counter()
    batch = synthetic_batch(args.skills, embedder)
    store = EmbeddedStore(data_dir)
    store.upsert(batch)
    print(f"built a SYNTHETIC store of {args.skills} skills in {time.perf_counter() - t0:.1f} s at {data_dir}")
    kb = KnowledgeBase(store, embedder)
    rng = random.Random(1)
    texts = [f"{rng.choice(VERBS)} a {rng.choice(OBJECTS)} kernel for large shapes variant {i}"
             for i in range(args.queries)]
    context = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "arch": 90}
    features = {"has_dot": True, "has_k_loop": True, "num_warps": 4, "num_stages": 1}

    kb.search(text="warm up", context=context, limit=10)
    rows: list[tuple[str, list[float]]] = [
        ("text query, uncached", timed(lambda i: kb.search(text=texts[i], context=context, limit=10), args.queries)),
        ("text query, cached", timed(lambda i: kb.search(text=texts[i], context=context, limit=10), args.queries)),
        ("context-only query", timed(lambda i: kb.search(context=context, limit=10), args.queries)),
        ("kernel-features query", timed(lambda i: kb.search(context=context, kernel_features=features, limit=10),
                                        args.queries)),
    ]
    matrix = np.asarray([n.props["embedding"] for n in batch.nodes if n.label == "Skill"], dtype=np.float32)
    queries = embedder.embed(texts)
    brute = timed(lambda i: np.argpartition(-(matrix @ queries[i]), 10)[:10], args.queries)
    vector_only = timed(lambda i: store.vector_top_k("Skill", "embedding", queries[i], 10), args.queries)
    rows += [("store vector top-10", vector_only), ("brute-force numpy top-10", brute)]

    port = free_port()
    env = {**os.environ, "KLINEAGE_DATA_DIR": str(data_dir), "KLINEAGE_STORE": "embedded"}
    server = subprocess.Popen([sys.executable, "-m", "klineage.cli.main", "serve", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx

        url = f"http://127.0.0.1:{port}/graphql"
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        q = '{ searchSkills(text: "%s", context: {M: 4096, N: 4096, K: 4096}, limit: 10) { score } }'
        with httpx.Client(timeout=30) as client:
            http_rows = timed(lambda i: client.post(url, json={"query": q % texts[i]}).raise_for_status(),
                              args.queries)
        rows.append(("HTTP text query, uncached (fresh server)", http_rows))
        ok, errors, latencies = asyncio.run(http_load(url, args.clients, args.seconds))
    finally:
        server.terminate()
        server.wait(timeout=30)

    print(f"\n{'measurement':62} {'p50 ms':>9} {'p99 ms':>9}")
    for name, samples in rows:
        p50, p99 = percentiles(samples)
        print(f"{name:62} {p50:9.2f} {p99:9.2f}")
    brute_p50 = percentiles(brute)[0]
    print(f"\nratio store vector top-10 / brute-force numpy: {percentiles(vector_only)[0] / brute_p50:.2f}x")
    print(f"ratio context-only query / brute-force numpy:  {percentiles(rows[2][1])[0] / brute_p50:.2f}x")
    p50, p99 = percentiles(latencies) if latencies else (float("nan"), float("nan"))
    print(f"\n{args.clients} concurrent HTTP clients for {args.seconds:.0f} s: {ok} ok, {errors} errors, "
          f"{ok / args.seconds:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    text_p50, text_p99 = percentiles(rows[0][1])
    ctx_p50 = percentiles(rows[2][1])[0]
    verdicts = [("text p50 <= 30 ms", text_p50 <= 30), ("text p99 <= 80 ms", text_p99 <= 80),
                ("context-only p50 <= 5 ms", ctx_p50 <= 5), ("zero HTTP errors", errors == 0)]
    print("targets: " + ", ".join(f"{name}: {'met' if good else 'MISSED'}" for name, good in verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
