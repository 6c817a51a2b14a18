"""Lineage commands: ``klineage walk WORKLOAD_DIR`` (the backward walk) and ``klineage replay LINEAGE``.

``walk`` gates the workload's kernel, then removes one optimization at a time (policy in
``klineage.ingest.walker``), and writes the lineage document (skills extracted from the accepted
steps). Every gate result is cached by kernel hash (``--cache``), so a walk stopped by ``--budget-s``
or a crash resumes with ``--resume``: the walk replays from the cache to where it stopped, starting
from the kernel the document records (not the workload's kernel file, which may have changed since).

Exit codes: 0 done (also when the walk is incomplete: the document says ``"complete": false``),
1 the starting kernel fails its gates, 2 bad usage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from klineage.cli.console import fail
from klineage.validator.cache import default_cache_path
from klineage.validator.factory import VALIDATOR_HELP

out = Console()
err = Console(stderr=True)

_STYLE = {"accept": "green", "reject": "red", "skip": "yellow", "measure": "dim", "measured": "", "stop": "bold"}



def _bad(message: str) -> typer.Exit:
    return fail(message)


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _resumed_start(document: Path, workload_dir: Path) -> str:
    """The kernel the walk in ``document`` started from: a resumed walk goes on from there, also when
    the workload's kernel file has changed since (then it says so)."""
    from klineage.ingest.walker import start_kernel
    from klineage.schema.errors import FormatError, ManifestError
    from klineage.schema.lineage_document import load_lineage_document
    from klineage.schema.manifest import load_manifest

    try:
        source = start_kernel(load_lineage_document(document).data)
        current = load_manifest(workload_dir).kernel_path.read_text(encoding="utf-8")
    except (FormatError, ManifestError, KeyError) as exc:
        raise _bad(f"cannot resume {document}: {exc}") from exc
    if source != current:
        out.print(f"[yellow]note:[/] {workload_dir.name}'s kernel file changed since {document} was started; "
                  "resuming the walk of the kernel the document started from (walk the new kernel into "
                  "another --out file)")
    return source


def walk(
    workload_dir: Annotated[Path, typer.Argument(help="Workload folder (manifest.toml, reference.py, the kernel).")],
    out_path: Annotated[Path | None, typer.Option("--output", "-o", "--out", help="Lineage document to write "
                                                  "(default: lineages/<workload>.lineage.json).")] = None,
    validator: Annotated[str | None, typer.Option(help=VALIDATOR_HELP)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a walk whose document exists, from the "
                                          "kernel it started from: cached gate results replay it to where "
                                          "it stopped.")] = False,
    cache: Annotated[Path | None, typer.Option(help="Gate result cache (default: $KLINEAGE_VALIDATOR_CACHE or "
                                               ".klineage/validator/cache.sqlite).")] = None,
    parallel: Annotated[int, typer.Option(min=1, max=64, help="Checking jobs run at a time (compile, "
                                          "correctness); performance jobs always run one at a time.")] = 4,
    budget_s: Annotated[float | None, typer.Option("--budget-s", help="Stop (incomplete) after this many "
                                                   "seconds; resume later.")] = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Stop after this many accepted steps.")] = 40,
    rep_ms: Annotated[float, typer.Option(help="Timed milliseconds per case for candidates.")] = 50.0,
    host_lead_us: Annotated[float, typer.Option(min=0.0, help="Keep the GPU busy this long after each L2 "
                                                "flush, so that a slow host launch path stays out of the "
                                                "times (0: the committed walks' method).")] = 0.0,
    cpu: Annotated[bool, typer.Option("--cpu", help="Interpreter mode even on a GPU (no timings).")] = False,
    no_skills: Annotated[bool, typer.Option("--no-skills", help="Write the walk without extracting skills.")] = False,
) -> None:
    """Walk WORKLOAD_DIR's kernel backward through gated simplifications and write its lineage document."""
    from klineage.ingest.walker import Walker, WalkError, WalkEvent, WalkOptions
    from klineage.schema.errors import ManifestError
    from klineage.validator import ValidationRequestError, ValidatorUnavailable
    from klineage.validator.factory import make_validator

    if not (workload_dir / "manifest.toml").is_file():
        raise _bad(f"{str(workload_dir)!r} is not a workload folder (no manifest.toml)")
    target = out_path or Path("lineages") / f"{workload_dir.resolve().name}.lineage.json"
    if target.exists() and not resume:
        raise _bad(f"{target} exists; pass --resume to continue that walk (its gate results are cached), "
                   "or --out another file")
    start_source = _resumed_start(target, workload_dir) if resume and target.exists() else None
    path = cache or default_cache_path()
    device = "cpu" if cpu else "auto"
    lead = {"host_lead_us": host_lead_us} if host_lead_us > 0 else {}
    try:
        # a Ray cluster's actors are shared by the two (they differ only in timing options)
        client: Any = make_validator(validator, cache=path, device=device,
                                     timing={"rep_ms": rep_ms, "baseline": False, **lead})
        baseline: Any = make_validator(validator, cache=path, device=device, timing=lead or None)
    except (ValidationRequestError, ValidatorUnavailable) as exc:
        raise _bad(str(exc)) from exc

    def show(event: WalkEvent) -> None:
        style = _STYLE.get(event.kind, "")
        text = f"[{style}]{event.message}[/]" if style else event.message
        out.print(f"[dim]{workload_dir.name} step {event.step:>2}[/] {text}", highlight=False)

    try:
        walker = Walker(workload_dir, client, options=WalkOptions(max_steps=max_steps, parallel=parallel,
                                                                 budget_s=budget_s),
                        baseline_validator=baseline, on_event=show, start_source=start_source)
        doc = walker.run()
    except ManifestError as exc:
        raise _bad(str(exc)) from exc
    except (ValidationRequestError, ValidatorUnavailable) as exc:
        raise _bad(str(exc)) from exc
    except WalkError as exc:
        err.print(f"[bold red]walk not started:[/] {exc}")
        raise typer.Exit(1) from exc
    if not no_skills:
        from klineage.ingest.extract import extract_skills

        doc["skills"] = extract_skills(doc)
    _write_atomic(target, doc)
    accepted = sum(1 for s in doc["steps"] if s["accepted"])
    state = "complete" if doc.get("complete", True) else "INCOMPLETE (resume with --resume)"
    out.print(f"{target}: {accepted} accepted of {len(doc['steps'])} steps, {len(doc['skills'])} skills, {state}")
    if not doc.get("measured", True):
        out.print("[yellow]not measured:[/] nothing was timed (no GPU: Triton interpreter); the document says "
                  "\"measured\": false and ingesting it adds no evidence of effect to any skill")


