"""Knowledge-base commands: demo, serve, ingest, search, export."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from klineage.cli.console import fail, say
from klineage.schema.errors import FormatError
from klineage.schema.lineage_document import SAMPLE_LABEL, LineageDocument, load_lineage_document

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout's root; site-packages when installed
LINEAGES_ENV = "KLINEAGE_LINEAGES"  # a folder of lineage documents (the Docker image: /app/lineages)
LINEAGE_DIRS = (Path("lineages"), REPO_ROOT / "lineages")
FIXTURE_DIRS = (Path("tests") / "fixtures" / "lineages", REPO_ROOT / "tests" / "fixtures" / "lineages")

out = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    return fail(message, code)


def _kb() -> Any:
    from klineage.kb.service import KnowledgeBase
    from klineage.kb.settings import open_store
    from klineage.kb.store import StoreError

    try:
        return KnowledgeBase(open_store())
    except StoreError as exc:  # an unknown KLINEAGE_STORE, an unreachable Neo4j: the user's setting
        raise _fail(str(exc)) from exc


def find_lineage_documents() -> tuple[list[Path], bool]:
    """Real lineage documents, or the test fixtures when there are none.

    Looks in ``$KLINEAGE_LINEAGES``, then ``lineages/`` under the working directory, then under the
    checkout; the fixtures in ``tests/fixtures/lineages`` likewise (working directory, then checkout:
    an installed package has neither next to it). Returns the paths and whether they are fixtures
    (sample data, not measured).
    """
    configured = os.environ.get(LINEAGES_ENV)
    for folder in ((Path(configured),) if configured else ()) + LINEAGE_DIRS:
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if found:
            return found, False
    for folder in FIXTURE_DIRS:
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if found:
            return found, True
    return [], True


def _load_all(paths: list[Path]) -> list[LineageDocument]:
    docs = []
    for path in paths:
        try:
            docs.append(load_lineage_document(path))
        except FormatError as exc:
            raise _fail(str(exc)) from exc
    return docs


def _record_trials(kb: Any, files: list[Path]) -> int:
    """Record the trial files (``ingest.trials``) into ``kb``; clean errors, exit code 2. Returns how many."""
    from klineage.ingest.trials import TrialError, load_trials, record_trials
    from klineage.kb.store import StoreError

    recorded = 0
    for path in files:
        with Progress(console=err, transient=True) as progress:
            progress.add_task(f"recording the trials of {path}", total=None)
            try:
                recorded += record_trials(kb, load_trials(path))
            except (TrialError, StoreError) as exc:
                raise _fail(str(exc)) from exc
    return recorded


def _ingest(kb: Any, docs: list[LineageDocument]) -> list[Any]:
    """Ingest with skills merged across the documents and the lineages already stored
    (``ingest.pipeline``: conditions re-induced from all the evidence); clean errors, exit code 2."""
    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.service import IngestError
    from klineage.kb.store import StoreError

    with Progress(console=err, transient=True) as progress:
        progress.add_task(f"ingesting {len(docs)} lineage(s), merging skills", total=None)
        try:
            summary = ingest_lineages(kb, docs)
        except (IngestError, FormatError, StoreError) as exc:  # StoreError: e.g. the write lock timed out
            raise _fail(str(exc)) from exc
    for skill, condition in summary.replaced:
        err.print(f"[yellow]note:[/] {skill}: condition {condition.expr!r} replaced by one re-induced from "
                  "more evidence")
    return list(summary.reports)


def _tag(sample: bool) -> str:
    return f" [yellow]({SAMPLE_LABEL})[/]" if sample else ""


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def _context_pairs(pairs: list[str]) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for pair in pairs:
        if pair.lstrip().startswith("{"):
            try:
                obj = json.loads(pair)
            except json.JSONDecodeError as exc:
                raise _fail(f"--context {pair!r}: not a JSON object ({exc.msg}); expected NAME=VALUE "
                            "or a JSON object such as '{\"M\": 4096, \"dtype\": \"bf16\"}'") from exc
            if not isinstance(obj, dict):
                raise _fail(f"--context {pair!r}: expected a JSON object of feature name to value")
            context.update(obj)
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--context {pair!r}: expected NAME=VALUE, e.g. --context M=4096")
        text = value.strip()
        parsed: Any
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = text
        context[key.strip()] = parsed
    return context


def _context_from_workload(directory: Path) -> dict[str, Any]:
    """The workload's representative shape as a search context, as the agent sees it
    (``kb.features.workload_context``); a note on stderr when dims had to be left out."""
    from klineage.kb.features import FeatureError, workload_context
    from klineage.schema.manifest import load_manifest

    try:
        manifest = load_manifest(directory)
        found = workload_context(manifest)
    except (FormatError, FeatureError) as exc:
        raise _fail(str(exc)) from exc
    if found.left_out:
        say(f"note: {found.note(manifest)}")
    return found.context


def hit_to_json(hit: Any) -> dict[str, Any]:
    """A search hit as plain JSON with the same fields as GraphQL's ``SkillHit``."""
    s = hit.skill
    return {
        "skill": {"id": s.id, "name": s.name, "operator": s.operator, "intent": s.intent,
                  "anchor": {"predicate": s.anchor.predicate, "description": s.anchor.description},
                  "carrier": s.carrier, "transform": dict(s.transform), "effect": s.effect.to_dict(),
                  "support": s.support_steps, "supportLineages": s.support_lineages,
                  "architectures": list(s.architectures), "sample": s.sample},
        "score": hit.score,
        "applicable": hit.applicable,
        "explanation": {
            "passed": list(hit.passed), "failed": list(hit.failed), "unknown": list(hit.unknown),
            "evidence": [{"lineageId": e.lineage_id, "stepId": e.step_id, "workload": e.workload, "gpu": e.gpu,
                          "speedups": [dict(x) for x in e.speedups], "sample": e.sample} for e in hit.evidence],
        },
        "why": hit.why,  # the score explained, and the features undecided conditions need
        "missingFeatures": list(hit.missing_features),
        "together": hit.together.view() if hit.together is not None else None,
    }


