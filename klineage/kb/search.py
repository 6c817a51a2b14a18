"""Hybrid skill search with explanations (DESIGN.md, "Retrieval").

The pipeline is a few small, composable pieces:

1. **Retrievers** each return skill ids, best first: ``vector_ranking`` (cosine over skill
   embeddings, queried with the text, or the kernel's summary when there is no text),
   ``fulltext_ranking`` (BM25 over name/intent/anchor text) and ``anchor_ranking`` (the skill's
   anchor predicate evaluated on the kernel's static features: true = match, unknown = weak match,
   false = not a candidate).
2. **Fusion**: ``reciprocal_rank_fusion`` (k = 60); relevance is the fused score divided by the
   best possible one, so it lies in (0, 1]. A context-only search (no text, no kernel) takes every
   skill with relevance 1. **Relevance floor**: a skill comes from the vector retriever of a text only
   when its cosine similarity to the text is at least ``MIN_SIMILARITY`` (a search without a kernel; with
   one, the kernel's analysis decides and every skill is explained for it); a text that no skill's
   embedding is near and no skill's words match returns no hit (rather than every skill, ranked).
3. **Conditions**: every candidate's anchor, VALID_WHEN and PROFITABLE_WHEN conditions are
   evaluated (three-valued) against the context's problem features plus the kernel's features.
   With a kernel, the caller may also pass ``operator_anchors``: for each operator id it knows,
   whether the operator's own ``detect`` finds a place to *add* it in the kernel ("applicable"),
   finds it already there ("present": nothing to recommend) or finds nothing ("absent"). A skill
   recommends adding its operator's optimization, so its anchor holds only where that state is
   "applicable" (and its stored anchor predicate is not false); "present" and "absent" make it
   NOT_APPLICABLE with a line saying so. ``kb`` never imports ``transforms``: the caller computes
   the states (``klineage.transforms.facts``). Applicability: NOT_APPLICABLE when a
   VALID_WHEN condition or the anchor is false; APPLICABLE when all are true; otherwise UNKNOWN.
4. **Ranking**: ``score = relevance × expected gain × confidence``. Expected gain is the measured
   speedup at the evidence shape nearest to the context's shape (log-distance over the shape
   features it was measured over, all of which the context must give; a different dtype counts as
   a distance of 0.5), or the skill's median
   speedup when the context has no comparable shape, or 1.0 when unmeasured; when a
   PROFITABLE_WHEN condition is false the expected gain is capped at 1.0 (the induced rule says it
   did not pay there). Confidence is (support + 1) / (support + 2) over evidence steps (Laplace's
   rule of succession; verified applications by agents count too, a success when they paid).
   **Moves together**: a skill the lineages measured paying only together with other operators
   (``Skill.together``: the expert's launch configuration as one autotune config set, a step that lost alone and
   paid with the next) is expected to gain what the move gained when the kernel can take the whole move (its
   ``operator_anchors`` say the move's first operator can be added and, for a pair, the second too) and that is
   more than the skill alone: ``SkillHit.together`` names the move, the basis says so.
   Tiers come before scores: a hit with a false PROFITABLE_WHEN (the induced rule says it did not pay
   there) always comes after every hit without one, and NOT_APPLICABLE hits always come last and
   score 0. ``SkillHit.why`` says all of this in one line, and ``SkillHit.missing_features`` names
   the features the context lacked to decide the unknown conditions.

Every hit carries its explanation: each condition with its verdict and deciding clause (an induced
rule with its out-of-sample accuracy beside the majority rate; a skill with no PROFITABLE_WHEN rule
says what its timings showed, "paid on x of n measured shapes; no rule separates them", as an
unknown check), the evidence steps with per-shape speedups (and the sample flag of test fixtures), and the risks.

``SkillCatalog`` holds everything the ranking needs for a set of skills, loaded with a fixed
number of batched store calls (conditions of all skills in one ``neighbors`` call per kind);
``kb.service`` caches it while the store's ``state_token`` is unchanged.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from klineage.kb.conditions import CompiledCondition, ConditionError, Verdict, parse_condition
from klineage.kb.features import FeatureError, kernel_feature_values, problem_features
from klineage.kb.profitability import MIN_TRIALS, predict_profit
from klineage.kb.store import GraphStore
from klineage.schema.errors import KLineageError
from klineage.schema.graph import Node
from klineage.schema.graph_spec import FULLTEXT_INDEXES
from klineage.schema.kernel_features import kind_agreement
from klineage.schema.lineage_document import step_speedups
from klineage.schema.records import LAUNCH_CONFIGURATION_SET, Condition, Evidence, Risk, Skill, Together

logger = logging.getLogger("klineage.search")

APPLICABLE = "APPLICABLE"
NOT_APPLICABLE = "NOT_APPLICABLE"
UNKNOWN = "UNKNOWN"

RRF_K = 60
DTYPE_MISMATCH_DISTANCE = 0.5
MIN_CANDIDATES = 50
#: Cosine similarity a skill's embedding needs to a search text to be retrieved by it (all-MiniLM-L6-v2 on
#: the committed skills: "faster softmax" -> online-softmax 0.55, exp2 0.39, the rest <= 0.2; "bake a
#: chocolate cake" <= 0.09; "hello" <= 0.09).
MIN_SIMILARITY = 0.25
FULLTEXT_INDEX = FULLTEXT_INDEXES[0].name
#: Words that say nothing about which skill is meant (English function words and what every request
#: about a kernel says): left out of the full-text query, so that "make a kernel faster" matches no
#: skill by its "a" or its "kernel".
_STOPWORD_TEXT = (
    "a an and are as at be by can do does for from how i in into is it its me my of on or our so that the "
    "their this to up use using we what when which with without you your make makes making faster fast "
    "speed speedup improve optimize optimise optimization kernel kernels gpu triton code program better")
STOPWORDS = frozenset(_STOPWORD_TEXT.split(" "))
_WORD = re.compile(r"[0-9a-z]+")

_FALSE, _UNKNOWN, _TRUE = 0, 1, 2  # Kleene truth values as ordered codes: AND is min, OR is max
_SHAPE_FEATURES = ("M", "N", "K", "B", "H", "S", "D", "rows", "cols", "vocab")

#: The states an operator's anchor can have in a kernel (``OperatorAnchor.state``).
ANCHOR_APPLICABLE, ANCHOR_PRESENT, ANCHOR_ABSENT = "applicable", "present", "absent"
ANCHOR_STATES = (ANCHOR_APPLICABLE, ANCHOR_PRESENT, ANCHOR_ABSENT)


class SearchError(KLineageError, ValueError):
    """A search that cannot be answered as asked (nothing to search for, a bad context); says why."""


@dataclass(frozen=True)
class ConditionCheck:
    """One condition of a hit, evaluated: ``kind`` is "anchor", "valid" or "profitable"."""

    kind: str
    expr: str
    value: bool | None
    decided_by: str
    unknown: tuple[str, ...] = ()
    error: str | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    note: str | None = None
    basis: str | None = None  # how an induced rule was judged ("82% out of sample vs majority 60%")

    @property
    def status(self) -> str:
        """``"passed"``, ``"failed"`` or ``"unknown"``."""
        return {True: "passed", False: "failed", None: "unknown"}[self.value]

    def explain(self) -> str:
        """One line: the condition and, unless it simply held, which clause decided and on what values
        (an operator-anchor check is its ``note``, already a sentence)."""
        if self.note:
            return self.note
        head = f"{self.kind}: {self.expr}" + (f" [{self.basis}]" if self.basis else "")
        if self.value is True:
            return head
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self.values.items()))
        if self.value is False:
            where = f"`{self.decided_by}` is false" + (f" with {shown}" if shown else "")
            return f"{head} — {where}"
        if self.error:
            return f"{head} — cannot evaluate: {self.error}"
        return f"{head} — `{self.decided_by}` unknown: missing {', '.join(self.unknown) or 'features'}"


@dataclass(frozen=True)
class OperatorAnchor:
    """What a kernel's source says about one operator, computed by the caller with the operator's
    ``detect``: ``state`` is "applicable" (a place to add it), "present" (already there) or
    "absent" (no place at all); ``detail`` says where (applicable, present) or why not (absent), for
    explanations."""

    state: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.state not in ANCHOR_STATES:
            raise SearchError(f"operator anchor state {self.state!r}: expected one of {', '.join(ANCHOR_STATES)}")


def operator_anchor_check(operator: str, anchor: OperatorAnchor | None, description: str) -> ConditionCheck:
    """The explained verdict of a skill's operator anchor in the kernel (``description``: the skill's
    anchor description, used when the caller gave no detail); unknown when the caller gave no state."""
    expr = f"operator {operator} anchor in the kernel"
    if anchor is None:
        return ConditionCheck("anchor", expr, None, expr, ("operator anchor",),
                              note=f"anchor unknown: {operator} is not an operator the caller could detect")
    if anchor.state == ANCHOR_ABSENT:
        detail = anchor.detail or (f"it needs {description}" if description else "")
        note = f"anchor absent: nowhere in the kernel to add {operator}" + (f" ({detail})" if detail else "")
        return ConditionCheck("anchor", expr, False, expr, note=note)
    detail = anchor.detail
    if anchor.state == ANCHOR_APPLICABLE:
        note = f"anchor applicable: {operator} can be added in the kernel" + (f" at {detail}" if detail else "")
        return ConditionCheck("anchor", expr, True, expr, note=note)
    if anchor.state == ANCHOR_PRESENT:
        note = (f"anchor present: {operator} is already in the kernel" + (f" ({detail})" if detail else "")
                + "; nothing to add")
    return ConditionCheck("anchor", expr, False, expr, note=note)


def _operator_anchors(value: Mapping[str, Any] | None) -> dict[str, OperatorAnchor] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SearchError("operator_anchors: expected a mapping of operator id to anchor state")
    out: dict[str, OperatorAnchor] = {}
    for op, anchor in value.items():
        if isinstance(anchor, OperatorAnchor):
            out[str(op)] = anchor
        elif isinstance(anchor, str):
            out[str(op)] = OperatorAnchor(anchor)
        elif isinstance(anchor, Mapping):
            out[str(op)] = OperatorAnchor(str(anchor.get("state", "")), str(anchor.get("detail", "") or ""))
        else:
            raise SearchError(f"operator_anchors[{op!r}]: expected a state ({', '.join(ANCHOR_STATES)})")
    return out


@dataclass(frozen=True)
class SkillHit:
    """One search result with its explanation.

    ``applicable`` is APPLICABLE, NOT_APPLICABLE or UNKNOWN; ``score`` = relevance ×
    expected_gain × confidence (0 for NOT_APPLICABLE); ``gain_basis`` says where the expected
    gain came from; ``passed``/``failed``/``unknown`` are ``ConditionCheck.explain()`` lines.
    """

    skill: Skill
    score: float
    applicable: str
    relevance: float
    expected_gain: float
    confidence: float
    gain_basis: str
    checks: tuple[ConditionCheck, ...]
    evidence: tuple[Evidence, ...]
    risks: tuple[Risk, ...]
    similarity: float | None = None
    #: the move of several operators the expected gain is of, when it is one (``fitting_together``)
    together: Together | None = None

    @property
    def why(self) -> str:
        """The score explained in one line: its factors, where each came from, and the hit's tier."""
        if self.applicable == NOT_APPLICABLE:
            return "score 0: not applicable (a VALID_WHEN condition or the anchor is false); ranked last"
        near = f", text similarity {self.similarity:.2f}" if self.similarity is not None else ""
        support = self.skill.support_steps
        text = (f"score {self.score:.3f} = relevance {self.relevance:.2f}{near} × expected gain "
                f"{self.expected_gain:.2f}× ({self.gain_basis}) × confidence {self.confidence:.2f} "
                f"({support} measured step(s))")
        if self.unprofitable:
            text += "; ranked after every hit whose PROFITABLE_WHEN is not false"
        return text

    @property
    def unprofitable(self) -> bool:
        """True when a PROFITABLE_WHEN condition is false for the context and the skill's trials on new
        code (``kb.profitability``) do not outvote it."""
        if not any(c.kind == "profitable" and c.value is False for c in self.checks):
            return False
        trials = predict_profit(self.skill)
        return not (trials.source == "trials" and trials.pays)

    @property
    def missing_features(self) -> tuple[str, ...]:
        """Features the conditions that stayed unknown need and the context (or kernel) did not give."""
        return tuple(sorted({f for c in self.checks if c.value is None for f in c.unknown}))

    @property
    def passed(self) -> tuple[str, ...]:
        """Explanations of the conditions that held."""
        return tuple(c.explain() for c in self.checks if c.value is True)

    @property
    def failed(self) -> tuple[str, ...]:
        """Explanations of the conditions that were false, with the deciding clause."""
        return tuple(c.explain() for c in self.checks if c.value is False)

    @property
    def unknown(self) -> tuple[str, ...]:
        """Explanations of the conditions that could not be decided, with the missing features."""
        return tuple(c.explain() for c in self.checks if c.value is None)


