"""``klineage optimize``: run the optimizing agent on a kernel, under the validator's gates.

Exit codes: 0 when a kernel that passed every gate is returned (the start when nothing better passed),
1 when not even the starting kernel passed, 2 on bad usage (missing file or folder, malformed manifest,
unknown method, an empty knowledge base for a method that needs one), 3 when the validator could not be reached
or stopped answering (mid-run: the report of the calls judged before is printed and the best kernel so far
written to ``--output`` first). Progress goes to stderr;
``--json`` prints only the report on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from klineage.agent import METHODS, AgentReport, ProblemError, load_problem, make_planner, optimize
from klineage.agent.moves import Move, materialize
from klineage.agent.state import AgentState
from klineage.cli.console import fail, say
from klineage.validator.factory import VALIDATOR_HELP

out = Console()
err = Console(stderr=True, soft_wrap=True)


def _fail(message: str) -> typer.Exit:
    return fail(message)


def _validator(spec: str | None, cache: Path | None, cpu: bool) -> Any:
    from klineage.validator.cache import default_cache_path
    from klineage.validator.factory import make_validator

    return make_validator(spec, cache=cache or default_cache_path(), device="cpu" if cpu else "auto")


def _print_report(report: AgentReport) -> None:
    unit = "× vendor" if report.measured else "(not measured)"
    table = Table(title=f"{report.problem} — method {report.method}: {report.calls_used} of {report.budget} calls, "
                        f"{report.calls_wasted} wasted")
    for col in ("call", "move", "operators", "from", "verdict", f"speedup {unit}", "kept"):
        table.add_column(col)
    start = report.start
    table.add_row("0", "start", "", "", start.verdict, _fmt(start.speedup), "")
    for a in report.trajectory:
        verdict = a.verdict if a.verdict == "pass" else f"fail ({a.failed_gate})"
        table.add_row(str(a.call), a.move.label, "+".join(s.label() for s in a.applied), a.move.origin, verdict,
                      _fmt(a.speedup), "yes" if a.accepted else "")
    out.print(table)
    best = report.best
    if best is None:
        out.print("[bold red]No kernel passed every gate (not even the start).[/]")
    elif report.measured:
        out.print(f"best: {_fmt(best.speedup)}× vendor (start {_fmt(start.speedup)}×), kernel {best.kernel_sha[:16]}")
    else:
        out.print(f"best: kernel {best.kernel_sha[:16]} passed the checking gates; no performance was measured "
                  "(no GPU): moves were ranked by the knowledge base's expected gain")
    for note in report.notes:
        out.print(f"note: {note}", markup=False, highlight=False)


def _print_plan(moves: list[Move], name: str, method: str, as_json: bool, source: str) -> None:
    """The planned moves: JSON (``--json``) or a table. The first untried ones that change the kernel are what
    the loop validates; after a call the planner plans again from the kernel kept."""
    # a planned move whose operators find nothing to change in this kernel costs no call: the loop skips it
    makes = [materialize(source, m) is not None for m in moves]
    if as_json:
        sys.stdout.write(json.dumps([{**m.to_dict(), "materializes": made} for m, made in zip(moves, makes,
                                                                                           strict=True)],
                                    indent=2) + "\n")
        return
    table = Table(title=f"{name} — method {method}: {len(moves)} planned moves (before any call)")
    for col in ("#", "move", "operators", "from", "expected gain", "why"):
        table.add_column(col)
    for i, (m, made) in enumerate(zip(moves, makes, strict=True), 1):
        why = m.why if made else f"{m.why} — cannot be made on this kernel as written: skipped"
        table.add_row(str(i), m.label, "+".join(s.label() for s in m.steps), m.origin, _fmt(m.expected_gain),
                      escape(why))
    out.print(table)
    if not moves:
        hint = ("no @triton.jit kernel was found in it" if "triton.jit" not in source else
                "no operator finds anything to change in it (every optimization they know is already there, or "
                "none applies to this kernel's form)")
        say(f"note: no move planned for {name}: {hint}")


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def optimize_command(
    kernel: Annotated[Path, typer.Argument(help="Candidate module to optimize (defines run(*inputs)), e.g. "
                                                "heldout/bmm/naive.py.")],
    workload: Annotated[Path, typer.Option("--workload", "-w", help="Workload folder: manifest.toml, "
                                                                     "reference.py (e.g. heldout/bmm).")],
    budget: Annotated[int, typer.Option(min=0, max=100, help="Validator calls to spend on candidates (the start's "
                                                             "validation is not counted).")] = 10,
    method: Annotated[str, typer.Option(help="klineage (plan along lineages), memory (trajectories by "
                                             "embedding similarity only), none (operators in a fixed order) or greedy "
                                             "(applicable skills in search rank order, defaults).")]
        = "klineage",
    validator: Annotated[str | None, typer.Option(help=VALIDATOR_HELP)] = None,
    cache: Annotated[Path | None, typer.Option(help="Local validator's result cache (SQLite).")] = None,
    cpu: Annotated[bool, typer.Option("--cpu", help="Interpreter mode even when a GPU is present.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the best kernel here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the report (JSON) on stdout.")] = False,
    no_record: Annotated[bool, typer.Option("--no-record", help="Do not record the attempts as Applications in "
                                                                "the knowledge base.")] = False,
    plan: Annotated[bool, typer.Option("--plan", help="Print the moves the method would try on KERNEL, in order, "
                                                      "with where each comes from and why, and stop: no validator "
                                                      "call, nothing recorded.")] = False,
) -> None:
    """Optimize KERNEL for a workload: plan moves from the knowledge base, validate each candidate with
    every gate, keep the best that passes.

    Without a GPU the gates run under the Triton interpreter and no performance is measured: the report
    says so on every line, and moves are ranked by the knowledge base's expected gain.
    """
    if method not in METHODS:
        raise _fail(f"--method {method!r}: expected one of {', '.join(METHODS)}")
    if output is not None:  # checked before any validator call: a bad path must not cost the run's GPU time
        _check_output(output)
    try:
        problem = load_problem(kernel, workload)
    except ProblemError as exc:
        raise _fail(str(exc)) from exc
    kb = None
    if method != "none" or not no_record:
        from klineage.kb.service import KnowledgeBase
        from klineage.kb.settings import open_store

        kb = KnowledgeBase(open_store())
        if method != "none" and not kb.lineages():
            raise _fail("the knowledge base holds no lineage: build it first (`klineage ingest lineages/` or "
                        "`make demo`), or choose --method none")
    planner = make_planner(method, kb)
    if plan:
        _print_plan(planner.plan(AgentState(problem, problem.source)), problem.name, method, as_json,
                    problem.source)
        return
    from klineage.validator import ValidationRequestError, ValidatorUnavailable

    try:
        report = optimize(problem, planner, _validator(validator, cache, cpu), budget=budget,
                          kb=None if no_record else kb, progress=say)
    except ValidationRequestError as exc:
        raise _fail(str(exc)) from exc
    except ValidatorUnavailable as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(3) from exc
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        _print_report(report)
    if output is not None and report.best_source is not None:
        try:
            output.write_text(report.best_source, encoding="utf-8")
        except OSError as exc:  # the report is printed above: nothing of the run is lost
            raise _fail(f"--output {output}: could not write the best kernel: {exc.strerror or exc}") from exc
        err.print(f"wrote {output}")
    if report.interrupted is not None:
        err.print(f"[bold red]error:[/] the run stopped early: {report.interrupted}")
        raise typer.Exit(3)
    if report.best is None:
        raise typer.Exit(1)


def _check_output(output: Path) -> None:
    """``--output`` must name a file in an existing folder (typer.Exit 2 otherwise, before any work)."""
    if output.is_dir():
        raise _fail(f"--output {output}: is a folder; expected the path of the .py file to write")
    folder = output.parent if str(output.parent) else Path(".")
    if not folder.is_dir():
        raise _fail(f"--output {output}: folder {folder} does not exist (create it first)")


def register(app: typer.Typer) -> None:
    """Add ``optimize`` to the ``klineage`` app."""
    app.command("optimize")(optimize_command)
