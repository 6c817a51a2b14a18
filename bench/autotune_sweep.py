#!/usr/bin/env python3
"""Does a shorter autotune sweep change what the validator measures? Both sides in one run.

An autotuned candidate holds the GPU alone while Triton's autotuner times each of its configs (100 ms
each by default, once per shape × dtype of the grid): on the agent evaluation that sweep is most of the
GPU time nobody else can use. The validator's timing option ``autotune_rep_ms`` shortens it (warm-up a
quarter of it); the performance gate then times the config the sweep chose, as always. It may become the
evaluation's default only if the speedups it measures are the same, so this benchmark measures both in
one run, on one warm worker pool, nothing cached:

* candidates: the autotuned experts (``workloads/gemm``, ``workloads/attention``: their own config lists)
  and held-out naive kernels autotuned by the ``autotune`` operator (``--heldout``);
* sides: ``default`` (Triton's sweep) and ``short`` (``autotune_rep_ms``), alternated ``--repeats`` times
  (A B A B ...), every gate each time;
* per candidate: the geomean speedup over the vendor of each run, the median of each side, their ratio,
  the worst per-case ratio, and the spread between the runs of one side (the timing's own noise, the floor
  any difference is read against); the GPU time held alone per run (``held_alone_s``), median per side.

Target (issue 13): every candidate's median speedup within 2 % between the sides. On a machine without
a GPU the performance gate is skipped and the benchmark says so instead of printing a figure.

    python bench/autotune_sweep.py --rep-ms 20 --out $OUT/autotune-sweep.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from klineage.schema.manifest import load_manifest  # noqa: E402

EXPERTS = "gemm,attention"
HELDOUT = "bmm,matmul_nt"
SIDES = ("default", "short")


def candidates(experts: list[str], heldout: list[str], max_shapes: int) -> list[dict[str, Any]]:
    """Each candidate as ``{label, source, workload, shapes}``: the experts as written, the held-out naive
    kernels with the ``autotune`` operator's defaults; SystemExit naming the folder when one is missing."""
    for name in experts:
        if not (REPO / "workloads" / name / "expert.py").is_file():
            raise SystemExit(f"--experts: {REPO / 'workloads' / name / 'expert.py'} does not exist (expected an "
                             "expert workload name)")
    for name in heldout:
        if not (REPO / "heldout" / name / "naive.py").is_file():
            raise SystemExit(f"--heldout: {REPO / 'heldout' / name / 'naive.py'} does not exist (expected a "
                             "held-out workload name)")
    # the evaluation's --max-shapes choice; run as a script, this script's folder is on the path (it is not
    # put there for importers: bench/mcp.py would shadow the mcp package)
    from evaluate_agent import spread

    from klineage.transforms.registry import get_operator

    out = []
    for name in experts:
        folder = REPO / "workloads" / name
        out.append({"label": f"{name}:expert", "source": (folder / "expert.py").read_text(), "workload": folder,
                    "shapes": spread(load_manifest(folder).shapes, max_shapes)})
    for name in heldout:
        folder = REPO / "heldout" / name
        made = get_operator("autotune").apply((folder / "naive.py").read_text())
        if made is None:
            raise SystemExit(f"--heldout {name}: the autotune operator does not apply to its naive kernel")
        out.append({"label": f"{name}:autotune", "source": made.source, "workload": folder,
                    "shapes": spread(load_manifest(folder).shapes, max_shapes)})
    return out


def _case_key(row: dict[str, Any]) -> str:
    return json.dumps([row["shape"], row["dtype"]], sort_keys=True)


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One candidate's runs (``{side, speedup, cases, held_alone_s}``) summarised: median speedup per side,
    short / default, the worst per-case ratio of the medians, each side's spread between its own runs."""
    by_side = {side: [r for r in runs if r["side"] == side and r["speedup"]] for side in SIDES}
    if not all(by_side.values()):
        return {"measured": False}
    median = {side: statistics.median(r["speedup"] for r in rows) for side, rows in by_side.items()}
    spread_of = {side: (max(r["speedup"] for r in rows) / min(r["speedup"] for r in rows) - 1.0)
                 for side, rows in by_side.items()}
    cases: dict[str, dict[str, list[float]]] = {}
    for side, rows in by_side.items():
        for r in rows:
            for key, value in r["cases"].items():
                cases.setdefault(key, {}).setdefault(side, []).append(value)
    worst = max((abs(statistics.median(v["short"]) / statistics.median(v["default"]) - 1.0)
                 for v in cases.values() if v.get("short") and v.get("default")), default=0.0)
    return {"measured": True, "median_speedup": median, "ratio": median["short"] / median["default"],
            "worst_case_deviation": worst, "own_spread": spread_of,
            "held_alone_p50_s": {side: statistics.median(r["held_alone_s"] for r in rows)
                                 for side, rows in by_side.items()}}


