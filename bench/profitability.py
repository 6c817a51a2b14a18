"""Does PROFITABLE_WHEN predict what a skill does on kernels it was not learned from?

Reads the agent evaluation's measured trajectories (``bench/evaluate_agent.py run`` writes them; every
attempt there is a skill applied by the agent to a held-out kernel and judged by all gates on the GPU)
and, for each single-skill attempt, compares

* the outcome: did it pay, i.e. is the geometric mean over the grid's timed cases of
  (time of the kernel it was applied to) / (time after) at least ``PAID`` (1.03)? A candidate that failed
  a gate did not pay. Both times are the candidate's own, measured in its worker, so the vendor's timing
  does not enter;
* the prediction of ``klineage.kb.profitability.predict_profit``, twice:
  - *lineage only*: the skill's PROFITABLE_WHEN rules evaluated on each grid shape's portable context
    (``Problem.search_context``), else its lineage median — what the knowledge base knew before any agent
    used it;
  - *with trials*: the same, outvoted by the skill's trials on new code once it has ``MIN_TRIALS`` of them
    (what the knowledge base learns from agents' applications). The trials are the other held-out
    kernels' attempts only (leave one instance out): no attempt on the kernel being predicted, by any
    method, enters its prediction.

It prints the confusion per skill and overall beside the majority-class rate (always predicting the
more frequent outcome), for both predictors, and writes ``--out`` (JSON) with every observation::

    python bench/profitability.py --prepared .eval            # after evaluate_agent.py prepare
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.agent import load_problem  # noqa: E402
from klineage.kb.conditions import evaluate  # noqa: E402
from klineage.kb.embedded_store import EmbeddedStore  # noqa: E402
from klineage.kb.profitability import MIN_TRIALS, predict_profit  # noqa: E402
from klineage.schema.records import PAID, Condition, Skill  # noqa: E402

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
    skill_record: Skill | None = field(default=None, repr=False, compare=False)
    rules: list[Condition] = field(default_factory=list, repr=False, compare=False)
    contexts: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

    def row(self) -> dict[str, Any]:
        """The observation as JSON (without the evidence it was predicted from)."""
        return {k: v for k, v in asdict(self).items() if k not in ("skill_record", "rules", "contexts")}


def _cases(attempt: dict[str, Any]) -> dict[str, float]:
    return {json.dumps([c["shape"], c["dtype"]], sort_keys=True): float(c["median_ms"])
            for c in attempt.get("per_shape") or [] if c.get("median_ms")}


def grid_gain(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """Geometric mean over the cases both timed of before / after (None when they share none)."""
    old, new = _cases(before), _cases(after)
    ratios = [old[k] / new[k] for k in old.keys() & new.keys()]
    return statistics.geometric_mean(ratios) if ratios else None


def rule_votes(rules: list[Condition], contexts: list[dict[str, Any]]) -> list[bool | None]:
    """Per grid shape, the conjunction of the rules there (None where none is false and one is unknown)."""
    votes: list[bool | None] = []
    for ctx in contexts:
        values = [evaluate(c.expr, ctx).value for c in rules]
        votes.append(False if any(v is False for v in values) else True if all(v is True for v in values) else None)
    return votes if rules else []


def predicts_pay(skill: Skill | None, rules: list[Condition], contexts: list[dict[str, Any]],
                 trials: tuple[int, int] = (0, 0)) -> tuple[bool, str]:
    """The knowledge base's prediction for ``skill`` on a grid, and what it rests on (no evidence: no gain)."""
    got = predict_profit(skill, rule_votes(rules, contexts), trials)
    basis = got.basis
    if got.source == "rule":
        basis = "rule: " + " AND ".join(c.expr for c in rules)
    return bool(got.pays), basis


def with_trials(obs: list[Observation]) -> list[Observation]:
    """``obs`` predicted again with the trials of the other instances (leave one instance out)."""
    out = []
    for o in obs:
        others = [x for x in obs if x.instance != o.instance and x.skill == o.skill]
        trials = (sum(x.paid for x in others), len(others))
        predicted, basis = predicts_pay(o.skill_record, o.rules, o.contexts, trials)
        out.append(replace(o, predicted=predicted, basis=basis))
    return out


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
                                       gain, bool(gain is not None and gain >= PAID), str(attempt.get("verdict")),
                                       skills.get(op), rules.get(op, []), contexts))
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
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "profitability-h200.json",
                        help="JSON file for every observation, lineage only and with trials "
                             "(default: bench/results/profitability-h200.json)")
    args = parser.parse_args()
    if not args.results.is_file():
        parser.error(f"--results {args.results}: no such file (run evaluate_agent.py run first)")
    if not (args.prepared / "kb").is_dir():
        parser.error(f"--prepared {args.prepared}: no kb/ folder (run evaluate_agent.py prepare --out {args.prepared})")
    every = [json.loads(line) for line in args.results.read_text(encoding="utf-8").splitlines() if line.strip()]
    # the latest row of each instance × method, as `evaluate_agent.py table` reads them: a later call replays
    # a run from the cache and appends it again, and counting both would count its attempts twice
    rows = list({(r["instance"], r["method"]): r for r in every}.values())
    obs = observations(rows, EmbeddedStore(args.prepared / "kb"))
    print(f"{len(obs)} single-skill attempts in {len(rows)} runs of {len({r['instance'] for r in rows})} held-out "
          f"kernels; paid = grid geomean of before/after >= {PAID}\n")
    trialled = with_trials(obs)
    print("## Lineage only (rules, else the lineage median)\n")
    print(report(obs))
    print(f"\n## With trials on the other held-out kernels (>= {MIN_TRIALS} outvote the rules; leave one "
          "instance out)\n")
    print(report(trialled))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"paid_threshold": PAID, "source": str(args.results.relative_to(ROOT))
                                    if args.results.is_relative_to(ROOT) else str(args.results),
                                    "observations": [o.row() for o in obs],
                                    "with_trials": [o.row() for o in trialled]}, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
