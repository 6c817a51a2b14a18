"""``klineage sync``: copy the knowledge base between the embedded store and Neo4j."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from klineage.cli.console import fail
from klineage.schema.graph import GraphBatch, Node, Relationship

out = Console()
err = Console(stderr=True)
TARGETS = ("neo4j", "embedded")


def _fail(message: str, code: int = 2) -> typer.Exit:
    return fail(message, code)


def _open(kind: str) -> Any:
    """The store of ``kind``: the embedded one in ``$KLINEAGE_DATA_DIR`` or Neo4j from ``NEO4J_*``."""
    from klineage.kb.settings import open_store

    return open_store({**os.environ, "KLINEAGE_STORE": kind})


def copy_graph(source: GraphBatch, target: Any, batch_size: int, progress: Progress | None = None) -> None:
    """Write ``source`` into ``target`` in batches: all nodes first, then relationships (so every
    batch's endpoints already exist). Each batch is one atomic, idempotent ``upsert``."""
    nodes: Sequence[Node] = source.nodes
    rels: Sequence[Relationship] = source.relationships
    task = progress.add_task("nodes", total=len(nodes)) if progress else None
    for start in range(0, len(nodes), batch_size):
        chunk = nodes[start:start + batch_size]
        target.upsert(GraphBatch(tuple(chunk), ()))
        if progress is not None and task is not None:
            progress.advance(task, len(chunk))
    task = progress.add_task("relationships", total=len(rels)) if progress else None
    for start in range(0, len(rels), batch_size):
        rel_chunk = rels[start:start + batch_size]
        target.upsert(GraphBatch((), tuple(rel_chunk)))
        if progress is not None and task is not None:
            progress.advance(task, len(rel_chunk))


def sync(
    to: Annotated[str, typer.Option("--to", help="Where to copy: neo4j (from the embedded store) or embedded "
                                    "(from Neo4j).")] = "neo4j",
    batch_size: Annotated[int, typer.Option(min=1, max=100_000, help="Records per transaction.")] = 1000,
    replace: Annotated[bool, typer.Option("--replace", help="Empty the target first (otherwise records are "
                                          "merged by id into what it holds).")] = False,
) -> None:
    """Copy the whole knowledge base into Neo4j (``--to neo4j``, from ``$KLINEAGE_DATA_DIR``) or back
    (``--to embedded``), in batched transactions with a progress bar. Idempotent: syncing twice
    changes nothing. Neo4j is configured by NEO4J_URI, NEO4J_USER, NEO4J_PASSWORD, NEO4J_DATABASE."""
    from klineage.kb.store import StoreError

    to = to.strip().lower()
    if to not in TARGETS:
        raise _fail(f"--to {to!r}: expected one of {', '.join(TARGETS)}")
    source_kind = "embedded" if to == "neo4j" else "neo4j"
    try:
        source = _open(source_kind)
        target = _open(to)
    except StoreError as exc:
        raise _fail(str(exc)) from exc
    try:
        graph = source.export()
        if replace:
            if not hasattr(target, "clear"):
                raise _fail(f"--replace: the {to} store cannot be emptied from here; delete its data instead")
            target.clear()
        columns = (TextColumn("{task.description:>13}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=err) as progress:
            copy_graph(graph, target, batch_size, progress)
        counts = target.counts()
    except StoreError as exc:
        raise _fail(str(exc)) from exc
    finally:
        source.close()
        target.close()
    expected: dict[str, int] = {}
    for node in graph.nodes:
        expected[node.label] = expected.get(node.label, 0) + 1
    for rel in graph.relationships:
        expected[f":{rel.type}"] = expected.get(f":{rel.type}", 0) + 1
    short = {key: (n, counts.get(key, 0)) for key, n in expected.items() if counts.get(key, 0) < n}
    out.print(f"copied {len(graph.nodes)} nodes and {len(graph.relationships)} relationships from {source!r} "
              f"into {target!r}")
    if short:
        raise _fail("the target holds fewer records than were copied: "
                    + ", ".join(f"{k}: {have}/{want}" for k, (want, have) in short.items()), code=1)


def register(app: typer.Typer) -> None:
    """Add ``sync`` to ``app``."""
    app.command()(sync)
