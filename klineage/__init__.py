"""KLineage: verified GPU-kernel optimization skills, learned by walking expert Triton kernels backward.

Subpackages, floor by floor (imports only point down):

* ``schema`` — records, graph spec, manifest and lineage-document formats (stdlib only).
* ``kb``, ``transforms``, ``validator`` — knowledge base, source rewriting, gates.
* ``ingest``, ``graphql``, ``agent`` — walker and extraction, the API, the optimizer.
* ``cli`` — the ``klineage`` command.

What a user needs is importable from here, loaded on first use (``import klineage`` imports neither
torch nor the embedding model)::

    from klineage import KnowledgeBase, open_store, LocalValidator, KLineageError
    kb = KnowledgeBase(open_store())
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "KnowledgeBase": "klineage.kb.service",
    "open_store": "klineage.kb.settings",
    "EmbeddedStore": "klineage.kb.embedded_store",
    "LocalValidator": "klineage.validator.client",
    "HttpValidator": "klineage.validator.client",
    "KLineageClient": "klineage.client",
    "AsyncKLineageClient": "klineage.client",
    "Skill": "klineage.schema.records",
    "Condition": "klineage.schema.records",
    "Effect": "klineage.schema.records",
    "Evidence": "klineage.schema.records",
    "GateResult": "klineage.schema.gate_result",
    "LineageDocument": "klineage.schema.lineage_document",
    "load_lineage_document": "klineage.schema.lineage_document",
    "ingest_lineages": "klineage.ingest.pipeline",
    "optimize": "klineage.agent.loop",
    "load_problem": "klineage.agent.problem",
    "KLineageError": "klineage.schema.errors",
    "FormatError": "klineage.schema.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load a public name on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'klineage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
