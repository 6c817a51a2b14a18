"""The MCP server: KLineage's service functions as Model Context Protocol tools, resources and a prompt.

``klineage mcp`` serves it over stdio (desktop agents) or streamable HTTP (``--http``, bearer token).
Every tool calls the same ``KnowledgeBase`` service functions GraphQL calls (``tools``); outputs are
compact JSON views (``views``, no embeddings, bounded lengths, the GraphQL API's limits); skills and
lineages are readable markdown resources (``cards``). The package's ``server`` module imports the
official ``mcp`` SDK; the others do not.
"""
