"""Serialize a whole graph (``GraphStore.export()``) as JSON or GraphML."""

from __future__ import annotations

import json
from typing import Any

from klineage.schema.graph import GraphBatch

EXPORT_FORMAT_VERSION = 1


def to_json(batch: GraphBatch) -> str:
    """JSON with ``nodes`` (label, id, props) and ``relationships`` (type, source, target, props)."""
    data = {
        "format": "klineage.export", "version": EXPORT_FORMAT_VERSION,
        "nodes": [{"label": n.label, "id": n.id, "props": dict(n.props)} for n in batch.nodes],
        "relationships": [{"type": r.type, "source": r.source, "target": r.target, "props": dict(r.props)}
                          for r in batch.relationships],
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _graphml_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def to_graphml(batch: GraphBatch) -> str:
    """GraphML (readable by networkx, Gephi, yEd): properties become string attributes; maps and lists
    as JSON."""
    import networkx as nx

    graph = nx.MultiDiGraph()
    for n in batch.nodes:
        attrs = {k: _graphml_value(v) for k, v in n.props.items() if v is not None and k != "embedding"}
        graph.add_node(n.id, label=n.label, **attrs)
    for r in batch.relationships:
        attrs = {k: _graphml_value(v) for k, v in r.props.items() if v is not None}
        graph.add_edge(r.source, r.target, key=r.type, type=r.type, **attrs)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + "\n".join(nx.generate_graphml(graph)) + "\n"
