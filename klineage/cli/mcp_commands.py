"""``klineage mcp``: the MCP server over stdio (default) or streamable HTTP (``--http``)."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

err = Console(stderr=True)


def mcp(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio; every "
                                       "request needs 'Authorization: Bearer $KLINEAGE_API_TOKEN'.")] = False,
    host: Annotated[str, typer.Option(help="Interface to bind with --http.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port with --http.")] = 8765,
    validator_url: Annotated[str | None, typer.Option(
        help="Validator service for validate_kernel (default: $KLINEAGE_VALIDATOR_URL).")] = None,
) -> None:
    """Serve KLineage to MCP agents: tools search_skills, get_skill, plan_optimization, validate_kernel,
    get_lineage, record_application; skill and lineage cards as resources; an optimize_kernel prompt."""
    if http and not os.environ.get("KLINEAGE_API_TOKEN"):
        err.print("[bold red]error:[/] --http needs $KLINEAGE_API_TOKEN set (clients send it as "
                  "'Authorization: Bearer <token>')")
        raise typer.Exit(2)
    from klineage.ingest.feedback import record_with_feedback
    from klineage.kb.service import KnowledgeBase
    from klineage.kb.settings import open_store
    from klineage.mcp.server import build_server, run_http, run_stdio
    from klineage.mcp.tools import KLineageTools

    tools = KLineageTools(KnowledgeBase(open_store()), validator_url=validator_url, recorder=record_with_feedback)
    server = build_server(tools)
    if http:
        err.print(f"KLineage MCP at http://{host}:{port}/mcp (bearer token required)")
        run_http(server, host, port)
    else:
        run_stdio(server)


def register(app: typer.Typer) -> None:
    """Add ``klineage mcp`` to ``app``."""
    app.command()(mcp)
