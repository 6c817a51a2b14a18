"""Plot commands: ``klineage plot lineage NAME`` and ``klineage plot skill ID``, read from the KB.

Both write a PNG (``--out``, default ``lineage-<name>.png`` / ``skill-<operator>.png`` in the current
folder). ``--data-dir`` points the embedded store at another folder (it sets ``KLINEAGE_DATA_DIR`` for
this command). An unknown name or id exits with code 2 and lists the known ones.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

out = Console()
err = Console(stderr=True)

plot_app = typer.Typer(name="plot", help="Figures from the knowledge base: lineage waterfalls and skill "
                       "effect maps (PNG).", no_args_is_help=True)

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="the embedded store's folder "
                                              "(default: $KLINEAGE_DATA_DIR or ./.klineage)")]
OutFile = Annotated[Path | None, typer.Option("--output", "-o", "--out", help="the PNG file to write")]


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def _kb(data_dir: Path | None) -> Any:
    from klineage.kb.service import KnowledgeBase
    from klineage.kb.settings import DATA_DIR_ENV, open_store
    from klineage.kb.store import StoreError

    environ = dict(os.environ)
    if data_dir is not None:
        environ[DATA_DIR_ENV] = str(data_dir)
    try:
        return KnowledgeBase(open_store(environ))
    except StoreError as exc:
        raise _fail(str(exc)) from exc


@plot_app.command("lineage")
def plot_lineage(name: Annotated[str, typer.Argument(help="the workload name of a stored lineage")],
                 out_file: OutFile = None, data_dir: DataDir = None) -> None:
    """Waterfall of a lineage: speedup over the naive end of each kernel version, per case."""
    from klineage.ingest.plots import lineage_waterfall, save_png

    kb = _kb(data_dir)
    views = kb.lineages(workload=name)
    if not views:
        known = sorted({v.lineage.workload for v in kb.lineages()})
        listed = ", ".join(known) if known else "none (ingest lineages first: `klineage ingest`)"
        raise _fail(f"no lineage of workload {name!r} in the store; known workloads: {listed}")
    path = out_file or Path(f"lineage-{name}.png")
    for i, view in enumerate(views):
        lin = view.lineage
        sample = " (sample data, not measured)" if lin.sample else ""
        title = f"{name} on {lin.gpu or '?'}{sample}"
        target = path if i == 0 else path.with_name(f"{path.stem}-{i + 1}{path.suffix}")
        save_png(lineage_waterfall([s.to_dict() for s in view.steps], title), target)
        out.print(f"wrote {target} ({len(view.steps)} steps of lineage {view.lineage.id}){sample}")


@plot_app.command("skill")
def plot_skill(skill: Annotated[str, typer.Argument(help="a skill id or an operator id")],
               out_file: OutFile = None, data_dir: DataDir = None,
               x_feature: Annotated[str | None, typer.Option("--x", help="plot against this problem feature "
                                                            "(e.g. numel) instead of the case")] = None) -> None:
    """Effect map of a skill: measured speedup per case, coloured by workload."""
    from klineage.ingest.plots import save_png, skill_effect_map

    kb = _kb(data_dir)
    found = kb.skill(skill)
    if found is None:
        page = kb.skills(first=1, operator=skill)
        found = page.items[0] if page.items else None
    if found is None:
        every = kb.skills(first=10_000).items
        listed = ", ".join(f"{s.operator} ({s.id})" for s in every) or "none (ingest lineages first)"
        raise _fail(f"no skill with id or operator {skill!r}; known skills: {listed}")
    evidence = kb.evidence([found.id])[found.id]
    sample = " (sample data, not measured)" if found.sample else ""
    path = out_file or Path(f"skill-{found.operator}.png")
    save_png(skill_effect_map(evidence, f"{found.name} [{found.operator}]{sample}", x_feature), path)
    n = sum(len(e.speedups) for e in evidence)
    out.print(f"wrote {path} ({n} measured cases from {len(evidence)} step(s)){sample}")


def register(app: typer.Typer) -> None:
    """Add the ``plot`` command group to ``app``."""
    app.add_typer(plot_app, name="plot")