@dataclass(frozen=True)
class _Point:
    shape: Mapping[str, Any]
    dtype: str
    speedup: float


#: A move together is offered only to a kernel this much like its lineage's naive kernel (``kind_agreement``: at
#: most 2 of the 8 kernel-kind features differ). Below it the move's gain is no evidence: the GEMM expert's config
#: set was the nearest move for a column sum (4 of 8 agree), a reduction without tl.dot.
MIN_KIND_AGREEMENT = 0.75


def together_agreement(together: Together, kernel: Mapping[str, Any] | None) -> float:
    """How alike the kernel and the naive kernel of the move's lineage are (``kind_agreement``)."""
    return kind_agreement(kernel or {}, dict.fromkeys(together.kernel_kind, True))


def fitting_together(skill: Skill, anchors: Mapping[str, OperatorAnchor] | None,
                     kernel: Mapping[str, Any] | None = None, nearest: float = 0.0) -> Together | None:
    """The skill's move together with other operators (``Skill.together``) that the kernel can take whole, by
    its operator anchors: the move's first operator can be added (for a launch-configuration set, the autotune
    config list that carries every value) and, for a pair, the second too; and its lineage is among those whose
    naive kernel is most like this one (``together_agreement`` at least ``nearest``, the best any move of the
    catalog reaches: an attention kernel takes the attention expert's moves, not the GEMM's) and like enough
    (``MIN_KIND_AGREEMENT``). Of several, the most alike, then the highest gain. None without anchors or such a
    move."""
    if anchors is None:
        return None

    def addable(op: str) -> bool:
        found = anchors.get(op)
        return found is not None and found.state == ANCHOR_APPLICABLE

    fits = [t for t in skill.together
            if addable(t.operators[0]) and (t.kind == LAUNCH_CONFIGURATION_SET or all(map(addable, t.operators)))
            and together_agreement(t, kernel) >= max(nearest, MIN_KIND_AGREEMENT) - 1e-9]
    return max(fits, key=lambda t: (together_agreement(t, kernel), t.gain, t), default=None)


