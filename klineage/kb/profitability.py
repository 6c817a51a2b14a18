"""Will a skill pay on this kernel? One prediction from three kinds of evidence, strongest first.

1. **Trials on new code.** Agents record every application they validate (``KnowledgeBase.
   record_application``); a skill's ``verified`` / ``paid`` counts are those trials, on kernels no lineage
   was walked on. With at least ``MIN_TRIALS`` of them, the prediction is their majority: they were made
   on the population the prediction is for. The lineage's PROFITABLE_WHEN rules were induced on one point
   of an expert's lineage (the other optimizations in place), which is a different context: autotune's
   rule ``bytes < 16 MiB``, right out of sample on the lineages, was wrong on all 13 held-out attempts of
   the first H200 evaluation, where a naive kernel's default launch always left time on the table and
   every one of the 13 trials paid.
2. **PROFITABLE_WHEN** rules evaluated on the grid's shapes: false on most shapes predicts no gain, true
   on most predicts a gain (a rule that cannot be evaluated on a shape does not vote).
3. **The lineage's median effect** (``Effect.median >= PAID``).

Pure: the caller evaluates the rules and passes the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from klineage.schema.records import PAID, Skill

#: Verified trials on new code needed before they outvote the lineage's rules and median.
MIN_TRIALS = 3


@dataclass(frozen=True)
class ProfitPrediction:
    """A prediction and what it rests on: ``source`` is ``trials``, ``rule``, ``lineage`` or ``none``
    (``pays`` is then None: nothing to go on)."""

    pays: bool | None
    source: str
    basis: str


def predict_profit(skill: Skill | None, rule_votes: Sequence[bool | None] = (),
                   trials: tuple[int, int] | None = None) -> ProfitPrediction:
    """Predict whether ``skill`` pays (≥ ``PAID``× over the kernel it is applied to) on a grid.

    ``rule_votes``: per grid shape, the conjunction of the skill's PROFITABLE_WHEN rules there (None where
    it cannot be evaluated); ``trials``: (paid, verified) trials on new code, by default the skill's own
    counts (``Skill.paid``, ``Skill.verified``)."""
    paid, verified = trials if trials is not None else ((skill.paid, skill.verified) if skill else (0, 0))
    if verified >= MIN_TRIALS:
        return ProfitPrediction(2 * paid > verified, "trials",
                                f"paid on {paid} of {verified} verified trials on new code")
    known = [v for v in rule_votes if v is not None]
    if known:
        false = sum(1 for v in known if v is False)
        return ProfitPrediction(false <= len(known) / 2, "rule",
                                f"PROFITABLE_WHEN false on {false} of {len(known)} shapes")
    if skill is not None and skill.effect.median is not None:
        return ProfitPrediction(skill.effect.median >= PAID, "lineage",
                                f"no rule; lineage median {skill.effect.median:.2f}x")
    return ProfitPrediction(None, "none", "no trials, no rule, no lineage effect")
