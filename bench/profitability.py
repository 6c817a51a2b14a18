"""Does PROFITABLE_WHEN predict what a skill does on kernels it was not learned from?

Reads the agent evaluation's measured trajectories (``bench/evaluate_agent.py run`` writes them; every
attempt there is a skill applied by the agent to a held-out kernel and judged by all gates on the GPU)
and, for each single-skill attempt, compares

* the outcome: did it pay, i.e. is the geometric mean over the grid's timed cases of
  (time of the kernel it was applied to) / (time after) at least ``PAID`` (1.03)? A candidate that failed
  a gate did not pay. Both times are the candidate's own, measured in its worker, so the vendor's timing
  does not enter;
* the prediction: the skill's PROFITABLE_WHEN rules evaluated on each grid shape's portable context
  (``Problem.search_context``) say "pays" unless they are false on most shapes; a skill with no kept rule
  predicts what its lineage evidence says in the median (``effect.median >= PAID``).

It prints the confusion per skill and overall beside the majority-class rate (always predicting the
more frequent outcome), and writes ``--out`` (JSON) with every observation::

    python bench/profitability.py --prepared .eval            # after evaluate_agent.py prepare
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.agent import load_problem  # noqa: E402
from klineage.kb.conditions import evaluate  # noqa: E402
from klineage.kb.embedded_store import EmbeddedStore  # noqa: E402
from klineage.schema.records import Condition, Skill  # noqa: E402

PAID = 1.03
RESULTS = ROOT / "bench" / "results" / "agent-h200.jsonl"
HELDOUT = ROOT / "heldout"


@dataclass(frozen=True)
class Observation:
    """One skill applied to one held-out kernel state, predicted and measured."""

    instance: str
    method: str
    call: int
    skill: str
    predicted: bool
    basis: str
    gain: float | None
    paid: bool
    verdict: str


def _cases(attempt: dict[str, Any]) -> dict[str, float]:
    return {json.dumps([c["shape"], c["dtype"]], sort_keys=True): float(c["median_ms"])
            for c in attempt.get("per_shape") or [] if c.get("median_ms")}


def grid_gain(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """Geometric mean over the cases both timed of before / after (None when they share none)."""
    old, new = _cases(before), _cases(after)
    ratios = [old[k] / new[k] for k in old.keys() & new.keys()]
    return statistics.geometric_mean(ratios) if ratios else None


def predicts_pay(skill: Skill | None, rules: list[Condition], contexts: list[dict[str, Any]]) -> tuple[bool, str]:
    """The knowledge base's prediction for ``skill`` on a grid, and what it rests on."""
    exprs = [c.expr for c in rules]
    if exprs and contexts:
        false = sum(any(evaluate(e, ctx).value is False for e in exprs) for ctx in contexts)
        return false <= len(contexts) / 2, "rule: " + " AND ".join(exprs)
    if skill is not None and skill.effect.median is not None:
        return skill.effect.median >= PAID, f"no rule; lineage median {skill.effect.median:.2f}x"
    return False, "no rule, no lineage effect"


def observations(rows: list[dict[str, Any]], store: EmbeddedStore) -> list[Observation]:
    """Every single-skill attempt of the trajectories, walked from the start as the agent kept them."""
    skills = {s.operator: s for s in (Skill.from_node(n) for n in store.find("Skill", limit=10_000))}
    found = store.neighbors([s.id for s in skills.values()], "PROFITABLE_WHEN")
    rules = {op: [Condition.from_node(n) for _, n in found.get(s.id, ())] for op, s in skills.items()}
    out: list[Observation] = []
    for row in rows:
        problem = load_problem(None, HELDOUT / row["instance"])
        contexts = [problem.search_context(90, shape) for shape in row["shapes"] or problem.manifest.shapes]
        current = row.get("start") or {}
        for attempt in row.get("trajectory") or []:
            steps = attempt.get("steps") or []
            if len(steps) == 1:
                op = steps[0]["operator"]
                predicted, basis = predicts_pay(skills.get(op), rules.get(op, []), contexts)
                passed = attempt.get("verdict") == "pass"
                gain = grid_gain(current, attempt) if passed else None
                out.append(Observation(row["instance"], row["method"], int(attempt["call"]), op, predicted, basis,
                                       gain, bool(gain is not None and gain >= PAID), str(attempt.get("verdict"))))
            if attempt.get("accepted"):
                current = attempt
    return out


def _rate(hits: int, n: int) -> str:
    return f"{hits}/{n} ({100 * hits / n:.0f} %)" if n else "—"


def report(obs: list[Observation]) -> str:
    """The confusion per skill and overall, beside the majority-class rate, as Markdown."""
    lines = ["| skill | n | paid | predicted pays | TP | FP | FN | TN | accuracy | majority rate | basis |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    by_skill: dict[str, list[Observation]] = defaultdict(list)
    for o in obs:
        by_skill[o.skill].append(o)
    for skill in sorted(by_skill, key=lambda s: -len(by_skill[s])):
        mine = by_skill[skill]
        lines.append(_row(skill, mine, Counter(o.basis for o in mine).most_common(1)[0][0]))
    lines.append(_row("**all**", obs, ""))
    return "\n".join(lines)


def _row(name: str, obs: list[Observation], basis: str) -> str:
    n = len(obs)
    tp = sum(o.predicted and o.paid for o in obs)
    fp = sum(o.predicted and not o.paid for o in obs)
    fn = sum(not o.predicted and o.paid for o in obs)
    tn = n - tp - fp - fn
    paid = tp + fn
    majority = max(paid, n - paid)
    return (f"| {name} | {n} | {paid} | {tp + fp} | {tp} | {fp} | {fn} | {tn} | {_rate(tp + tn, n)} | "
            f"{_rate(majority, n)} | {basis} |")


def main() -> int:
    """Read the trajectories, print the confusion table, write every observation."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS, help="agent evaluation rows (JSON lines)")
    parser.add_argument("--prepared", type=Path, default=Path(".eval"),
                        help="evaluate_agent.py prepare's folder (its kb/ is the knowledge base the agent used)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "profitability-h200.json")
    args = parser.parse_args()
    if not args.results.is_file():
        parser.error(f"--results {args.results}: no such file (run evaluate_agent.py run first)")
    if not (args.prepared / "kb").is_dir():
        parser.error(f"--prepared {args.prepared}: no kb/ folder (run evaluate_agent.py prepare --out {args.prepared})")
    rows = [json.loads(line) for line in args.results.read_text(encoding="utf-8").splitlines() if line.strip()]
    obs = observations(rows, EmbeddedStore(args.prepared / "kb"))
    print(f"{len(obs)} single-skill attempts in {len(rows)} runs of {len({r['instance'] for r in rows})} held-out "
          f"kernels; paid = grid geomean of before/after >= {PAID}\n")
    print(report(obs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"paid_threshold": PAID, "source": str(args.results.relative_to(ROOT))
                                    if args.results.is_relative_to(ROOT) else str(args.results),
                                    "observations": [asdict(o) for o in obs]}, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