def print_hits(hits: list[Any], text: str | None = None) -> None:
    """Print search hits as a table followed by each hit's explanation (its score explained, the
    features its unknown conditions need); says so when nothing matched."""
    if not hits:
        about = f" {text!r}" if text else ""
        out.print(f"No skill matches{about}: no skill's text is near it and no condition picks one out. "
                  "Try other words, a context (-c NAME=VALUE; `klineage features` lists the names) or --kernel.")
        return
    table = Table(title="searchSkills")
    for col in ("#", "skill", "operator", "applicable", "score", "median effect"):
        table.add_column(col)
    for i, hit in enumerate(hits, 1):
        table.add_row(str(i), hit.skill.name + _tag(hit.skill.sample), hit.skill.operator, hit.applicable,
                      f"{hit.score:.3f}", _fmt(hit.skill.effect.median))
    out.print(table)
    for i, hit in enumerate(hits, 1):
        out.print(f"[bold]{i}. {hit.skill.name}[/] ({hit.applicable}){_tag(hit.skill.sample)}")
        out.print(f"   {hit.skill.admission}")
        why = getattr(hit, "why", None)
        if why:
            out.print(f"   [dim]{why}[/]")
        missing = getattr(hit, "missing_features", ())
        if missing:
            out.print(f"   [yellow]undecided[/]: give {', '.join(missing)} to decide its conditions "
                      "(`klineage features` says what each means)")
        for label, items, colour in (("passed", hit.passed, "green"), ("failed", hit.failed, "red"),
                                     ("unknown", hit.unknown, "yellow")):
            for item in items:
                out.print(f"   [{colour}]{label}[/]: {item}{_tag(hit.skill.sample)}")
        for ev in hit.evidence[:3]:
            speeds = ", ".join(f"{x['speedup']:.2f}×" for x in ev.speedups[:4])
            out.print(f"   evidence: {ev.workload} on {ev.gpu}, speedups {speeds}{_tag(ev.sample)}")


