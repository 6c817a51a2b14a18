"""Validator commands: ``klineage validate CANDIDATE.py --workload DIR`` and ``klineage validator serve``.

Exit codes of ``validate``: 0 when the verdict is pass, 1 when a gate failed, 2 on bad usage (missing or
non-UTF-8 candidate, missing workload folder, malformed manifest, unknown gate, bad shapes, a workload whose
``reference.py`` does not import or whose ``make_inputs`` fails: ``errors.WorkloadError``), printed as one
``error: ...`` line on stderr (with ``--json`` too: stdout then stays empty). With
``--json`` stdout carries the gate result document alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from klineage.validator.cache import default_cache_path
from klineage.validator.factory import VALIDATOR_HELP

out = Console()
err = Console(stderr=True)

validator_app = typer.Typer(name="validator", help="The validator service (gates behind an HTTP API).",
                            no_args_is_help=True)

_STYLE = {"pass": "green", "fail": "bold red", "skipped": "yellow"}



def _print_table(doc: dict[str, Any], cached: bool) -> None:
    table = Table(title=f"{doc.get('workload', '')}: verdict "
                        f"[{_STYLE.get(doc['verdict'], '')}]{doc['verdict']}[/]" + (" (cached)" if cached else ""))
    table.add_column("gate")
    table.add_column("status")
    table.add_column("reason", overflow="fold")
    for gate in doc["gates"]:
        style = _STYLE.get(gate["status"], "")
        table.add_row(gate["gate"], f"[{style}]{gate['status']}[/]", gate["reason"])
    out.print(table)
    out.print(f"kernel {doc['kernel_sha'][:16]}  gpu: {doc['gpu']}  "
              f"torch {doc['versions'].get('torch', '?')}  triton {doc['versions'].get('triton', '?')}  "
              f"{doc.get('date', '')}")


def validate(
    candidate: Annotated[Path, typer.Argument(help="Candidate module (defines run(*inputs)).")],
    workload: Annotated[str, typer.Option("--workload", "-w",
                                          help="Workload folder (with --validator: the workload's name).")],
    gates: Annotated[str, typer.Option(help="Comma-separated gates to run (static always runs).")] =
        "static,compile,correctness,integrity,performance",
    json_out: Annotated[bool, typer.Option("--json", help="Print only the gate result document.")] = False,
    shapes: Annotated[str | None, typer.Option(help="JSON list of shapes instead of the manifest's grid.")] = None,
    server: Annotated[str | None, typer.Option("--validator", "--server",
                                               help=VALIDATOR_HELP + " --server is the older name.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Wall-clock limit per job, seconds.")] = None,
    cpu: Annotated[bool, typer.Option("--cpu", help="Interpreter mode even when a GPU is present.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the result cache.")] = False,
) -> None:
    """Run the validator's gates on CANDIDATE for a workload and print the gate result document."""
    from klineage.validator import HttpValidator, ValidationRequestError, ValidatorUnavailable
    from klineage.validator.factory import make_validator
    from klineage.validator.runner import check_candidate_text

    def bad(message: str) -> typer.Exit:
        # one line however long (no wrapping at the console's width), the message's brackets taken literally
        err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
        return typer.Exit(2)

    if candidate.is_dir():
        raise bad(f"candidate {str(candidate)!r} is a folder; expected the kernel's .py file")
    if not candidate.is_file():
        raise bad(f"candidate file {str(candidate)!r} does not exist")
    try:
        source = check_candidate_text(candidate.read_bytes())
    except ValidationRequestError as exc:
        raise bad(f"{candidate}: {exc}") from exc
    try:
        shape_list = json.loads(shapes) if shapes else None
    except json.JSONDecodeError as exc:
        raise bad(f"--shapes is not JSON: {exc.msg}") from exc
    if shape_list is not None and not isinstance(shape_list, list):
        raise bad(f"--shapes: expected a JSON list of shape objects such as '[{{\"rows\": 4, \"cols\": 33}}]', "
                  f"got a JSON {type(shape_list).__name__}")
    cached = False
    try:
        client = make_validator(server, cache=None if no_cache else default_cache_path(), timeout_s=timeout,
                                device="cpu" if cpu else "auto")
        if isinstance(client, HttpValidator):  # the service's workload of that name
            result = client.validate(source, workload, gates, shape_list)
        else:
            result = client.validate(source, Path(workload), gates, shape_list)
            cached = client.last_cached
    except ValidationRequestError as exc:
        raise bad(str(exc)) from exc
    except ValidatorUnavailable as exc:
        raise bad(str(exc)) from exc
    doc = result.to_dict()
    if json_out:
        print(json.dumps(doc, indent=2, sort_keys=False, default=str))
    else:
        _print_table(doc, cached)
    raise typer.Exit(0 if result.verdict == "pass" else 1)


@validator_app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8100,
    workloads: Annotated[str | None, typer.Option(
        help="Workload roots, os.pathsep-separated (default: $KLINEAGE_WORKLOADS or ./workloads:./heldout).")] = None,
    workers: Annotated[int | None, typer.Option(help="Worker threads (default: one per GPU, one on CPU); with "
                                                "--ray, Ray actors (default: one per GPU of the cluster).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Wall-clock limit per job, seconds.")] = None,
    cpu: Annotated[bool, typer.Option("--cpu", help="Interpreter mode even when a GPU is present.")] = False,
    ray: Annotated[str | None, typer.Option(
        "--ray", metavar="ADDRESS",
        help="Run the jobs on a Ray cluster, one actor per GPU (a job per GPU at a time; with --workers N, N "
             "actors), all sharing this service's result cache. ADDRESS: 'auto' (the cluster `ray start "
             "--head` started on this host, or $RAY_ADDRESS), 'local' (start a one-host cluster here), "
             "HOST:PORT (the head's GCS port, 6379 by default) or ray://HOST:10001 (Ray Client). Needs the "
             "'ray' extra.")] = None,
) -> None:
    """Serve the validator over HTTP (POST /v1/jobs, GET /v1/jobs/{id}, POST /v1/validate, GET /v1/info)."""
    from klineage.validator import ValidationRequestError, ValidatorUnavailable
    from klineage.validator.service import ServiceConfig, default_workload_roots
    from klineage.validator.service import serve as run_service

    roots = [Path(p) for p in workloads.split(os.pathsep) if p] if workloads else default_workload_roots()
    config = ServiceConfig(workload_roots=roots, workers=workers, job_timeout_s=timeout,
                           device="cpu" if cpu else "auto", ray_address=ray)
    try:
        run_service(host=host, port=port, config=config)
    except (ValidatorUnavailable, ValidationRequestError) as exc:  # --ray: no cluster there, or too few GPUs
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from exc


@validator_app.command("info")
def info(cpu: Annotated[bool, typer.Option("--cpu", help="Probe interpreter mode.")] = False) -> None:
    """Print what the validator's workers run on (GPU, versions) as JSON."""
    from klineage.validator import LocalValidator

    device = LocalValidator(device="cpu" if cpu else "auto").device_info()
    print(json.dumps({"gpu": device.gpu, "versions": device.versions, "cuda": device.cuda}, indent=2))


def register(app: typer.Typer) -> None:
    """Add ``validate`` and the ``validator`` group to the ``klineage`` app."""
    app.command("validate")(validate)
    app.add_typer(validator_app, name="validator")
