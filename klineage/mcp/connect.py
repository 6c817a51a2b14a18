"""Connecting to a KLineage MCP server with the SDK's own client (for examples, tests and benchmarks)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from klineage.schema.errors import KLineageError


class ToolCallError(KLineageError, RuntimeError):
    """A tool answered with an error (``is_error``); the message is the server's."""


def stdio_client(env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
                 args: list[str] | None = None) -> Client:
    """A client that launches ``python -m klineage.cli.main mcp`` (stdio) with ``env`` over the inherited one."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "klineage.cli.main", "mcp", *(args or [])],
                                   env={**os.environ, **(env or {})}, cwd=cwd)
    return Client(params)


def http_client(url: str, token: str | None) -> Client:
    """A client of a streamable-HTTP server at ``url`` sending ``Authorization: Bearer <token>``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)))


def tool_json(result: Any) -> dict[str, Any]:
    """A tool result's JSON answer; ToolCallError with the server's message when it is an error."""
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        raise ToolCallError(text)
    if isinstance(result.structured_content, dict):
        return result.structured_content
    return dict(json.loads(text))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call ``tool`` and return its JSON answer (ToolCallError on an error result)."""
    return tool_json(await client.call_tool(tool, arguments))