def replay(
    lineage: Annotated[Path, typer.Argument(help="A lineage document written by `klineage walk`.")],
    workload_dir: Annotated[Path, typer.Option("--workload", "-w", help="The workload folder it was walked on.")],
    cache: Annotated[Path | None, typer.Option(help="Gate result cache.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    generic: Annotated[bool, typer.Option(
        "--generic", help="Apply every skill with its generic defaults, as an agent would on new code, instead "
                          "of the parameters each step recorded (which rebuild the expert byte for byte).")] = False,
) -> None:
    """Rebuild the kernel forward from LINEAGE's naive end with its skills' apply; compare with the expert.

    By default each skill is applied with what its step recorded: the result is normally the expert
    itself (reported as identical: equal times by construction). ``--generic`` is the real test of the
    skills: the rebuilt kernel differs and is gated and timed against the expert on this machine.
    Exit status 0 when every case reaches 0.9x of the expert's throughput, 1 otherwise (the last line says
    why: on a CPU nothing is timed, so replay exits 1 there), 2 for bad usage."""
    from klineage.ingest.replay import replay_check
    from klineage.ingest.walker import Walker
    from klineage.schema.errors import FormatError
    from klineage.schema.lineage_document import load_lineage_document
    from klineage.validator import LocalValidator

    if not (workload_dir / "manifest.toml").is_file():
        raise _bad(f"--workload {str(workload_dir)!r} is not a workload folder (no manifest.toml)")
    try:
        doc = load_lineage_document(lineage).data
        path = cache or default_cache_path()
        walker = Walker(workload_dir, LocalValidator(cache=path, timing={"rep_ms": 50.0, "baseline": False}),
                        baseline_validator=LocalValidator(cache=path))
    except FormatError as exc:
        raise _bad(str(exc)) from exc
    report, rebuilt, _ = replay_check(doc, walker, recorded=not generic)
    verdict = "fail" if rebuilt.failed else "pass"
    reason = (f"the rebuilt kernel fails the {rebuilt.failed[0]} gate: {rebuilt.failed[1]}" if rebuilt.failed
              else report.why_not_passed)
    if json_out:
        print(json.dumps({**report.to_json(), "verdict": verdict}, indent=1))
        if reason:
            err.print(f"exit 1: {reason}")
    else:
        for s in report.steps:
            out.print(f"  {'+' if s.applied else '·'} {s.operator} {s.note}")
        if report.identical:
            out.print("  the rebuilt kernel is the expert byte for byte: its times are the expert's by construction")
        else:
            for c in report.cases:
                out.print(f"  {json.dumps(dict(c.shape))} {c.dtype}: {c.ratio:.3f}x of the expert")
        failed = rebuilt.failed
        out.print(f"replayed kernel ({report.mode}): {verdict}" + (f" ({failed[0]}: {failed[1]})" if failed else ""))
        if reason:
            out.print(f"[yellow]exit 1:[/] {reason}")
    sys.exit(0 if report.passed and verdict == "pass" else 1)


def register(app: typer.Typer) -> None:
    """Add ``walk`` and ``replay`` to the ``klineage`` app."""
    app.command("walk")(walk)
    app.command("replay")(replay)
