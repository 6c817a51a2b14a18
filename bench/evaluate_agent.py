"""The agent's evaluation: every held-out instance × method under one budget of validator calls.

Three steps, so that the GPU run needs neither the embedding model nor an ingest:

    python bench/evaluate_agent.py prepare --out .eval            # CPU: KB from lineages/, frozen embeddings
    python bench/evaluate_agent.py run --prepared .eval --budget-s 540   # GPU (one device call): resumable
    python bench/evaluate_agent.py table                          # anywhere: the table and the plots

``run`` validates through ``LocalValidator`` (or ``--validator``: a service URL or a Ray cluster, e.g.
``ray:auto``, whose actors share ``--cache``) with a SQLite result cache (``--cache``, committed): a second
call replays every gate result the first one measured (the agent is deterministic given the results)
and goes on where it stopped. Finished runs are rows of ``--results`` (JSON lines, with GPU, versions,
date and kernel hashes); a run cut short by the time budget writes no row. Every method gets the same
loop, materializer, gates and budget (``klineage.agent``). The starting kernel's validation is not
counted in the budget (it is the same for every method).

Without a GPU, ``--validator cache-only:H100`` replays what that GPU measured (``--cache``) and nothing else: a
run that meets a kernel the GPU never judged stops there, and its row goes to ``--partial`` (beside
``--results``, NAME.partial.jsonl) with ``interrupted`` saying which call; ``table --partial FILE`` shows such a
run's best so far as a lower bound (≥) where no finished run exists. A later GPU call finishes it.

The table: per instance, the best speedup over the vendor of each method (a method that returned no
passing kernel counts as the starting kernel's own speedup), geometric mean clamped to [0, 10], calls
to reach 95 % of the final speedup, calls wasted on gate failures.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.agent import METHODS, load_problem, make_planner, optimize  # noqa: E402
from klineage.agent.lineages import load_lineages  # noqa: E402
from klineage.agent.planners import memory_query  # noqa: E402
from klineage.kb.embedded_store import EmbeddedStore  # noqa: E402
from klineage.kb.embedder import FrozenEmbedder  # noqa: E402
from klineage.kb.service import KnowledgeBase  # noqa: E402
from klineage.schema.manifest import load_manifest  # noqa: E402
from klineage.validator import ValidatorUnavailable  # noqa: E402
from klineage.validator.cache_only import CacheOnlyValidator  # noqa: E402
from klineage.validator.runner import TIMING_METHOD  # noqa: E402

HELDOUT = ROOT / "heldout"
RESULTS = ROOT / "bench" / "results" / "agent-h200.jsonl"
CACHE = ROOT / "bench" / "results" / "agent-h200-cache.sqlite"
PLOTS = ROOT / "docs" / "plots"
CLAMP = (0.0, 10.0)


class OutOfTime(RuntimeError):
    """The time budget ended before the next validator call."""


class DeadlineValidator:
    """A validator that refuses to start a call after ``deadline`` (time.monotonic()): a run cut there is
    abandoned, and its finished calls stay in the result cache for the next device call."""

    def __init__(self, inner: Any, deadline: float) -> None:
        self.inner = inner
        self.deadline = deadline

    def validate(self, *args: Any, **kwargs: Any) -> Any:
        """Validate through the inner validator unless the time is up."""
        if time.monotonic() > self.deadline:
            raise OutOfTime("time budget spent")
        return self.inner.validate(*args, **kwargs)


def instances(names: str | None) -> list[Path]:
    """Held-out workload folders: the comma-separated ``names`` in the order given, or all of them taking
    one family at a time in turn (alphabetical within a family), so that a call cut short by its time
    budget has finished instances of every family rather than the first letters of the alphabet."""
    found = sorted(p for p in HELDOUT.iterdir() if (p / "manifest.toml").is_file())
    if not names:
        by_family: dict[str, list[Path]] = {}
        for folder in found:
            by_family.setdefault(load_manifest(folder).family, []).append(folder)
        queues = [by_family[f] for f in sorted(by_family)]
        return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    wanted = names.split(",")
    missing = sorted(set(wanted) - {p.name for p in found})
    if missing:
        raise SystemExit(f"unknown held-out instance(s): {', '.join(missing)}")
    by_name = {p.name: p for p in found}
    return [by_name[name] for name in wanted]


def agent_version() -> str:
    """A hash of the source of what plans: the agent, the operators, the knowledge base's search and the ingest that
    builds the evaluation's knowledge base from the lineages. A result row is reused only by the same code."""
    import hashlib

    digest = hashlib.sha256()
    for folder in ("klineage/agent", "klineage/transforms", "klineage/kb", "klineage/ingest"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def partial_path(args: argparse.Namespace) -> Path:
    """Where rows of interrupted runs go: ``--partial``, else beside ``--results`` as NAME.partial.jsonl."""
    return args.partial or args.results.with_suffix(".partial.jsonl")


def spread(shapes: tuple[Any, ...], n: int | None) -> list[dict[str, Any]] | None:
    """``n`` shapes of the grid spread over its sizes (smallest to largest); None = the whole grid."""
    if n is None or n >= len(shapes):
        return None
    ranked = sorted(shapes, key=lambda s: math.prod(v for v in s.values() if not isinstance(v, bool)))
    picks = sorted({round(i * (len(ranked) - 1) / max(1, n - 1)) for i in range(n)})
    return [dict(ranked[i]) for i in picks]


# ---------------------------------------------------------------------------------------------- prepare


def prepare(args: argparse.Namespace) -> int:
    """Build the knowledge base from the committed lineages and freeze every embedding the run needs."""
    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.embedder import Embedder, freeze_embeddings
    from klineage.schema.lineage_document import load_lineage_document

    out: Path = args.out
    (out / "kb").mkdir(parents=True, exist_ok=True)
    embedder = Embedder()
    kb = KnowledgeBase(EmbeddedStore(out / "kb"), embedder)
    docs = [load_lineage_document(p) for p in sorted((ROOT / "lineages").glob("*.lineage.json"))]
    ingest_lineages(kb, docs)
    texts = [lin.text() for lin in load_lineages(kb)]
    for folder in instances(None):
        problem = load_problem(None, folder)
        texts += [problem.text(), memory_query(problem)]
    n = freeze_embeddings(embedder, texts, out / "embeddings.json")
    print(f"prepared {out}: knowledge base from {len(docs)} lineages, {n} frozen embeddings")
    return 0


# ---------------------------------------------------------------------------------------------- run


def _done(*results: Path) -> set[tuple[str, str, int, str]]:
    """The (instance, method, budget, options) of every row in ``results`` (files that do not exist hold none)."""
    rows = [r for path in results if path.is_file() for r in _read_rows(path)]
    return {(r["instance"], r["method"], r["budget"], json.dumps(r["options"], sort_keys=True)) for r in rows}


def run(args: argparse.Namespace) -> int:
    """Run every instance × method not yet in the results, ``--jobs`` side by side, within the time budget.

    Runs in flight share one trusted validator: their checking gates share the GPU, each timed case has it
    alone (``validator.device_lock``), so a speedup is measured as if the run were the only one. The
    knowledge base is read-only here (no Application is recorded), so every instance meets the same one.
    """
    from concurrent.futures import ThreadPoolExecutor

    from klineage.validator.factory import make_validator

    started = time.monotonic()
    deadline = started + args.budget_s
    kb = KnowledgeBase(EmbeddedStore(args.prepared / "kb"), FrozenEmbedder.load(args.prepared / "embeddings.json"))
    timing: dict[str, Any] = {"rep_ms": args.rep_ms}
    if args.autotune_rep_ms is not None:
        timing["autotune_rep_ms"] = args.autotune_rep_ms
    client = make_validator(args.validator, cache=args.cache, device="cpu" if args.cpu else "auto", timing=timing)
    info = client.device_info()
    validator = DeadlineValidator(client, deadline)
    options = {**({"autotune_rep_ms": args.autotune_rep_ms} if args.autotune_rep_ms is not None else {}),
               "rep_ms": args.rep_ms, "max_shapes": args.max_shapes, "device": "cuda" if info.cuda else "cpu",
               "agent": agent_version(), "kb": "frozen", "timing_method": TIMING_METHOD}
    done = _done(args.results, *args.done)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    pending = [(folder, method) for folder in instances(args.instances) for method in args.methods.split(",")
               if (folder.name, method, args.budget, json.dumps(options, sort_keys=True)) not in done]
    write_lock, results_lock = threading.Lock(), threading.Lock()
    stopped = threading.Event()
    replaying = isinstance(client, CacheOnlyValidator)
    unjudged: list[str] = []

    def say(line: str) -> None:
        with write_lock:
            print(f"[{time.monotonic() - started:5.0f} s] {line}", flush=True)

    def one(folder: Path, method: str) -> None:
        if stopped.is_set():
            return
        problem = load_problem(None, folder)
        shapes = spread(problem.manifest.shapes if info.cuda else problem.manifest.cpu_shapes, args.max_shapes)
        tag = f"{folder.name} × {method}"
        t0 = time.monotonic()
        say(f"== {tag}")
        try:
            report = optimize(problem, make_planner(method, kb), validator, budget=args.budget, shapes=shapes,
                              kb=None, arch=90 if info.cuda else None,
                              progress=lambda line: say(f"   {tag}: {line}"))
        except OutOfTime:
            stopped.set()
            say(f"   time budget spent: {tag} resumes from the cache next call")
            return
        except ValidatorUnavailable as exc:  # the start could not be judged
            unjudged.append(f"{tag} (start)")
            say(f"   {tag}: the start could not be judged ({exc}); no row")
            return
        row = {"instance": folder.name, "family": problem.family, "method": method, "budget": args.budget,
               "options": options, "shapes": shapes, "gpu": info.gpu, "versions": info.versions,
               "date": datetime.now(UTC).isoformat(timespec="seconds"), "wall_s": round(time.monotonic() - t0, 1),
               **({"replayed_from": args.cache.name} if replaying else {}),
               **{k: v for k, v in report.to_dict().items() if k != "best_source"}}
        # a run the validator stopped (a candidate it could not judge) is no result: its row goes to --partial,
        # where it says how far it got (its best so far is a lower bound of the run's answer)
        target = args.results if report.interrupted is None else partial_path(args)
        if report.interrupted is not None:
            unjudged.append(f"{tag} (after call {report.calls_used})")
        with results_lock, target.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        best = report.best.speedup if report.best else None
        say(f"   -> {tag}: best {best}, calls {report.calls_used}, wasted {report.calls_wasted}, {row['wall_s']} s")

    say(f"{len(pending)} runs to do, {args.jobs} at a time")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for future in [pool.submit(one, folder, method) for folder, method in pending]:
            future.result()  # an unexpected error ends the call loudly
    say("time budget spent" if stopped.is_set() else "all runs done")
    if unjudged:
        say(f"{len(unjudged)} run(s) met a candidate the validator could not judge (rows in {partial_path(args)}; "
            "a GPU call must finish them): " + ", ".join(unjudged))
    return 0


# ---------------------------------------------------------------------------------------------- table


def final_speedup(row: dict[str, Any]) -> float | None:
    """The run's answer: its best passing kernel's speedup, else the starting kernel's (clamped)."""
    value = (row.get("best") or {}).get("speedup")
    if value is None:
        value = (row.get("start") or {}).get("speedup")
    return None if value is None else min(max(float(value), CLAMP[0]), CLAMP[1])


def _case(instance: str, shape: dict[str, Any], dtype: str) -> str:
    return json.dumps([instance, shape, dtype], sort_keys=True)


def _measured(row: dict[str, Any], calls: int | None = None) -> list[dict[str, Any]]:
    """The run's validated kernels that passed every gate with a timing: the start and each attempt (of
    the first ``calls`` calls when given)."""
    found = [row.get("start") or {}, *(a for a in row.get("trajectory") or []
                                       if calls is None or int(a.get("call", 0)) <= calls)]
    return [a for a in found if a.get("verdict") == "pass" and a.get("per_shape")]


def speedup_within(row: dict[str, Any], calls: int) -> float | None:
    """The run's answer had its budget been ``calls`` (best-so-far after that call; clamped)."""
    curve = row.get("best_so_far") or []
    value = curve[min(calls, len(curve) - 1)] if curve else None
    return None if value is None else min(max(float(value), CLAMP[0]), CLAMP[1])


def vendor_floor(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each case's vendor time: the least vendor median measured for it in any run of the file.

    Runs made before timing method 2 timed the vendor in the trusted process while other runs' threads
    held the GIL; their vendor medians are too high by up to 300x on some cases, never too low, so the
    least of all a case's measurements is the best estimate the file holds (and favours no candidate)."""
    floor: dict[str, float] = {}
    for row in rows:
        for attempt in _measured(row):
            for case in attempt["per_shape"]:
                if case.get("speedup") and case.get("median_ms"):
                    key = _case(row["instance"], case["shape"], case["dtype"])
                    vendor = float(case["speedup"]) * float(case["median_ms"])
                    floor[key] = min(vendor, floor.get(key, vendor))
    return floor


def rebased_speedup(row: dict[str, Any], floor: dict[str, float], calls: int | None = None) -> float | None:
    """The run's answer with every case's speedup taken against ``vendor_floor``: the best of its measured
    kernels so (the start's when none passed; of the first ``calls`` calls when given), clamped as
    ``final_speedup``."""
    best = None
    for attempt in _measured(row, calls):
        cases = [floor[_case(row["instance"], c["shape"], c["dtype"])] / float(c["median_ms"])
                 for c in attempt["per_shape"] if c.get("median_ms")]
        if cases:
            value = statistics.geometric_mean(cases)
            best = value if best is None else max(best, value)
    return None if best is None else min(max(best, CLAMP[0]), CLAMP[1])


def _print_tables(latest: dict[tuple[str, str], dict[str, Any]], names: list[str], methods: list[str],
                  final: Any, within: Any) -> None:
    print("| instance | family | start | " + " | ".join(methods) + " |")
    print("|---|---|---|" + "---|" * len(methods))
    for name in names:
        any_row = next(latest[(name, m)] for m in methods if (name, m) in latest)
        start = (any_row.get("start") or {}).get("speedup")
        cells = []
        for m in methods:
            r = latest.get((name, m))
            v = final(r) if r else None
            cells.append("—" if v is None else ("≥" if r.get("interrupted") else "") + f"{v:.2f}")
        first = "—" if start is None else f"{start:.2f}"
        print(f"| {name} | {any_row['family']} | {first} | " + " | ".join(cells) + " |")
    print()
    common = [n for n in names if all((n, m) in latest for m in methods)]
    print(f"Geomeans over the {len(common)} instances every method finished ({', '.join(common) or 'none'}): "
          "methods are compared on the same kernels only.\n")
    print("| method | instances | geomean × vendor | same, budget 5 | calls to 95 % (median) | wasted calls | "
          "incorrect returned |")
    print("|---|---|---|---|---|---|---|")
    for m in methods:
        mine = [latest[(n, m)] for n in common]
        finals = [v for v in (final(r) for r in mine) if v is not None and v > 0]
        gm = statistics.geometric_mean(finals) if finals else float("nan")
        at5 = [v for v in (within(r, 5) for r in mine) if v is not None and v > 0]
        gm5 = statistics.geometric_mean(at5) if at5 else float("nan")
        to95 = [r["calls_to_95pct"] for r in mine if r.get("calls_to_95pct") is not None]
        used = sum(r["calls_used"] for r in mine)
        wasted = sum(r["calls_wasted"] for r in mine)
        at_least = "≥ " if any(r.get("interrupted") for r in mine) else ""
        print(f"| {m} | {len(mine)} | {at_least}{gm:.3f} | {at_least}{gm5:.3f} | "
              f"{statistics.median(to95) if to95 else '—'} | "
              f"{wasted}/{used} ({100 * wasted / max(1, used):.0f} %) | 0 (the loop returns only kernels that "
              "passed every gate) |")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (SystemExit naming the file when it is missing)."""
    if not path.is_file():
        raise SystemExit(f"{path}: no such results file")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _agent_of(row: dict[str, Any]) -> str:
    """The agent version (``agent_version``) a result row was made by; "" for rows without one."""
    return str((row.get("options") or {}).get("agent") or "")


def table(args: argparse.Namespace) -> int:
    """Print the per-instance table and the summary by method; write the plots.

    Runs of an earlier timing method (rows without ``options.timing_method`` >= 2) are shown twice: as
    measured, and re-based on ``vendor_floor`` (their own vendor timings were not trustworthy); the plots
    use the re-based figures for them."""
    rows = _read_rows(args.results)
    if args.agent:
        wanted = _agent_of(rows[-1]) if args.agent == "last" and rows else args.agent
        rows = [r for r in rows if _agent_of(r).startswith(wanted)]
        if not rows:
            raise SystemExit(f"--agent {args.agent}: no row of {args.results} was made by that agent version")
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        latest[(r["instance"], r["method"])] = r
    if args.partial is not None:  # runs the validator stopped: their best so far, a lower bound, where no result is
        wanted_agent = {_agent_of(r) for r in rows} if args.agent else None
        for r in _read_rows(args.partial):
            if (r["instance"], r["method"]) not in latest and (wanted_agent is None or _agent_of(r) in wanted_agent):
                latest[(r["instance"], r["method"])] = r
    versions = sorted({_agent_of(r)[:12] for r in latest.values()})
    print(f"Rows of {len(versions)} agent version(s) ({', '.join(versions)}): the latest row of each instance x "
          "method" + ("; `--agent last` keeps only the newest version's" if len(versions) > 1 else "") + ".\n")
    names = sorted({k[0] for k in latest})
    methods = [m for m in METHODS if any(k[1] == m for k in latest)]
    old = [r for r in latest.values() if int((r.get("options") or {}).get("timing_method", 1)) < 2]
    floor = vendor_floor(rows)

    def old_method(row: dict[str, Any]) -> bool:
        return int((row.get("options") or {}).get("timing_method", 1)) < 2

    def trusted(row: dict[str, Any]) -> float | None:
        return rebased_speedup(row, floor) if old_method(row) else final_speedup(row)

    def trusted_within(row: dict[str, Any], calls: int) -> float | None:
        return rebased_speedup(row, floor, calls) if old_method(row) else speedup_within(row, calls)

    if old:
        print(f"## As measured ({len(old)} runs timed the vendor in the trusted process: see re-based below)\n")
        _print_tables(latest, names, methods, final_speedup, speedup_within)
        print("\n## Vendor re-based (each case against the least vendor time measured for it in this file)\n")
    _print_tables(latest, names, methods, trusted, trusted_within)
    if not args.no_plots:
        _plots(latest, names, methods, trusted)
    return 0


def _plots(latest: dict[tuple[str, str], dict[str, Any]], names: list[str], methods: list[str],
           final: Any = final_speedup) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    PLOTS.mkdir(parents=True, exist_ok=True)
    card = _card(latest.values())
    by_instance, best_so_far = PLOTS / f"agent-by-instance-{card}.png", PLOTS / f"agent-best-so-far-{card}.png"
    # a log scale: 0.5x and 2x are as far from the vendor's line (1x), and 20 instances still fit a page's width
    fig, ax = plt.subplots(figsize=(min(16, max(8, 0.22 * len(names) * len(methods) + 2)), 5))
    width = 0.8 / max(1, len(methods))
    budgets = {m: sorted({int(r["budget"]) for (_, mm), r in latest.items() if mm == m}) for m in methods}
    for j, m in enumerate(methods):
        values = [(final(latest[(n, m)]) if (n, m) in latest else None) or float("nan") for n in names]
        label = f"{m} (budget {'/'.join(map(str, budgets[m]))})"
        # bars start at the vendor's 1x: slower than the vendor points down; a run the validator stopped is hatched
        bars = ax.bar([i + j * width for i in range(len(names))], [v - 1.0 for v in values], width, bottom=1.0,
                      label=label)
        for bar, n in zip(bars, names, strict=True):
            if (latest.get((n, m)) or {}).get("interrupted"):
                bar.set_hatch("///")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(names))], names, rotation=60, ha="right")
    ax.set_ylabel("speedup over vendor (best kernel, log scale)")
    stopped = any(r.get("interrupted") for r in latest.values())
    ax.set_title(f"Agent on held-out kernels ({card.upper()}, same gates; validator calls per method in the legend)"
                 + ("\nhatched: a run replayed from the cache up to a kernel never measured: its best so far, a "
                    "lower bound" if stopped else ""))
    ax.legend()
    fig.tight_layout()
    fig.savefig(by_instance, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        curves = []
        for n in names:
            r = latest.get((n, m))
            if r is None or not r.get("best_so_far"):
                continue
            start = r["best_so_far"][0]
            curve = [v if v is not None else start for v in r["best_so_far"]]
            if not start:
                continue
            curve += [curve[-1]] * (r["budget"] + 1 - len(curve))
            curves.append([v / start for v in curve])
        if curves:
            gm = [statistics.geometric_mean([c[i] for c in curves]) for i in range(len(curves[0]))]
            ax.plot(range(len(gm)), gm, marker="o", label=f"{m} ({len(curves)} instances)")
    ax.set_xlabel("validator calls")
    ax.set_ylabel("best so far / start (geomean)")
    ax.set_title(f"Best-so-far by call number ({card.upper()})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(best_so_far, dpi=120)
    plt.close(fig)
    print(f"wrote {by_instance} and {best_so_far}")


def _card(rows: Any) -> str:
    """The kind of card the rows were measured on, as the caches name it (``h200``, ``h100``; ``gpu`` when
    unknown, ``mixed`` when several: a table never mixes cards, so that says the results file does)."""
    kinds = {(re.search(r"[Hh]\d{3}", str(r.get("gpu", ""))) or [None])[0] for r in rows}
    kinds = {k.lower() if k else "gpu" for k in kinds}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def main() -> int:
    """Parse the command line and run one step."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="CPU: knowledge base and frozen embeddings")
    p.add_argument("--out", type=Path, default=Path(".eval"),
                   help="folder to write the knowledge base (kb/) and the frozen embeddings (embeddings.json) to")
    r = sub.add_parser("run", help="every instance × method within the time budget (resumable)")
    r.add_argument("--prepared", type=Path, default=Path(".eval"),
                   help="the folder `prepare --out` wrote: knowledge base and frozen embeddings")
    r.add_argument("--cache", type=Path, default=CACHE,
                   help="SQLite cache of validator results: a later call replays what it holds and goes on where "
                        "the last one stopped (default: bench/results/agent-h200-cache.sqlite)")
    r.add_argument("--results", type=Path, default=RESULTS,
                   help="JSON lines file a row is appended to per finished run; runs with a row there are skipped "
                        "(default: bench/results/agent-h200.jsonl)")
    r.add_argument("--partial", type=Path, default=None,
                   help="JSON lines file for runs the validator stopped (a candidate it could not judge, e.g. one a "
                        "cache-only validator never measured): how far they got, never counted as results "
                        "(default: beside --results, NAME.partial.jsonl)")
    r.add_argument("--methods", default="klineage,memory,none",
                   help=f"comma-separated, of {', '.join(METHODS)} (greedy: the first round's loop, run it with "
                        "--budget 5)")
    r.add_argument("--instances", default=None, help="comma-separated held-out names (default: all)")
    r.add_argument("--done", type=Path, action="append", default=[],
                   help="results of earlier calls (repeatable): runs with a row there (same agent version and "
                        "options) are not run again; new rows still go to --results only")
    r.add_argument("--budget", type=int, default=10, help="validator calls per run")
    r.add_argument("--budget-s", type=float, default=540.0, help="wall time for this call")
    r.add_argument("--rep-ms", type=float, default=25.0, help="timed milliseconds per case")
    r.add_argument("--max-shapes", type=int, default=None, help="shapes of each grid (spread by size)")
    r.add_argument("--autotune-rep-ms", type=float, default=None,
                   help="ms an autotuned candidate's autotuner times each config (default: Triton's 100); keys the "
                        "cache and the results apart")
    r.add_argument("--cpu", action="store_true", help="interpreter mode (correctness only, nothing timed)")
    r.add_argument("--jobs", type=int, default=1, help="runs side by side (timing stays exclusive on the GPU)")
    r.add_argument("--validator", default=None,
                   help="where the jobs run: local (default), http://HOST:PORT, or a Ray cluster: ray, ray:auto, "
                        "ray:HOST:6379, ray://HOST:10001 (one actor per GPU, --cache shared by all; with "
                        "--jobs about the cluster's GPU count), or cache-only[:GPU]: no GPU, only what --cache holds "
                        "as that GPU measured it (runs that meet a kernel it never measured write no row)")
    t = sub.add_parser("table", help="the table and the plots from the results")
    t.add_argument("--results", type=Path, default=RESULTS,
                   help="JSON lines file of `run` rows to tabulate (default: bench/results/agent-h200.jsonl)")
    t.add_argument("--partial", type=Path, default=None,
                   help="rows of runs the validator stopped (run's --partial file): where an instance x method has "
                        "no result, its best so far is shown as a lower bound (≥)")
    t.add_argument("--no-plots", action="store_true", help="print the tables only, write no plots to docs/plots/")
    t.add_argument("--agent", default=None,
                   help="only rows of this agent version (a prefix of options.agent), or 'last' for the version "
                        "of the newest row: a table of one agent's code")
    args = parser.parse_args()
    return {"prepare": prepare, "run": run, "table": table}[args.step](args)


if __name__ == "__main__":
    raise SystemExit(main())
