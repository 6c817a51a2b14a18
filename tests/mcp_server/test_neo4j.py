"""`klineage mcp` over the REAL Neo4j store: search_skills equals GraphQL's searchSkills on the same
store, and the recorded Application / GateRun nodes read back through the tools."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from klineage.kb.neo4j_store import Neo4jStore
from klineage.kb.service import KnowledgeBase
from klineage.mcp.connect import call, stdio_client
from klineage.schema.lineage_document import load_lineage_document

from .conftest import FIXTURES, ROOT, server_env
from .test_feedback import SKILL, gate
from .test_mcp_server import CONTEXT, KERNEL, graphql_hits, run, same_hits

pytestmark = [pytest.mark.real("neo4j"), pytest.mark.real("embedder")]


def test_search_equals_graphql_on_neo4j(neo4j_store: Neo4jStore, neo4j_server: Any, embedder: Any) -> None:
    kb = KnowledgeBase(neo4j_store, embedder)
    for path in sorted(FIXTURES.glob("*.json")):
        kb.ingest(load_lineage_document(path))
    text = graphql_hits(kb, t="faster matrix multiply", c=CONTEXT, n=5)
    kernel = graphql_hits(kb, k=KERNEL, c=CONTEXT, n=4)
    source = "k_neo4j = 1\n"

    async def body(c: Client) -> dict[str, Any]:
        return {"text": await call(c, "search_skills", text="faster matrix multiply", context=CONTEXT, limit=5),
                "kernel": await call(c, "search_skills", kernel_source=KERNEL, context=CONTEXT, limit=4),
                "record": await call(c, "record_application", skill_id=SKILL, kernel_source=source,
                                     outcome="improved", speedup=1.25, gate_result=gate(source).to_dict(),
                                     context={"flops": 2.0 ** 40}),
                "after": await call(c, "get_skill", skill_id=SKILL)}

    out = run(stdio_client(server_env(None, **neo4j_server.env()), cwd=ROOT), body)
    assert text and kernel
    same_hits(out["text"]["hits"], text)
    same_hits(out["kernel"]["hits"], kernel)
    app = out["record"]["application"]
    assert app["verified"] is True and app["verdict"] == "pass"
    skill = kb.skill(SKILL)  # the MCP server's writes, read back from Neo4j in this process
    assert skill is not None and (skill.applied, skill.verified, skill.paid) == (1, 1, 1)
    assert skill.field_effect.median == 1.25 and out["after"]["skill"]["usage"] == skill.usage()
    [stored] = kb.applications([SKILL])[SKILL]
    assert stored.verified and stored.verdict == "pass" and dict(stored.context) == {"flops": 2.0 ** 40}