def demo() -> None:
    """Build the knowledge base from every lineage document found, print the skills, answer one search."""
    paths, fixtures = find_lineage_documents()
    if not paths:
        raise _fail("no lineage documents found in lineages/ or tests/fixtures/lineages/")
    kb = _kb()
    docs = _load_all(paths)
    reports = _ingest(kb, docs)
    source = f"{len(docs)} test fixture(s)" if fixtures else f"{len(docs)} measured lineage(s)"
    if not fixtures:
        from klineage.ingest.trials import find_trial_files

        trial_files = find_trial_files(paths[0].parent.parent)
        if trial_files:
            recorded = _record_trials(kb, trial_files)
            source += f" and {recorded} verified trial(s) of agents on held-out kernels"
    out.print(f"Knowledge base built from {source} into {kb.store!r}{_tag(fixtures)}")
    for doc, report in zip(docs, reports, strict=True):
        out.print(f"  {doc.workload}: lineage {report.lineage_id}, {len(report.skill_ids)} skill(s){_tag(doc.sample)}")
    table = Table(title="Skills" + (f" — {SAMPLE_LABEL}" if fixtures else ""))
    for col in ("operator", "name", "median effect", "range", "n", "support", "sample"):
        table.add_column(col)
    page = kb.skills(first=100)
    for s in page.items:
        rng = "—" if s.effect.min is None else f"{s.effect.min:.2f}–{s.effect.max:.2f}×"
        table.add_row(s.operator, s.name, _fmt(s.effect.median), rng, str(s.effect.n),
                      f"{s.support_steps} steps / {s.support_lineages} lineages",
                      SAMPLE_LABEL if s.sample else "measured")
    out.print(table)
    query, context = _demo_query(docs)
    out.print(f"\nExample search: text={query!r} context={context}{_tag(fixtures)}")
    print_hits(kb.search(text=query, context=context, limit=5))


def _demo_query(docs: list[LineageDocument]) -> tuple[str, dict[str, Any]]:
    """A search about the first lineage's workload, on its first measured shape (GEMM when none)."""
    for doc in docs:
        for step in doc.data["steps"]:
            for timing in step.get("timings", ()):
                arch = doc.data["gpu"]["arch"].removeprefix("sm_").rstrip("a")
                context = {**timing["shape"], "dtype": timing["dtype"], "arch": int(arch) if arch.isdigit() else 90}
                return f"make a {doc.workload.replace('_', ' ')} kernel faster", context
    return "make a matrix multiply faster on large square shapes", {"M": 4096, "N": 4096, "K": 4096,
                                                                    "dtype": "bf16", "arch": 90}


def serve_app() -> Any:
    """The GraphQL app over the configured store (``KLINEAGE_STORE``, ``KLINEAGE_DATA_DIR``), recording
    applications with feedback, its embedding model and skills loaded before it is returned: what
    ``klineage serve`` runs in each worker (``uvicorn --factory``)."""
    from klineage.graphql.app import create_app
    from klineage.ingest.feedback import record_with_feedback

    kb = _kb()
    with err.status("loading the embedding model and the skills (once, at start-up)"):
        seconds = kb.warm_up()
    err.print(f"ready in {seconds:.1f} s: the first request answers as fast as the others")
    # as `klineage mcp` does: enough verified applications with a context re-induce a skill's conditions
    return create_app(kb, recorder=record_with_feedback)


def serve(host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
          port: Annotated[int, typer.Option(help="Port; GraphiQL is at /graphql.")] = 8000,
          workers: Annotated[int, typer.Option(min=1, help="Worker processes (each loads the store and the "
                                               "embedder; writes serialize on the store's lock).")] = 1) -> None:
    """Serve the GraphQL API (GraphiQL at /graphql, health at /healthz) over the configured store.

    The embedding model is loaded at start-up, before the port opens; `klineage search --server URL`
    then answers without loading it."""
    if workers == 1:
        import uvicorn

        uvicorn.run(serve_app(), host=host, port=port, log_level="info")
    else:  # one SO_REUSEPORT socket per process: the kernel spreads keep-alive clients evenly
        from klineage.cli.reuseport import run_workers

        raise typer.Exit(run_workers("klineage.cli.kb_commands:serve_app", host, port, workers))


