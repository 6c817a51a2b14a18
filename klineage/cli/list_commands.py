"""Listing commands: ``klineage skills``, ``lineages``, ``workloads`` (what the knowledge base holds) and
``features`` (the feature names a search context and a skill's conditions use). Each prints a table, or
JSON with ``--json``."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from klineage.cli.kb_commands import _kb

out = Console()

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _emit(rows: list[dict[str, Any]], columns: list[tuple[str, str]], title: str, as_json: bool,
          empty: str) -> None:
    """Rows as JSON (every key) or as a table of ``columns`` (key, header); ``empty`` when there are none."""
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    if not rows:
        out.print(empty)
        return
    table = Table(title=title)
    for _, header in columns:
        table.add_column(header)
    for row in rows:
        table.add_row(*("—" if row.get(key) in (None, "") else str(row[key]) for key, _ in columns))
    out.print(table)


_EMPTY_KB = "the knowledge base is empty: `klineage ingest lineages/` (or `klineage demo`) fills it"


def skills(operator: Annotated[str | None, typer.Option(help="Only the skill of this operator.")] = None,
           as_json: AsJson = False) -> None:
    """List the skills: operator, name, measured effect, support and whether they are sample data."""
    kb = _kb()
    items: list[Any] = []
    after = None
    while True:
        page = kb.skills(first=200, after=after, operator=operator)
        items.extend(page.items)
        if not page.has_next:
            break
        after = page.end_cursor
    rows = [{"id": s.id, "operator": s.operator, "name": s.name,
             "median": s.effect.median, "min": s.effect.min, "max": s.effect.max, "shapes": s.effect.n,
             "support_steps": s.support_steps, "support_lineages": s.support_lineages,
             "architectures": list(s.architectures), "learned_on": list(s.workloads), "families": list(s.families),
             "sample": s.sample, "together": [t.view() for t in s.together]} for s in items]
    if not as_json:  # the table's columns only
        for row in rows:
            row["effect"] = "—" if row["median"] is None else f"{row['median']:.2f}× (n={row['shapes']})"
            row["support"] = f"{row['support_steps']} steps / {row['support_lineages']} lineages"
            row["learned"] = ", ".join(row["learned_on"])
            row["with"] = "; ".join(f"{t['workload']} {t['gain']:.2f}×" for t in row["together"]) or "—"
    _emit(rows, [("operator", "operator"), ("name", "name"), ("effect", "median effect"), ("support", "support"),
                 ("learned", "learned on"), ("with", "pays as one move in"), ("sample", "sample")], "Skills", as_json,
          _EMPTY_KB)


def lineages(workload: Annotated[str | None, typer.Option(help="Only the lineages of this workload.")] = None,
             as_json: AsJson = False) -> None:
    """List the lineages: workload, GPU, steps accepted of tried, whether measured, and the id."""
    rows = []
    for view in _kb().lineages(workload=workload):
        lin = view.lineage
        rows.append({"id": lin.id, "workload": lin.workload, "gpu": lin.gpu, "arch": lin.arch, "steps": lin.n_steps,
                     "accepted": lin.n_accepted, "measured": lin.measured, "sample": lin.sample,
                     "created": lin.created})
    _emit(rows, [("workload", "workload"), ("gpu", "GPU"), ("accepted", "accepted"), ("steps", "steps"),
                 ("measured", "measured"), ("sample", "sample"), ("id", "id")], "Lineages", as_json, _EMPTY_KB)


def workloads(as_json: AsJson = False) -> None:
    """List the workloads the knowledge base has lineages of: name, family, description."""
    rows = [{"id": w.id, "name": w.name, "family": w.family, "description": w.description}
            for w in _kb().workloads()]
    _emit(rows, [("name", "name"), ("family", "family"), ("description", "description")], "Workloads", as_json,
          _EMPTY_KB)


def features(as_json: AsJson = False) -> None:
    """List the feature names a search context (-c NAME=VALUE) and skills' conditions use, with their meaning.

    Problem and architecture features come from the context; kernel features from --kernel."""
    from klineage.kb.conditions import (
        ARCH_FEATURE_DOCS,
        KERNEL_FEATURE_DOCS,
        PORTABLE_FEATURES,
        PROBLEM_FEATURE_DOCS,
    )

    rows = []
    for kind, docs, given in (("problem", PROBLEM_FEATURE_DOCS, "-c NAME=VALUE (or --workload)"),
                              ("architecture", ARCH_FEATURE_DOCS, "-c NAME=VALUE"),
                              ("kernel", KERNEL_FEATURE_DOCS, "--kernel FILE")):
        for name, meaning in docs.items():
            rows.append({"name": name, "kind": kind, "portable": name in PORTABLE_FEATURES, "given_by": given,
                         "meaning": meaning})
    _emit(rows, [("name", "name"), ("kind", "kind"), ("given_by", "given by"), ("meaning", "meaning")],
          "Features of search contexts and skill conditions", as_json, "")


def register(app: typer.Typer) -> None:
    """Add ``skills``, ``lineages``, ``workloads`` and ``features`` to the ``klineage`` app."""
    app.command("skills")(skills)
    app.command("lineages")(lineages)
    app.command("workloads")(workloads)
    app.command("features")(features)
