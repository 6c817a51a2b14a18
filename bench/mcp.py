"""MCP search_skills latency over stdio and HTTP beside GraphQL's searchSkills, and 20 concurrent HTTP
MCP sessions for 30 s: one run, figures printed. Uses the sample fixtures in a temporary embedded store.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python bench/mcp.py [--seconds 30] [--sessions 20] [--n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# this file is named like the SDK: keep its folder off the path so that `import mcp` finds the SDK
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT / "tests"))

from fastapi.testclient import TestClient  # noqa: E402
from mcp_server.conftest import TOKEN, free_port, server_env, start_http  # noqa: E402

from klineage.graphql.app import create_app  # noqa: E402
from klineage.kb.embedded_store import EmbeddedStore  # noqa: E402
from klineage.kb.service import KnowledgeBase  # noqa: E402
from klineage.mcp.connect import call, http_client, stdio_client  # noqa: E402
from klineage.schema.lineage_document import load_lineage_document  # noqa: E402

ARGS = {"text": "faster matrix multiply", "context": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}, "limit": 5}


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000


async def mcp_latency(client, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    async with client as c:
        await call(c, "search_skills", **ARGS)
        for _ in range(n):
            t = time.perf_counter()
            await call(c, "search_skills", **ARGS)
            out.append(time.perf_counter() - t)
    return out


async def soak(url: str, sessions: int, seconds: float) -> tuple[int, int]:
    ok = errors = 0
    stop = time.monotonic() + seconds

    async def one() -> None:
        nonlocal ok, errors
        try:
            async with http_client(url, TOKEN) as c:
                while time.monotonic() < stop:
                    try:
                        await call(c, "search_skills", **ARGS)
                        ok += 1
                    except Exception:
                        errors += 1
        except Exception:
            errors += 1

    await asyncio.gather(*(one() for _ in range(sessions)))
    return ok, errors


def main() -> None:
    """Run the three measurements and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200,
                        help="timed calls per latency measurement (GraphQL, MCP stdio, MCP HTTP)")
    parser.add_argument("--sessions", type=int, default=20, help="concurrent HTTP MCP sessions of the soak")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the HTTP soak, in seconds")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    kb = KnowledgeBase(EmbeddedStore(folder))
    for path in sorted((ROOT / "tests" / "fixtures" / "lineages").glob("*.json")):
        kb.ingest(load_lineage_document(path))
    query = ("query($t: String, $c: JSON, $n: Int!) { searchSkills(text: $t, context: $c, limit: $n) "
             "{ score applicable skill { id } explanation { passed failed unknown } } }")
    gql = []
    with TestClient(create_app(kb)) as client:
        body = {"query": query, "variables": {"t": ARGS["text"], "c": ARGS["context"], "n": ARGS["limit"]}}
        client.post("/graphql", json=body)
        for _ in range(args.n):
            t = time.perf_counter()
            assert "errors" not in client.post("/graphql", json=body).json()
            gql.append(time.perf_counter() - t)
    stdio = asyncio.run(mcp_latency(stdio_client(server_env(folder), cwd=ROOT), args.n))
    port = free_port()
    proc = start_http(server_env(folder, KLINEAGE_API_TOKEN=TOKEN), port)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        http = asyncio.run(mcp_latency(http_client(url, TOKEN), args.n))
        ok, errors = asyncio.run(soak(url, args.sessions, args.seconds))
    finally:
        proc.terminate()
        proc.wait(10)
    for name, xs in (("GraphQL searchSkills (in-process ASGI)", gql), ("MCP search_skills stdio", stdio),
                     ("MCP search_skills HTTP", http)):
        print(f"{name:40s} p50 {pct(xs, 0.5):7.2f} ms  p99 {pct(xs, 0.99):7.2f} ms  "
              f"mean {statistics.mean(xs) * 1000:7.2f} ms  n={len(xs)}")
    print(f"HTTP soak: {args.sessions} concurrent sessions for {args.seconds:.0f} s: {ok} calls "
          f"({ok / args.seconds:.1f}/s), {errors} errors")


if __name__ == "__main__":
    main()
