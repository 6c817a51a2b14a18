"""Export the agent evaluation's attempts as trials the knowledge base can learn from.

Every attempt of every run of ``bench/results/agent-h200.jsonl`` (timing method 2 only: earlier runs' vendor
timings are not trusted) is a skill applied by an agent to a held-out kernel and judged by every gate on the GPU. This
script rebuilds each attempt's kernel source (the agent is deterministic: the start kernel, then each
attempt's steps applied with the same operators to the kernel kept so far; the rebuilt source must hash to
the attempt's recorded sha), takes the gate result that judged it from the evaluation's result cache, and
writes one trial per skill used (``trials/h200.jsonl``): the operator, the kernel source, the gate result,
the outcome, the speedup over the kernel it was applied to, and the date of the run.

``klineage demo`` and ``klineage ingest --trials`` record them as verified Applications, so a skill's
``verified`` / ``paid`` counts (and ``kb.profitability.predict_profit``) carry what agents measured on code
no lineage was walked on. The evaluation itself never reads them (``evaluate_agent.py prepare`` builds its
knowledge base from the lineages alone), so no figure of the agent table is learned from its own kernels.

    python bench/export_trials.py                     # writes trials/h200.jsonl
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.agent import load_problem  # noqa: E402
from klineage.agent.moves import Move, MoveStep, materialize  # noqa: E402
from klineage.schema.ids import kernel_sha  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "agent-h200.jsonl"
CACHE = ROOT / "bench" / "results" / "agent-h200-cache.sqlite"
OUT = ROOT / "trials" / "h200.jsonl"


def _gate_results(cache: Path) -> dict[tuple[str, str], dict[str, Any]]:
    with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT workload, kernel_sha, doc FROM results ORDER BY created").fetchall()
    return {(workload, sha): json.loads(doc) for workload, sha, doc in rows}


def trials_of(row: dict[str, Any], judged: dict[tuple[str, str], dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The trials of one evaluation run, and how many attempts could not be rebuilt or had no gate result."""
    problem = load_problem(None, ROOT / "heldout" / row["instance"])
    current, current_speedup = problem.source, (row.get("start") or {}).get("speedup")
    context = problem.search_context(90, (row.get("shapes") or problem.manifest.shapes)[0])
    out: list[dict[str, Any]] = []
    missed = 0
    for attempt in row.get("trajectory") or []:
        steps = tuple(MoveStep(s["operator"], s.get("params") or {}, s.get("action", "apply"))
                      for s in attempt.get("steps") or [])
        made = materialize(current, Move(str(attempt.get("move", "")), steps))
        gate = judged.get((problem.manifest.name, attempt["kernel_sha"]))
        if made is None or kernel_sha(made.source) != attempt["kernel_sha"] or gate is None:
            missed += 1
            continue
        speedup = attempt.get("speedup")
        relative = speedup / current_speedup if speedup and current_speedup else None
        if attempt.get("verdict") != "pass":
            outcome = f"fail-{attempt['failed_gate']}" if attempt.get("failed_gate") else "fail"
        else:
            outcome = "improved" if attempt.get("accepted") else "no-gain"
        for step in steps:
            if step.action != "simplify":
                out.append({"operator": step.operator, "kernel_source": made.source, "outcome": outcome,
                            "speedup": relative, "gate_result": gate, "context": context,
                            # when the GPU judged it (a run replayed from the cache made no new measurement)
                            "recorded_at": gate.get("date") or row["date"], "instance": row["instance"],
                            "method": row["method"], "call": attempt["call"]})
        if attempt.get("accepted"):
            current, current_speedup = made.source, speedup
    return out, missed


def main() -> int:
    """Rebuild every attempt, write the trials, say how many."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="agent evaluation rows (JSON lines) whose attempts are exported; only rows of timing "
                             "method 2 count (default: bench/results/agent-h200.jsonl)")
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="the evaluation's SQLite result cache, read for each attempt's gate result "
                             "(default: bench/results/agent-h200-cache.sqlite)")
    parser.add_argument("-o", "--output", type=Path, default=OUT,
                        help="JSON lines file the trials are written to, replacing it (default: trials/h200.jsonl)")
    args = parser.parse_args()
    for path, what in ((args.results, "--results"), (args.cache, "--cache")):
        if not path.is_file():
            parser.error(f"{what} {path}: no such file")
    judged = _gate_results(args.cache)
    rows = [json.loads(line) for line in args.results.read_text(encoding="utf-8").splitlines() if line.strip()]
    runs = [r for r in rows if int((r.get("options") or {}).get("timing_method", 1)) >= 2]
    trials: list[dict[str, Any]] = []
    missed = 0
    seen: set[tuple[Any, ...]] = set()
    for row in runs:  # every run, not only the latest of each instance x method: an earlier agent's kernels count
        found, lost = trials_of(row, judged)
        missed += lost
        for trial in found:
            # runs that made the same kernel the same way read one measurement from the cache: one trial
            # (the knowledge base's Application identity: skill, kernel, outcome, speedup, date)
            key = (trial["operator"], kernel_sha(trial["kernel_source"]), trial["outcome"], trial.get("speedup"),
                   trial["recorded_at"])
            if key not in seen:
                seen.add(key)
                trials.append(trial)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(json.dumps(t, sort_keys=True) + "\n" for t in trials), encoding="utf-8")
    print(f"{len(trials)} trials from {len(runs)} runs (timing method 2) -> {args.output}; "
          f"{missed} attempts not rebuilt or without a gate result")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
