"""`klineage mcp` through the SDK's own client, over stdio and streamable HTTP: every tool, the
resources and the prompt, the errors, the token, and search equal to GraphQL's searchSkills."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from klineage.agent.planners import LineagePlanner
from klineage.agent.state import AgentState
from klineage.graphql.app import create_app
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase
from klineage.mcp import limits
from klineage.mcp.connect import ToolCallError, call, http_client, stdio_client
from klineage.mcp.tools import KLineageTools

from .conftest import ROOT, TOKEN, server_env

pytestmark = pytest.mark.real("embedder")

KERNEL = (ROOT / "heldout" / "scaled_softmax" / "naive.py").read_text()
CONTEXT = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}
HIT_QUERY = """query($t: String, $c: JSON, $k: String, $n: Int!) {
  searchSkills(text: $t, context: $c, kernelSource: $k, limit: $n) {
    score applicable
    skill { id name intent operator anchor { predicate description } carrier transform effect { min median max n }
            support supportLineages architectures sample profitability
            together { workload steps operators gain kind kernelKind description } }
    explanation { passed failed unknown usage evidence { lineageId stepId workload gpu speedups sample } } } }"""


def run(client: Client, body: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with client as c:
            return await body(c)
    return asyncio.run(main())


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, kb_dir: Path) -> Callable[[], Client]:
    if request.param == "stdio":
        return lambda: stdio_client(server_env(kb_dir), cwd=ROOT)
    url = request.getfixturevalue("http_url")
    return lambda: http_client(url, TOKEN)


def graphql_hits(kb: KnowledgeBase, **variables: Any) -> list[dict[str, Any]]:
    with TestClient(create_app(kb)) as client:
        response = client.post("/graphql", json={"query": HIT_QUERY, "variables": variables})
    data = response.json()
    assert "errors" not in data, data
    return list(data["data"]["searchSkills"])


def same_hits(mcp_hits: list[dict[str, Any]], gql_hits: list[dict[str, Any]]) -> None:
    assert [h["skill"]["id"] for h in mcp_hits] == [h["skill"]["id"] for h in gql_hits]
    for m, g in zip(mcp_hits, gql_hits, strict=True):
        assert m["score"] == pytest.approx(g["score"], rel=1e-9) and m["applicable"] == g["applicable"]
        assert m["skill"] == g["skill"]
        for key in ("passed", "failed", "unknown"):
            assert m["explanation"][key] == g["explanation"][key]
        assert m["usage"] == g["explanation"]["usage"]
        assert m["explanation"]["evidenceTotal"] == len(g["explanation"]["evidence"])
        assert m["explanation"]["evidence"] == g["explanation"]["evidence"][: limits.MAX_EVIDENCE]


def test_limits_are_the_graphql_ones() -> None:
    from klineage.graphql.app import MAX_BODY_BYTES
    from klineage.graphql.schema import MAX_LIMIT

    assert (limits.MAX_LIMIT, limits.MAX_BODY_BYTES) == (MAX_LIMIT, MAX_BODY_BYTES)


def test_every_tool_resource_and_prompt(connect: Callable[[], Client], kb_dir: Path, embedder: Any) -> None:
    kb = KnowledgeBase(EmbeddedStore(kb_dir), embedder)
    before_text = graphql_hits(kb, t="faster matrix multiply", c=CONTEXT, n=5)
    before_kernel = graphql_hits(kb, k=KERNEL, c=CONTEXT, n=4)

    async def body(c: Client) -> dict[str, Any]:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names == {"search_skills", "get_skill", "plan_optimization", "validate_kernel", "get_lineage",
                         "record_application"}
        out: dict[str, Any] = {}
        out["text"] = await call(c, "search_skills", text="faster matrix multiply", context=CONTEXT, limit=5)
        out["kernel"] = await call(c, "search_skills", kernel_source=KERNEL, context=CONTEXT, limit=4)
        sid = out["text"]["hits"][0]["skill"]["id"]
        out["skill"] = await call(c, "get_skill", skill_id=sid)
        out["card"] = (await c.read_resource(f"klineage://skills/{sid}")).contents[0].text
        out["index"] = (await c.read_resource("klineage://skills")).contents[0].text
        out["lineages"] = await call(c, "get_lineage")
        lid = out["lineages"]["lineages"][0]["id"]
        out["lineage"] = await call(c, "get_lineage", lineage_id=lid)
        out["lineage_card"] = (await c.read_resource(f"klineage://lineages/{lid}")).contents[0].text
        out["plan"] = await call(c, "plan_optimization", kernel_source=KERNEL, workload="scaled_softmax")
        prompt = await c.get_prompt("optimize_kernel", {"kernel_source": KERNEL, "workload": "scaled_softmax"})
        out["prompt"] = prompt.messages[0].content.text  # type: ignore[union-attr]
        out["again"] = await call(c, "search_skills", text="faster matrix multiply", context=CONTEXT, limit=5)
        out["record"] = await call(c, "record_application", skill_id=sid, kernel_source=KERNEL + "\n# v2\n",
                                   outcome="improved", speedup=1.5)
        out["after"] = await call(c, "get_skill", skill_id=sid)
        return out

    out = run(connect(), body)
    same_hits(out["text"]["hits"], before_text)
    same_hits(out["kernel"]["hits"], before_kernel)
    skill = out["skill"]["skill"]
    assert "embedding" not in skill and skill["validWhen"] is not None and skill["evidence"]
    assert out["card"].startswith(f"# {skill['name']}") and "## When" in out["card"]
    assert "## How to apply" in out["card"]
    assert "```diff" in out["card"]
    assert f"klineage://skills/{skill['id']}" in out["index"]
    lineage = out["lineage"]["lineage"]
    assert lineage["steps"] and all("operator" in s and "diff" in s for s in lineage["steps"])
    assert lineage["id"] in out["lineage_card"]
    problem = KLineageTools(kb).problem(KERNEL, "scaled_softmax")
    expected = LineagePlanner(kb).plan(AgentState(problem, problem.source))
    assert [m["label"] for m in out["plan"]["moves"]] == [m.label for m in expected][:10]
    assert all({"label", "steps", "origin", "expectedGain", "why"} <= set(m) for m in out["plan"]["moves"])
    skilled = {s.operator: s.id for s in kb.skills(first=1000).items}
    steps = [s for m in out["plan"]["moves"] for s in m["steps"]]
    assert all(s["skillId"] == skilled.get(s["operator"]) for s in steps)  # null: no skill to record against
    assert any(s["skillId"] is None for s in steps) and any(s["skillId"] for s in steps)
    assert "plan_optimization" in out["prompt"] and "scaled_softmax" in out["prompt"]
    assert out["record"]["application"]["verified"] is False
    assert out["after"]["skill"]["usage"].startswith("applied ") and "paid 0 times" in out["after"]["skill"]["usage"]
    assert out["after"]["skill"]["effect"] == skill["effect"], "an unverified claim never moves the effect"


def test_errors(connect: Callable[[], Client]) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("get_skill", {"skill_id": "skill:0000000000000000"}, "unknown skill"),
        ("search_skills", {"text": "x", "context": "M=4096"}, "context"),
        ("search_skills", {"text": "x", "context": {"M": {"nested": 1}}}, "context"),
        ("search_skills", {"text": "x", "limit": limits.MAX_LIMIT + 1}, "limit"),
        ("search_skills", {}, "text"),
        ("search_skills", {"kernel_source": "x" * (limits.MAX_SOURCE_CHARS + 1)}, "over the limit"),
        ("search_skills", {"kernel_source": "def (:"}, "kernel_source"),
        ("plan_optimization", {"kernel_source": KERNEL, "workload": "../etc"}, "workload"),
        ("plan_optimization", {"kernel_source": KERNEL, "workload": "no_such_workload"}, "unknown workload"),
        ("validate_kernel", {"kernel_source": KERNEL, "workload": "scaled_softmax"}, "no validator configured"),
        ("get_lineage", {"lineage_id": "lineage:0000"}, "unknown lineage"),
        ("record_application", {"skill_id": "skill:0000000000000000", "kernel_source": KERNEL, "outcome": "pass"},
         "unknown skill"),
        ("record_application", {"skill_id": "skill:7c96e7e93d11cfbc", "kernel_source": KERNEL, "outcome": "pass",
                                "gate_result": {"verdict": "pass"}}, "gate_result"),
    ]

    async def body(c: Client) -> list[str]:
        messages = []
        for tool, args, _ in cases:
            with pytest.raises(ToolCallError) as info:
                await call(c, tool, **args)
            messages.append(str(info.value))
        with pytest.raises(Exception, match="unknown skill"):
            await c.read_resource("klineage://skills/skill:0000000000000000")
        return messages

    for (tool, _, needle), message in zip(cases, run(connect(), body), strict=True):
        assert needle in message, (tool, message)


def test_http_needs_the_token(http_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        response = httpx.post(http_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
        assert response.status_code == 401, headers
        assert "KLINEAGE_API_TOKEN" in response.json()["error"]

    async def body(c: Client) -> None:
        await c.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own error types
        run(http_client(http_url, "wrong-token"), body)


def test_http_mode_refuses_to_start_without_a_token(kb_dir: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "klineage.cli.main", "mcp", "--http", "--port", "1"], cwd=ROOT,
                          env=server_env(kb_dir), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "KLINEAGE_API_TOKEN" in proc.stderr