def run(rep_ms: float, experts: list[str], heldout: list[str], repeats: int, max_shapes: int,
        jobs: int) -> dict[str, Any]:
    """Every candidate × side × repeat through one warm pool (see the module docstring)."""
    from klineage.validator import LocalValidator
    from klineage.validator.pool import WorkerPool

    todo = candidates(experts, heldout, max_shapes)
    pool = WorkerPool()
    try:
        base = {"rep_ms": 25.0}  # the evaluation's timing per case (evaluate_agent.py --rep-ms)
        validators = {"default": LocalValidator(cache=None, pool=pool, timing=base),
                      "short": LocalValidator(cache=None, pool=pool, timing={**base, "autotune_rep_ms": rep_ms})}
        info = validators["default"].device_info()
        if info.cuda:
            validators["default"].ceilings()  # measured once per worker; not part of the figures

        def one(job: tuple[dict[str, Any], str, int]) -> dict[str, Any]:
            c, side, i = job
            shapes = c["shapes"] if info.cuda else None  # on CPU: the manifest's CPU shapes
            start = time.monotonic()
            result = validators[side].validate(f"{c['source']}\n# autotune sweep {side} {i} {time.time_ns()}\n",
                                               c["workload"], shapes=shapes)
            perf = result.gate("performance")
            rows = perf.metrics.get("rows", []) if perf is not None and perf.status == "pass" else []
            return {"label": c["label"], "side": side, "repeat": i, "verdict": result.verdict,
                    "failed_gate": result.failed_gate, "wall_s": time.monotonic() - start,
                    "performance": perf.status if perf is not None else "not run",
                    "speedup": perf.metrics.get("geomean_speedup") if rows else None,
                    "cases": {_case_key(r): r["speedup"] for r in rows if r.get("speedup")},
                    "held_alone_s": sum(float(g.metrics.get("held_alone_s") or 0.0) for g in result.gates)}

        # A B A B ...: drift over the run falls on both sides alike
        order = [(c, side, i) for i in range(repeats) for c in todo
                 for side in (SIDES if i % 2 == 0 else SIDES[::-1])]
        began = time.monotonic()
        with ThreadPoolExecutor(jobs) as executor:
            rows = list(executor.map(one, order))
        span = time.monotonic() - began
    finally:
        pool.shutdown()
    summary = {c["label"]: compare([r for r in rows if r["label"] == c["label"]]) for c in todo}
    return {"device": info.gpu, "cuda": info.cuda, "versions": info.versions,
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "autotune_rep_ms": rep_ms,
            "repeats": repeats, "max_shapes": max_shapes, "jobs": jobs, "span_s": span,
            "summary": summary, "runs": rows}


def report(found: dict[str, Any], tolerance: float = 0.02) -> tuple[list[str], bool]:
    """The printed table, and whether every candidate is within ``tolerance`` (False when nothing was timed)."""
    lines = [f"autotune sweep {found['autotune_rep_ms']:g} ms per config vs Triton's default, "
             f"{found['repeats']} run(s) per side, on {found['device']}"]
    if not found["cuda"]:
        verdicts = [f"{r['label']} {r['side']}: {r['verdict']}" for r in found["runs"]]
        lines.append("no GPU: the performance gate was skipped, no speedup was measured; checking gates only: "
                     + "; ".join(verdicts))
        return lines, False
    lines.append(f"{'candidate':<22} {'default':>8} {'short':>8} {'ratio':>7} {'worst case':>10} "
                 f"{'noise def/short':>16} {'GPU alone def/short (s)':>24}")
    ok = True
    for label, s in found["summary"].items():
        if not s["measured"]:
            failed = [f"{r['side']}: {r['verdict']} ({r['failed_gate']})" for r in found["runs"]
                      if r["label"] == label and not r["speedup"]]
            lines.append(f"{label:<22} not timed on both sides: {'; '.join(failed)}")
            ok = False
            continue
        m, n, h = s["median_speedup"], s["own_spread"], s["held_alone_p50_s"]
        within = abs(s["ratio"] - 1.0) <= tolerance
        ok &= within
        lines.append(f"{label:<22} {m['default']:>7.3f}x {m['short']:>7.3f}x {s['ratio']:>7.3f} "
                     f"{100 * s['worst_case_deviation']:>9.1f}% {100 * n['default']:>7.1f}%/{100 * n['short']:.1f}% "
                     f"{h['default']:>15.1f} / {h['short']:.1f}" + ("" if within else "   OUTSIDE 2 %"))
    saved = [s["held_alone_p50_s"]["default"] - s["held_alone_p50_s"]["short"]
             for s in found["summary"].values() if s["measured"]]
    if saved:
        lines.append(f"GPU time held alone saved per candidate: median {statistics.median(saved):.1f} s; "
                     f"{'every' if ok else 'NOT every'} candidate within {100 * tolerance:g} %")
    return lines, ok


def main() -> int:
    """Run the comparison; exit 0 when every candidate is within 2 %, 1 otherwise (or when nothing was timed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rep-ms", type=float, default=20.0, help="the short sweep: milliseconds per config")
    parser.add_argument("--experts", default=EXPERTS, help="expert workloads (workloads/NAME/expert.py)")
    parser.add_argument("--heldout", default=HELDOUT, help="held-out naive kernels to autotune (heldout/NAME)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side (alternated)")
    parser.add_argument("--max-shapes", type=int, default=4, help="shapes of each grid, spread by size")
    parser.add_argument("--jobs", type=int, default=4, help="validations side by side (timing is exclusive)")
    parser.add_argument("--out", type=Path, help="write every run and the summary as JSON here")
    args = parser.parse_args()
    if not 0 < args.rep_ms <= 1000:
        parser.error(f"--rep-ms: expected milliseconds in (0, 1000], got {args.rep_ms}")
    if args.repeats < 1 or args.jobs < 1:
        parser.error("--repeats and --jobs: expected at least 1")
    split = [s for s in args.experts.split(",") if s], [s for s in args.heldout.split(",") if s]
    found = run(args.rep_ms, *split, args.repeats, args.max_shapes, args.jobs)
    lines, ok = report(found)
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps(found, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
