"""The MCP server (official ``mcp`` SDK): tools, resources and a prompt over ``KLineageTools``.

``build_server`` wires one ``KLineageTools`` into an ``MCPServer``; ``run_stdio`` serves it over
stdin/stdout (a desktop agent launches ``klineage mcp``); ``http_app`` wraps the streamable-HTTP app in
a bearer-token check (``Authorization: Bearer $KLINEAGE_API_TOKEN`` on every request, as the GraphQL
mutations; with no token configured every request is refused) and ``run_http`` serves it on
127.0.0.1 by default. Tool calls run in worker threads: the knowledge base is blocking and thread-safe.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError

from klineage.mcp.cards import index_card, lineage_card, skill_card
from klineage.mcp.limits import MAX_BODY_BYTES
from klineage.mcp.tools import KLineageTools, ToolInputError

TOKEN_ENV = "KLINEAGE_API_TOKEN"
MCP_PATH = "/mcp"

INSTRUCTIONS = (
    "KLineage: verified GPU-kernel (Triton) optimization skills learned from expert kernels. "
    "search_skills finds skills for a text/context/kernel; plan_optimization proposes the lineage moves for "
    "a kernel on a named workload; validate_kernel runs the validator's gates; record_application reports "
    "what a skill did on your kernel (pass the gate result so it counts as verified). Skill cards: "
    "klineage://skills/{id}."
)

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


async def _call(fn: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    try:
        return await anyio.to_thread.run_sync(lambda: fn(**kwargs))
    except ToolInputError as exc:
        raise ToolError(str(exc)) from exc


def build_server(tools: KLineageTools) -> MCPServer:
    """An ``MCPServer`` exposing ``tools`` (six tools), the skill and lineage cards, and the prompt."""
    server = MCPServer("klineage", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING")

    @server.tool(description="Skills ranked for a text, a problem context (feature name -> value, e.g. "
                 "{\"M\": 4096, \"dtype\": \"bf16\"}) and/or a kernel's source; each hit with its "
                 "applicability, score, expected gain and explanation (conditions passed/failed/unknown, "
                 "evidence). limit 1..100.")
    async def search_skills(text: str | None = None, context: dict[str, Any] | None = None,
                            kernel_source: str | None = None, limit: int = 10) -> dict[str, Any]:
        return await _call(tools.search_skills, text=text, context=context, kernel_source=kernel_source, limit=limit)

    @server.tool(description="One skill by id: intent, anchor, transform (operator + portable params), "
                 "effect, conditions with out-of-sample accuracy, risks, evidence, usage by agents.")
    async def get_skill(skill_id: str) -> dict[str, Any]:
        return await _call(tools.get_skill, skill_id=skill_id)

    @server.tool(description="The agent's lineage plan for a kernel on a named workload (a folder name "
                 "such as 'rmsnorm' under ./workloads or ./heldout), without running it: moves best first, "
                 "each with label, steps (operator + params), origin, expected gain and why.")
    async def plan_optimization(kernel_source: str, workload: str, arch: int | None = None,
                                limit: int = 10) -> dict[str, Any]:
        return await _call(tools.plan_optimization, kernel_source=kernel_source, workload=workload, arch=arch,
                           limit=limit)

    @server.tool(description="Validate a kernel (a module defining run(*inputs)) on a named workload "
                 "through the validator service: verdict, failed gate, speedup over the vendor, and the "
                 "gate result document (pass it to record_application).")
    async def validate_kernel(kernel_source: str, workload: str, gates: list[str] | None = None,
                              shapes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return await _call(tools.validate_kernel, kernel_source=kernel_source, workload=workload, gates=gates,
                           shapes=shapes)

    @server.tool(description="One lineage by id (steps with operator, params, verdict, diff and skill), or "
                 "without an id the lineages (of a workload when given) as summaries.")
    async def get_lineage(lineage_id: str | None = None, workload: str | None = None) -> dict[str, Any]:
        return await _call(tools.get_lineage, lineage_id=lineage_id, workload=workload)

    @server.tool(description="Record that you applied a skill to a kernel, with the outcome (a short word: "
                 "'improved', 'no-gain', 'fail-correctness') and the speedup over the kernel you applied it "
                 "to; pass validate_kernel's gate result to make it a verified application, and plan_optimization's "
                 "context so the skill's conditions can be re-induced from it.")
    async def record_application(skill_id: str, kernel_source: str, outcome: str, speedup: float | None = None,
                                 gate_result: dict[str, Any] | None = None,
                                 context: dict[str, Any] | None = None) -> dict[str, Any]:
        return await _call(tools.record_application, skill_id=skill_id, kernel_source=kernel_source,
                           outcome=outcome, speedup=speedup, gate_result=gate_result, context=context)

    @server.resource("klineage://skills", name="skills", mime_type="text/markdown",
                     description="Every skill, linking to its card.")
    def skills_index() -> str:
        rows, after = [], None
        while True:
            page = tools.kb.skills(first=100, after=after)
            rows += [(f"klineage://skills/{s.id}", f"{s.name} ({s.operator})") for s in page.items]
            if not page.has_next:
                break
            after = page.end_cursor
        return index_card(rows, "KLineage skills")

    @server.resource("klineage://skills/{skill_id}", name="skill card", mime_type="text/markdown",
                     description="A skill as a card: intent, where, when, effect with evidence, risks, how to "
                     "apply, a before/after diff from its lineage.")
    async def skill_resource(skill_id: str) -> str:
        card = await anyio.to_thread.run_sync(lambda: skill_card(tools.kb, skill_id))
        if card is None:
            raise ResourceNotFoundError(f"unknown skill {skill_id!r}")
        return card

    @server.resource("klineage://lineages", name="lineages", mime_type="text/markdown",
                     description="Every lineage, linking to its page.")
    def lineages_index() -> str:
        return index_card([(f"klineage://lineages/{v.lineage.id}", f"{v.lineage.workload} "
                            f"({len(v.steps)} steps)") for v in tools.kb.lineages()], "KLineage lineages")

    @server.resource("klineage://lineages/{lineage_id}", name="lineage", mime_type="text/markdown",
                     description="One backward walk: its steps, verdicts and the skills they became.")
    async def lineage_resource(lineage_id: str) -> str:
        def make() -> str | None:
            view = tools.kb.lineage(lineage_id)
            return None if view is None else lineage_card(tools.kb, lineage_id, tools.step_skills(view))

        card = await anyio.to_thread.run_sync(make)
        if card is None:
            raise ResourceNotFoundError(f"unknown lineage {lineage_id!r}")
        return card

    @server.prompt(name="optimize_kernel", description="Optimize this kernel with KLineage.")
    def optimize_kernel(kernel_source: str, workload: str) -> str:
        return optimize_prompt(kernel_source, workload)

    return server


def optimize_prompt(kernel_source: str, workload: str) -> str:
    """The "optimize this kernel with KLineage" prompt text."""
    return (
        f"Optimize this Triton kernel for the workload `{workload}` with KLineage.\n\n"
        "1. Call plan_optimization(kernel_source, workload) and read the moves (label, steps, expected gain, why).\n"
        "2. For context, call search_skills with the kernel source and read each skill's card "
        "(klineage://skills/{id}): conditions, risks, the before/after diff.\n"
        "3. Apply one move at a time to the source (each step is an operator with parameters), then call "
        "validate_kernel(new_source, workload). Keep a candidate only if its verdict is pass and it is faster.\n"
        "4. After every validation call record_application(skill_id, new_source, outcome, speedup, gate_result) "
        "for each skill you used, passing the gate result so it counts as verified.\n"
        "5. Report the best kernel, its speedup and the skills that paid.\n\n"
        f"```python\n{kernel_source}\n```\n"
    )


def bearer_guard(app: ASGIApp, token_env: str = TOKEN_ENV) -> ASGIApp:
    """``app`` behind ``Authorization: Bearer $<token_env>`` (read per request; none configured: all refused)."""

    async def guarded(scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
                      ) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        expected = os.environ.get(token_env, "")
        header = ""
        for key, value in scope.get("headers", ()):
            if key.lower() == b"authorization":
                header = value.decode("latin-1")
        given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not expected or not given or not hmac.compare_digest(given, expected):
            body = json.dumps({"error": f"this MCP server needs the header 'Authorization: Bearer <token>' "
                                        f"matching ${token_env}"}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded


def http_app(server: MCPServer, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable-HTTP app at /mcp (request bodies up to the GraphQL app's limit) behind the bearer check."""
    inner = server.streamable_http_app(streamable_http_path=MCP_PATH, max_request_body_size=MAX_BODY_BYTES,
                                       host=host)
    return bearer_guard(inner)


def run_stdio(server: MCPServer) -> None:
    """Serve over stdin/stdout until the client closes them."""
    server.run("stdio")


def run_http(server: MCPServer, host: str = "127.0.0.1", port: int = 8765, log_level: str = "warning") -> None:
    """Serve streamable HTTP at http://host:port/mcp until interrupted."""
    import uvicorn

    uvicorn.run(http_app(server, host), host=host, port=port, log_level=log_level)