def ingest(paths: Annotated[list[Path], typer.Argument(help="Lineage document files (JSON) or folders of them.")],
           trials: Annotated[list[Path] | None, typer.Option(
               "--trials", help="A trial file (JSON lines of agents' verified applications, e.g. "
               "trials/h200.jsonl from bench/export_trials.py), recorded after the lineages; repeatable.")] = None,
           ) -> None:
    """Add lineage documents to the knowledge base (idempotent: ingesting twice changes nothing), then the
    trials given with --trials (each a verified application: the skills' trial counts, which outvote their
    PROFITABLE_WHEN in search once there are three)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob("*.json")))
        elif path.is_file():
            files.append(path)
        else:
            raise _fail(f"{path}: no such file or folder (expected a lineage document .json or a folder of them)")
    if not files:
        raise _fail("no lineage documents (*.json) in the given folders")
    docs = _load_all(files)
    kb = _kb()
    for doc, report in zip(docs, _ingest(kb, docs), strict=True):
        out.print(f"{doc.source}: lineage {report.lineage_id}, {len(report.skill_ids)} skill(s), "
                  f"{report.nodes} nodes, {report.relationships} relationships{_tag(doc.sample)}")
    for path in trials or []:
        if not path.is_file():
            raise _fail(f"--trials {path}: no such file (expected a JSON-lines trial file)")
        out.print(f"{path}: {_record_trials(kb, [path])} trial(s) recorded")


def search(
    text: Annotated[str | None, typer.Argument(help="What you want to do, in words.")] = None,
    context: Annotated[list[str] | None, typer.Option("--context", "-c",
                       help="Problem feature NAME=VALUE (repeatable), e.g. -c M=4096 -c dtype=bf16, or a "
                       "JSON object, e.g. -c '{\"M\": 4096, \"dtype\": \"bf16\"}'.")] = None,
    kernel: Annotated[Path | None, typer.Option(help="A Triton kernel file: only skills whose operator "
                                                "can be added to it (its detect finds a place) and whose "
                                                "conditions hold are applicable.")] = None,
    workload: Annotated[Path | None, typer.Option(help="A workload folder: the context is filled from its "
                                                  "first shape and dtype.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100)] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON list of hits.")] = False,
    server: Annotated[str | None, typer.Option("--server", help="Ask a running `klineage serve` (its URL, "
                                               "e.g. http://127.0.0.1:8000) instead of the local store.")] = None,
) -> None:
    """Find skills for a text, a problem context and/or a kernel, each hit explained.

    A hit is APPLICABLE when all its conditions hold, NOT_APPLICABLE when one is false, UNKNOWN when the
    context lacks a feature they need: `klineage features` lists the feature names (-c NAME=VALUE) and what
    each means; --kernel gives the kernel features. A text no skill is near returns no hit."""
    ctx = _context_from_workload(workload) if workload else {}
    ctx.update(_context_pairs(context or []))
    source: str | None = None
    if kernel is not None:
        if not kernel.is_file():
            raise _fail(f"--kernel {kernel}: no such file")
        try:
            source = kernel.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(f"--kernel {kernel}: expected UTF-8 Python source") from exc
    if server is not None:
        hits = _search_server(server, text, ctx or None, source, limit)
    else:
        hits = _search_local(text, ctx or None, source, limit, kernel)
    if as_json:
        sys.stdout.write(json.dumps([hit_to_json(h) for h in hits], indent=2) + "\n")
    else:
        print_hits(hits, text)


def _search_server(server: str, text: str | None, context: dict[str, Any] | None, source: str | None,
                   limit: int) -> list[Any]:
    """``searchSkills`` on a running server through ``klineage.client`` (it derives the kernel's facts)."""
    from klineage.client import KLineageClient, KLineageError

    try:
        with KLineageClient(server) as client:
            return list(client.search_skills(text, context, source, limit))
    except KLineageError as exc:
        raise _fail(f"--server {server}: {exc}") from exc


def _search_local(text: str | None, context: dict[str, Any] | None, source: str | None, limit: int,
                  kernel: Path | None) -> list[Any]:
    """``KnowledgeBase.search`` on the configured store, with the kernel's facts derived here."""
    facts: dict[str, Any] = {}
    if source is not None:
        from klineage.transforms.facts import kernel_facts

        try:
            facts = kernel_facts(source).search_kwargs()
        except SyntaxError as exc:
            raise _fail(f"--kernel {kernel}: line {exc.lineno}: {exc.msg}") from exc
    try:
        return list(_kb().search(text=text, context=context, limit=limit, **facts))
    except ValueError as exc:
        raise _fail(str(exc)) from exc


def export(fmt: Annotated[str, typer.Option("--format", help="json or graphml")] = "json",
           output: Annotated[Path | None, typer.Option("--output", "-o", help="File (default: stdout).")] = None
           ) -> None:
    """Export the whole knowledge base as JSON (nodes and relationships) or GraphML."""
    from klineage.kb.export import to_graphml, to_json

    if fmt not in ("json", "graphml"):
        raise _fail(f"--format {fmt!r}: expected json or graphml")
    batch = _kb().store.export()
    text = to_json(batch) if fmt == "json" else to_graphml(batch)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        err.print(f"wrote {len(batch.nodes)} nodes and {len(batch.relationships)} relationships to {output}")


def register(app: typer.Typer) -> None:
    """Add the knowledge-base commands to ``app``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app.command()(demo)
    app.command()(serve)
    app.command()(ingest)
    app.command()(search)
    app.command()(export)