def _confidence(support: int, paid: int = 0, verified: int = 0) -> float:
    """Laplace's rule of succession over the evidence steps plus the verified applications by agents
    (a step counts as a success; an application counts as one when it paid)."""
    return (support + paid + 1) / (support + verified + 2)


def _compile(expr: str) -> CompiledCondition | ConditionError:
    try:
        return parse_condition(expr)
    except ConditionError as exc:  # a stored condition not written through ingest: report, do not crash
        return exc


class SkillCatalog:
    """Skills with their conditions, anchors, evidence and risks, arranged for vectorized ranking.

    Distinct expressions are compiled once; per query each is evaluated once, and per-skill Kleene
    ANDs over VALID_WHEN / PROFITABLE_WHEN codes are numpy ``minimum.reduceat`` over index arrays.
    """

    def __init__(self, skills: Sequence[Skill], valid: Mapping[str, Sequence[Condition]],
                 profitable: Mapping[str, Sequence[Condition]], risks: Mapping[str, Sequence[Risk]],
                 evidence: Mapping[str, Sequence[Evidence]]) -> None:
        ordered = sorted(skills, key=lambda s: s.id)
        self.skills: list[Skill] = ordered
        self.ids: list[str] = [s.id for s in ordered]
        self.position: dict[str, int] = {sid: i for i, sid in enumerate(self.ids)}
        self.exprs: list[str] = [""]  # slot 0: the constant TRUE (no anchor; segment sentinel)
        self.compiled: list[CompiledCondition | ConditionError | None] = [None]
        self._slot: dict[str, int] = {}
        self.valid = [tuple(valid.get(sid, ())) for sid in self.ids]
        self.profitable = [tuple(profitable.get(sid, ())) for sid in self.ids]
        self.risks = [tuple(risks.get(sid, ())) for sid in self.ids]
        self.evidence = [tuple(evidence.get(sid, ())) for sid in self.ids]
        self.anchor_slot = np.asarray([self._intern(s.anchor.predicate) for s in ordered], dtype=np.int64)
        self.valid_flat, self.valid_ptr = self._segments(self.valid)
        self.profit_flat, self.profit_ptr = self._segments(self.profitable)
        self._warn_broken()
        self.points: list[tuple[_Point, ...]] = [
            tuple(_Point(dict(x.get("shape") or {}), str(x.get("dtype", "")), float(x["speedup"]))
                  for e in evs for x in e.speedups if _finite(x.get("speedup")))
            for evs in self.evidence]
        medians, highs = [], []
        for skill, pts in zip(ordered, self.points, strict=True):
            values = [p.speedup for p in pts]
            median = skill.effect.median if skill.effect.median is not None else (
                statistics.median(values) if values else 1.0)
            medians.append(float(median))
            highs.append(max([float(median), *values]))
        #: per skill, the median speedup of its verified, passing trials on new code when it has at least
        #: MIN_TRIALS of them (with a description), else None
        self.trials_gain: list[tuple[float, str] | None] = [
            (float(s.field_effect.median), f"{s.field_effect.median:.3g}× median of {s.field_effect.n} verified "
                                           "trials by agents on new code")
            if s.field_effect.median is not None and s.field_effect.n >= MIN_TRIALS else None for s in ordered]
        medians = [t[0] if t is not None else m for t, m in zip(self.trials_gain, medians, strict=True)]
        highs = [max(h, t[0]) if t is not None else h for t, h in zip(self.trials_gain, highs, strict=True)]
        self.median_gain = np.asarray(medians, dtype=np.float64)
        self.max_gain = np.asarray(highs, dtype=np.float64)
        #: per skill, the highest gain of its moves together with other operators (0 without any)
        self.together_gain = np.asarray([max((t.gain for t in s.together), default=0.0) for s in ordered],
                                        dtype=np.float64)
        self.confidence = np.asarray(
            [_confidence(s.support_steps, s.paid, s.verified) for s in ordered], dtype=np.float64)
        # agents' verified trials on new code outvote a false PROFITABLE_WHEN (kb.profitability)
        by_trials = [predict_profit(s) for s in ordered]
        self.trials_pay = np.asarray([p.source == "trials" and bool(p.pays) for p in by_trials], dtype=bool)
        self.trials_basis = [p.basis if p.source == "trials" else "" for p in by_trials]
        self._verdicts: dict[tuple[Any, ...], tuple[np.ndarray, list[Verdict | None]]] = {}
        self._kleene: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _intern(self, expr: str) -> int:
        text = (expr or "").strip()
        if not text:
            return 0
        slot = self._slot.get(text)
        if slot is None:
            slot = len(self.exprs)
            self._slot[text] = slot
            self.exprs.append(text)
            self.compiled.append(_compile(text))
        return slot

    def _users(self, slot: int) -> list[str]:
        text = self.exprs[slot]
        return [sid for sid, skill, valid, profitable in zip(self.ids, self.skills, self.valid, self.profitable,
                                                              strict=True)
                if skill.anchor.predicate.strip() == text or any(c.expr.strip() == text for c in (*valid, *profitable))]

    def _warn_broken(self) -> None:
        """Log one warning per stored expression that does not parse (it is unknown in every search)."""
        for slot, compiled in enumerate(self.compiled):
            if isinstance(compiled, ConditionError):
                logger.warning("skipping the stored condition %r of %s: %s", self.exprs[slot][:120],
                               ", ".join(self._users(slot)), compiled.message)

    def _evaluate(self, slot: int, env: Mapping[str, Any]) -> Verdict:
        """The verdict of expression ``slot`` on ``env``; an expression that fails to evaluate (it cannot,
        once parsed, but a search must never fail on one stored condition) is unknown from then on."""
        compiled = self.compiled[slot]
        if isinstance(compiled, ConditionError):
            return Verdict(None, self.exprs[slot], (), compiled.message)
        assert compiled is not None
        try:
            return compiled.evaluate(env)
        except (RecursionError, MemoryError, ArithmeticError, TypeError, ValueError) as exc:
            error = ConditionError(self.exprs[slot], f"cannot be evaluated ({type(exc).__name__})")
            self.compiled[slot] = error
            logger.warning("skipping the stored condition %r of %s: %s", self.exprs[slot][:120],
                           ", ".join(self._users(slot)), error.message)
            return Verdict(None, self.exprs[slot], (), error.message)

    def slot_of(self, expr: str) -> int:
        """The slot of an expression of this catalog (0 for an empty one)."""
        return self._slot.get((expr or "").strip(), 0)

    def _segments(self, per_skill: Sequence[Sequence[Condition]]) -> tuple[np.ndarray, np.ndarray]:
        flat: list[int] = []
        ptr: list[int] = []
        for conditions in per_skill:
            ptr.append(len(flat))
            flat.append(0)  # the TRUE sentinel keeps every segment non-empty
            flat.extend(self._intern(c.expr) for c in conditions)
        return np.asarray(flat, dtype=np.int64), np.asarray(ptr, dtype=np.int64)

    @staticmethod
    def load(store: GraphStore, ids: Sequence[str] | None = None) -> SkillCatalog:
        """Load every skill (``ids`` None) or the given ones, with a fixed number of batched calls:
        the skills, then one ``neighbors`` call each for VALID_WHEN, PROFITABLE_WHEN, RISKS and
        evidence steps, and one ``get_many`` for the evidence steps' lineages."""
        if ids is None:
            nodes = store.find("Skill")
        else:
            wanted = sorted(set(ids))
            nodes = [n for n in store.get_many("Skill", wanted) if n is not None] if wanted else []
        skills = [Skill.from_node(_without_embedding(n)) for n in nodes]
        skill_ids = [s.id for s in skills]
        if not skill_ids:
            return SkillCatalog([], {}, {}, {}, {})
        valid = store.neighbors(skill_ids, "VALID_WHEN")
        profitable = store.neighbors(skill_ids, "PROFITABLE_WHEN")
        risks = store.neighbors(skill_ids, "RISKS")
        steps = store.neighbors(skill_ids, "REVERSES_INTO", "in")
        return SkillCatalog(
            skills,
            {k: [Condition.from_node(n) for _, n in v] for k, v in valid.items()},
            {k: [Condition.from_node(n) for _, n in v] for k, v in profitable.items()},
            {k: [Risk.from_node(n) for _, n in v] for k, v in risks.items()},
            evidence_records(store, {k: [n for _, n in v] for k, v in steps.items()}),
        )

    def verdicts(self, env: Mapping[str, Any]) -> tuple[np.ndarray, list[Verdict | None]]:
        """Every distinct expression evaluated on ``env``: Kleene codes and verdicts (cached per env)."""
        key = tuple(sorted(env.items()))
        found = self._verdicts.get(key)
        if found is not None:
            return found
        codes = np.empty(len(self.exprs), dtype=np.int8)
        verdicts: list[Verdict | None] = [None] * len(self.exprs)
        codes[0] = _TRUE
        for slot in range(1, len(self.exprs)):
            verdict = self._evaluate(slot, env)
            verdicts[slot] = verdict
            codes[slot] = _TRUE if verdict.value is True else _FALSE if verdict.value is False else _UNKNOWN
        if len(self._verdicts) > 256:
            self._verdicts.clear()
        self._verdicts[key] = (codes, verdicts)
        return codes, verdicts

    def kleene(self, env: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per skill on ``env``: anchor code, AND of VALID_WHEN codes, AND of PROFITABLE_WHEN codes
        (cached per env, like ``verdicts``)."""
        key = tuple(sorted(env.items()))
        found = self._kleene.get(key)
        if found is not None:
            return found
        codes, _ = self.verdicts(env)
        if not self.ids:
            empty = np.zeros(0, dtype=np.int8)
            return empty, empty, empty
        anchor = codes[self.anchor_slot]
        valid = np.minimum.reduceat(codes[self.valid_flat], self.valid_ptr)
        profit = np.minimum.reduceat(codes[self.profit_flat], self.profit_ptr)
        if len(self._kleene) > 256:
            self._kleene.clear()
        self._kleene[key] = (anchor, valid, profit)
        return anchor, valid, profit

    def check(self, kind: str, slot: int, verdicts: Sequence[Verdict | None], env: Mapping[str, Any]
              ) -> ConditionCheck:
        """The explained verdict of expression ``slot`` for one condition of ``kind``."""
        verdict = verdicts[slot]
        assert verdict is not None
        values: dict[str, Any] = {}
        if verdict.value is False:
            decider = _compile(verdict.decided_by)
            names = decider.names if isinstance(decider, CompiledCondition) else frozenset()
            values = {n: env[n] for n in names if env.get(n) is not None}
        return ConditionCheck(kind, self.exprs[slot], verdict.value, verdict.decided_by, verdict.unknown,
                              verdict.error, values)


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and value > 0


def _without_embedding(node: Node) -> Node:
    return Node(node.label, node.id, {k: v for k, v in node.props.items() if k != "embedding"})


def evidence_records(store: GraphStore, steps_by_skill: Mapping[str, Sequence[Node]]
                     ) -> dict[str, list[Evidence]]:
    """Evidence records for each skill's evidence steps (one ``get_many`` for their lineages),
    ordered by workload, lineage and step index."""
    lineage_ids = sorted({str(s.props.get("lineage_id")) for steps in steps_by_skill.values() for s in steps
                          if s.props.get("lineage_id")})
    found = store.get_many("Lineage", lineage_ids) if lineage_ids else []
    lineages = {lid: node for lid, node in zip(lineage_ids, found, strict=True) if node is not None}
    out: dict[str, list[Evidence]] = {}
    for skill_id, steps in steps_by_skill.items():
        records = []
        for step in steps:
            lid = str(step.props.get("lineage_id", ""))
            lineage = lineages.get(lid)
            lp = lineage.props if lineage is not None else {}
            speedups = tuple(step_speedups(step.props))
            workload = str(lp.get("workload", ""))
            records.append((workload, lid, int(step.props.get("index") or 0), Evidence(
                lineage_id=lid, step_id=step.id, workload=workload, gpu=str(lp.get("gpu", "")),
                speedups=speedups, sample=bool(step.props.get("sample", False) or lp.get("sample", False)))))
        out[skill_id] = [r for *_, r in sorted(records, key=lambda r: r[:3])]
    return out


# ------------------------------------------------------------------------------------------------
# retrievers and fusion


def vector_ranking(store: GraphStore, vector: Sequence[float], k: int) -> list[str]:
    """Skill ids by cosine similarity of their embedding to ``vector``, best first."""
    return [hit.node.id for hit in store.vector_top_k("Skill", "embedding", vector, k)]


def content_words(text: str) -> list[str]:
    """The words of ``text`` that can tell skills apart (lower case, ``STOPWORDS`` left out), in order."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def fulltext_ranking(store: GraphStore, text: str, k: int) -> list[str]:
    """Skill ids by full-text (BM25 / Lucene) match of the content words of ``text`` on name, intent and
    anchor text; none when ``text`` has no content word."""
    words = content_words(text)
    if not words:
        return []
    return [hit.node.id for hit in store.fulltext_top_k(FULLTEXT_INDEX, " ".join(words), k)]


def anchor_ranking(catalog: SkillCatalog, anchor_codes: np.ndarray, k: int) -> list[str]:
    """Skills whose anchor holds on the kernel (true first, then unknown = weak), each group by
    median gain × confidence; skills whose anchor is false are left out."""
    if not catalog.ids:
        return []
    keep = np.flatnonzero(anchor_codes != _FALSE)
    strength = (catalog.median_gain * catalog.confidence)[keep]
    order = np.lexsort((keep, -strength, -anchor_codes[keep].astype(np.int64)))
    return [catalog.ids[i] for i in keep[order][:k]]


#: Relevance to a text below which a skill is not returned for it (a tenth of the best match's).
MIN_TEXT_RELEVANCE = 0.1
#: Words that name a kernel family in a search text (the families of the workloads lineages are walked on).
FAMILY_TERMS: dict[str, frozenset[str]] = {
    "gemm": frozenset(["gemm", "gemms", "matmul", "matmuls", "matrix", "multiply", "multiplication", "linear",
                       "dot", "mm", "bmm"]),
    "attention": frozenset(["attention", "flash", "qk", "sdpa", "transformer"]),
    "row-reduction": frozenset(["softmax", "layernorm", "rmsnorm", "norm", "normalization", "entropy",
                                "logsoftmax", "row", "rows"]),
    "reduction": frozenset(["reduction", "reduce", "sum", "mean", "column", "columns", "argmax", "max"]),
    "elementwise": frozenset(["elementwise", "activation", "gelu", "silu", "relu", "pointwise"]),
}


def text_relevance(catalog: SkillCatalog, similarity: Mapping[str, float], fulltext: Sequence[str],
                   text: str) -> np.ndarray:
    """Relevance in (0, 1] of each catalog skill to a search text alone (0: not retrieved), sharp enough that
    the text, not the measured gain, decides which skills come back (reciprocal-rank fusion's k = 60 leaves
    rank 1 and rank 10 13 % apart, and the gain then ranked "faster matmul" by softmax skills):

    - by embedding: the cosine similarity above ``MIN_SIMILARITY`` as a share of the best one's, squared;
    - by words: ``1 / rank`` in the full-text ranking;
    - the better of the two, halved for a skill learned on no kernel family the text names
      (``text_families``: "matmul" names gemm) when another retrieved skill was learned on one."""
    out = np.zeros(len(catalog.ids), dtype=np.float64)
    sims = [v for v in similarity.values() if v >= MIN_SIMILARITY]
    top = max(sims, default=MIN_SIMILARITY)
    for sid, value in similarity.items():
        pos = catalog.position.get(sid)
        if pos is not None and value >= MIN_SIMILARITY:
            out[pos] = ((value - MIN_SIMILARITY) / (top - MIN_SIMILARITY)) ** 2 if top > MIN_SIMILARITY else 1.0
    for rank, sid in enumerate(fulltext, start=1):
        pos = catalog.position.get(sid)
        if pos is not None:
            out[pos] = max(out[pos], 1.0 / rank)
    named = text_families(text)
    learned = np.array([bool(named & set(skill.families)) for skill in catalog.skills], dtype=bool)
    if (learned & (out > 0)).any():  # halving means something only beside a skill that was learned there
        out[~learned] *= 0.5
    out[out < MIN_TEXT_RELEVANCE] = 0.0
    return out


def text_families(text: str) -> set[str]:
    """The kernel families a search text names by their words (``FAMILY_TERMS``)."""
    words = set(_WORD.findall(text.lower()))
    return {family for family, terms in FAMILY_TERMS.items() if words & terms}


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> dict[str, float]:
    """Fuse ranked id lists: each id scores the sum over lists of 1 / (k + rank), rank from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused


# ------------------------------------------------------------------------------------------------
# expected gain


def nearest_shape_gain(points: Sequence[_Point], env: Mapping[str, Any]) -> tuple[float, str] | None:
    """The measured speedup at the evidence shape nearest to the context's shape, and a description;
    None when no evidence shape is comparable. A shape is comparable when the context gives every
    shape feature it was measured over: ``rows`` alone says little when the measurement also varied
    ``cols`` (and a cross-entropy context's ``vocab`` is not a softmax's ``cols``). Distance: sum
    over those features of |log(context / measured)|, plus 0.5 for a different dtype; equally near
    points give their median."""
    best: float | None = None
    chosen: list[_Point] = []
    dtype = env.get("dtype")
    for point in points:
        distance = 0.0
        measured = [name for name in _SHAPE_FEATURES if _finite(point.shape.get(name))]
        if not measured or not all(_finite(env.get(name)) for name in measured):
            continue
        for name in measured:
            distance += abs(math.log(float(env[name]) / float(point.shape[name])))
        if dtype is not None and point.dtype and point.dtype != dtype:
            distance += DTYPE_MISMATCH_DISTANCE
        if best is None or distance < best - 1e-12:
            best, chosen = distance, [point]
        elif abs(distance - best) <= 1e-12:
            chosen.append(point)
    if best is None:
        return None
    gain = float(statistics.median(p.speedup for p in chosen))
    shape = ", ".join(f"{k}={v}" for k, v in chosen[0].shape.items())
    return gain, f"{gain:.3g}× measured at the nearest shape ({shape}, {chosen[0].dtype})"


def _has_shape(env: Mapping[str, Any]) -> bool:
    return any(_finite(env.get(n)) for n in _SHAPE_FEATURES)


# ------------------------------------------------------------------------------------------------
# the search


@dataclass(frozen=True)
class SearchRequest:
    """A checked search request: text, problem features, kernel features, kernel summary, limit, and
    the kernel's operator anchors (None: not computed; the stored anchor predicates decide alone)."""

    text: str | None
    problem: Mapping[str, Any]
    kernel: Mapping[str, Any] | None
    kernel_summary: str | None
    limit: int
    operator_anchors: Mapping[str, OperatorAnchor] | None = None

    @property
    def env(self) -> dict[str, Any]:
        """The features conditions are evaluated on: the kernel's, then the context's (which win)."""
        return {**(self.kernel or {}), **self.problem}

    @property
    def context_only(self) -> bool:
        """True when there is neither text, nor a kernel summary, nor kernel features."""
        return not self.text and not self.kernel_summary and self.kernel is None


def make_request(text: str | None = None, context: Mapping[str, Any] | None = None,
                 kernel_features: Mapping[str, Any] | None = None, kernel_summary: str | None = None,
                 limit: int = 10, operator_anchors: Mapping[str, Any] | None = None) -> SearchRequest:
    """Check and normalize search arguments; SearchError when there is nothing to search for or an
    argument is malformed (unknown context feature, bad value, limit < 1, an operator anchor state
    other than applicable/present/absent, operator anchors without kernel features).

    ``operator_anchors`` maps operator ids to ``OperatorAnchor`` (or its state string, or a mapping
    with ``state`` and ``detail``)."""
    if text is not None and not isinstance(text, str):
        raise SearchError(f"text: expected a string, got {type(text).__name__}")
    if context is not None and not isinstance(context, Mapping):
        raise SearchError("context: expected a mapping of feature name to value, "
                          "e.g. {'M': 4096, 'dtype': 'bf16'}")
    if kernel_features is not None and not isinstance(kernel_features, Mapping):
        raise SearchError("kernel_features: expected a mapping of kernel feature name to value")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SearchError(f"limit: expected a positive integer, got {limit!r}")
    clean_text = text.strip() if text and text.strip() else None
    summary = kernel_summary.strip() if isinstance(kernel_summary, str) and kernel_summary.strip() else None
    if clean_text is None and not context and kernel_features is None and summary is None:
        raise SearchError("nothing to search for: give a text, a context (problem features such as "
                          "{'M': 4096, 'dtype': 'bf16'}) or a kernel")
    try:
        problem = problem_features(context)
    except FeatureError as exc:
        raise SearchError(f"context: {exc}") from exc
    kernel = kernel_feature_values(kernel_features) if kernel_features is not None else None
    anchors = _operator_anchors(operator_anchors)
    if anchors is not None and kernel is None:
        raise SearchError("operator_anchors: only meaningful with the kernel's features (kernel_features)")
    return SearchRequest(clean_text, problem, kernel, summary, limit, anchors)


def search_skills(request: SearchRequest, store: GraphStore, catalog_for: Callable[[Sequence[str] | None],
                  SkillCatalog], embed_query: Callable[[str], Sequence[float]] | None) -> list[SkillHit]:
    """Run ``request``: retrieve, fuse, evaluate conditions, rank, explain (module docstring).

    ``catalog_for(None)`` must return the catalog of every skill, ``catalog_for(ids)`` one holding at
    least ``ids``; ``embed_query`` embeds a query text (None disables the vector retriever).
    """
    depth = max(MIN_CANDIDATES, request.limit * 5)
    rankings: list[list[str]] = []
    query_text = request.text or request.kernel_summary
    similarity: dict[str, float] = {}
    if query_text and embed_query is not None:
        scored = store.vector_top_k("Skill", "embedding", embed_query(query_text), depth)
        # the floor: a text alone retrieves only the skills whose embedding is near it; with a kernel, its
        # analysis says which skills concern it, and every skill comes back explained for it
        if request.text and request.kernel is None:
            similarity = {hit.node.id: float(hit.score) for hit in scored}
            scored = [hit for hit in scored if hit.score >= MIN_SIMILARITY]
        rankings.append([hit.node.id for hit in scored])
    if request.text:
        rankings.append(fulltext_ranking(store, request.text, depth))
    need_all = request.context_only or request.kernel is not None
    catalog = catalog_for(None if need_all else sorted({i for r in rankings for i in r}))
    if not catalog.ids:
        return []
    env = request.env
    _, verdicts = catalog.verdicts(env)
    anchor, valid, profit = catalog.kleene(env)
    if request.operator_anchors is not None:
        anchor = np.minimum(anchor, _operator_codes(catalog, request.operator_anchors))
    n = len(catalog.ids)
    if request.context_only:
        relevance = np.ones(n, dtype=np.float64)
        candidates: np.ndarray = np.arange(n)
    elif request.text and request.kernel is None:
        relevance = text_relevance(catalog, similarity, rankings[-1], request.text)
        candidates = np.flatnonzero(relevance > 0)
    else:
        if request.kernel is not None:
            rankings.append(anchor_ranking(catalog, anchor, depth))
        fused = reciprocal_rank_fusion(rankings)
        best = sum(1.0 / (RRF_K + 1) for r in rankings if r) or 1.0
        relevance = np.zeros(n, dtype=np.float64)
        for skill_id, value in fused.items():
            pos = catalog.position.get(skill_id)
            if pos is not None:
                relevance[pos] = value / best
        candidates = np.flatnonzero(relevance > 0)
    if candidates.size == 0:
        return []
    not_applicable = (valid == _FALSE) | (anchor == _FALSE)
    applicable = (valid == _TRUE) & (anchor == _TRUE)
    cap = (profit == _FALSE) & ~catalog.trials_pay
    shaped = _has_shape(env)
    base = relevance * catalog.confidence
    upper_gain = catalog.max_gain if shaped else catalog.median_gain
    if request.operator_anchors is not None:  # a kernel that can take a move together expects its gain
        upper_gain = np.maximum(upper_gain, catalog.together_gain)
    upper_gain = np.where(cap, np.minimum(upper_gain, 1.0), upper_gain)
    tier = np.where(not_applicable, 2, np.where(cap, 1, 0)).astype(np.int64)
    upper = base * upper_gain
    order = candidates[np.lexsort((candidates, -upper[candidates], tier[candidates]))]

    # exact expected gain only where it can still change the top `limit` (upper bound = max speedup)
    best_keys: list[tuple[int, float, int]] = []
    exact: dict[int, tuple[float, str, Together | None]] = {}
    # the kernel-kind agreement of the lineage most like the kernel: only a kernel search offers moves together
    nearest = max((together_agreement(t, request.kernel) for s in catalog.skills for t in s.together),
                  default=0.0) if request.operator_anchors is not None else 0.0
    for i in order:
        i = int(i)
        optimistic = (int(tier[i]), -float(upper[i]), i)
        if len(best_keys) >= request.limit and optimistic > best_keys[request.limit - 1]:
            break  # every remaining candidate's best possible key is worse than the current last hit
        outvoted = catalog.trials_basis[i] if profit[i] == _FALSE and catalog.trials_pay[i] else ""
        gain, basis = _expected_gain(catalog, i, env, shaped, bool(cap[i]), outvoted)
        together = fitting_together(catalog.skills[i], request.operator_anchors, request.kernel, nearest)
        if together is not None and together.gain > gain and not cap[i]:
            gain, basis = together.gain, f"{together.gain:.3g}× as one move: {together.describe()}"
        else:
            together = None
        exact[i] = (gain, basis, together)
        bisect.insort(best_keys, (int(tier[i]), -float(base[i] * gain), i))
        del best_keys[request.limit:]

    hits = []
    for t, neg_score, i in best_keys:
        gain, basis, together = exact[i]
        state = NOT_APPLICABLE if t == 2 else (APPLICABLE if applicable[i] else UNKNOWN)
        checks = _checks(catalog, i, verdicts, env, request.operator_anchors)
        hits.append(SkillHit(
            skill=catalog.skills[i], score=0.0 if t == 2 else -neg_score, applicable=state,
            relevance=float(relevance[i]), expected_gain=gain, confidence=float(catalog.confidence[i]),
            gain_basis=basis, checks=checks, evidence=catalog.evidence[i], risks=catalog.risks[i],
            similarity=similarity.get(catalog.ids[i]), together=together))
    return hits


def _expected_gain(catalog: SkillCatalog, i: int, env: Mapping[str, Any], shaped: bool, cap: bool,
                   outvoted: str = "") -> tuple[float, str]:
    found = nearest_shape_gain(catalog.points[i], env) if shaped else None
    trials = catalog.trials_gain[i]
    if trials is not None:  # agents' verified trials on new code: the population this estimate is for
        gain, basis = trials
    elif found is not None:
        gain, basis = found
    elif catalog.skills[i].effect.n or catalog.points[i]:
        gain = float(catalog.median_gain[i])
        shapes = catalog.skills[i].effect.n or len(catalog.points[i])
        basis = f"{gain:.3g}× median over {shapes} measured shape(s)"
    else:
        gain, basis = 1.0, "unmeasured: no timings behind this skill"
    if cap and gain > 1.0:
        gain, basis = 1.0, basis + "; capped at 1.0× because a PROFITABLE_WHEN condition is false"
    elif outvoted:
        basis += f"; a PROFITABLE_WHEN condition is false, outvoted by trials on new code ({outvoted})"
    return gain, basis


def _operator_codes(catalog: SkillCatalog, anchors: Mapping[str, OperatorAnchor]) -> np.ndarray:
    """Per skill, the Kleene code of its operator's anchor in the kernel: true where applicable,
    false where present or absent, unknown for an operator the caller did not detect."""
    codes = np.empty(len(catalog.ids), dtype=np.int8)
    for i, skill in enumerate(catalog.skills):
        found = anchors.get(skill.operator)
        codes[i] = _UNKNOWN if found is None else _TRUE if found.state == ANCHOR_APPLICABLE else _FALSE
    return codes


def _checks(catalog: SkillCatalog, i: int, verdicts: Sequence[Verdict | None], env: Mapping[str, Any],
            anchors: Mapping[str, OperatorAnchor] | None = None) -> tuple[ConditionCheck, ...]:
    out: list[ConditionCheck] = []
    if anchors is not None:
        skill = catalog.skills[i]
        out.append(operator_anchor_check(skill.operator, anchors.get(skill.operator), skill.anchor.description))
    slot = int(catalog.anchor_slot[i])
    if slot:
        out.append(catalog.check("anchor", slot, verdicts, env))
    for kind, conditions in (("valid", catalog.valid[i]), ("profitable", catalog.profitable[i])):
        for condition in conditions:
            slot = catalog.slot_of(condition.expr)
            if slot:
                check = catalog.check(kind, slot, verdicts, env)
                if condition.oos_accuracy is not None and condition.majority is not None:
                    check = replace(check, basis=f"{100 * condition.oos_accuracy:.0f}% right out of sample vs "
                                                 f"majority rate {100 * condition.majority:.0f}%")
                out.append(check)
    note = catalog.skills[i].profitability
    if note and not catalog.profitable[i]:
        out.append(ConditionCheck("profitable", "no rule", None, "no rule", note=f"profitable: no rule — {note}"))
    return tuple(out)
