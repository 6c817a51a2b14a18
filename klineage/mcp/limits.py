"""Input and output bounds of the MCP tools: the GraphQL API's limits, and caps that keep answers compact."""

from __future__ import annotations

#: Most hits a search returns, as GraphQL's ``searchSkills(limit)`` (klineage.graphql.schema.MAX_LIMIT).
MAX_LIMIT = 100
#: Largest request body over HTTP, as the GraphQL app (klineage.graphql.app.MAX_BODY_BYTES).
MAX_BODY_BYTES = 2 * 1024 * 1024
#: Longest kernel source accepted by a tool (characters).
MAX_SOURCE_CHARS = 256 * 1024
#: Longest free text (a search text, an outcome note).
MAX_TEXT_CHARS = 2000
#: Most features in a search context.
MAX_CONTEXT_KEYS = 64
#: Most evidence steps shown per hit or skill (the total is reported beside them).
MAX_EVIDENCE = 10
#: Most per-shape speedups shown per evidence step.
MAX_SPEEDUPS = 24
#: Longest string field in an answer (explanations, reasons); longer ones end with "…".
MAX_FIELD_CHARS = 2000
#: Longest step diff shown in a lineage or a skill card.
MAX_DIFF_CHARS = 6000
#: Most moves a plan returns.
MAX_MOVES = 20
