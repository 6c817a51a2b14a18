"""Induce a readable condition from labelled points: a decision tree of depth <= 2 (pure functions).

Used for both kinds of skill condition (DESIGN.md, "Conditions"): ``PROFITABLE_WHEN`` (label: the
optimization paid on this shape) and ``VALID_WHEN`` (label: the gates passed on this shape).

**Features.** Rules are written over the *portable* features only (``kb.conditions.PORTABLE_FEATURES``:
bytes, flops, arithmetic_intensity, dtype_bytes, out_elems, reduce_len, rows, ...), never over a
workload's own dim names (M, cols, vocab, S) or numel, so that a rule learned on one workload can be
evaluated on another. Only features every point has (not None) are used, so a rule is never
*unknown* on its own evidence.

**The tree** is found by exhaustive search, so the result is the best tree, not a greedy one:

* a *clause* is ``feature op constant``: ``f >= t`` / ``f < t`` for a numeric feature, with ``t`` a
  readable number between two neighbouring observed values ``lo < t <= hi``: the power of two
  nearest their geometric mean when one lies between them (written ``64 * 2 ** 20`` for 2**26,
  ``2 ** 30``, or ``4096`` below 2**20), else the number with the fewest significant digits (``3000``, ``0.5``);
  ``f == 'v'`` / ``f != 'v'`` for a categorical one; ``f`` / ``not f`` for a boolean one;
* depth 0 is a constant (``True`` or ``False``), depth 1 a single clause, depth 2 a root clause
  whose two sides are each a constant or a clause;
* trees are ranked by accuracy on the points, then simplicity (fewer clauses, then less depth), then
  the feature order of ``PORTABLE_FEATURES``, then the smaller threshold.

The tree is printed as an expression of the condition language (``kb.conditions``): clauses joined
by ``and`` / ``or``, with parentheses, e.g. ``bytes >= 64 * 2 ** 20`` or ``(rows >= 4096 and
dtype_bytes < 4) or rows < 4096``. Every printed expression is checked with ``parse_condition``.

**Honest PROFITABLE_WHEN** (``induce_profitable``). A depth-2 tree fitted to a dozen timings always
finds *something*; what matters is whether it predicts shapes it has not seen. So the accuracy that
decides is measured out of sample: each point carries a ``group`` (its shape, or its workload when
the points come from several workloads), the tree is refitted without each group in turn and
predicts the held-out group. The rule is kept only when that out-of-sample accuracy beats the
majority-class rate by ``MARGIN`` (0.10), and by more than chance (a permutation test: the labels
shuffled and the whole procedure rerun, p <= ``ALPHA`` = 0.05), with at least ``MIN_SUPPORT`` (8)
points, ``MIN_CLASS`` (2) of each label and two groups; otherwise there is no rule, and the result
says so in words ("paid on
x of n measured shapes; no rule separates them"). The tree's depth (1 or 2) is the one with the
better out-of-sample accuracy (1 on a tie). ``induce_condition`` (VALID_WHEN) keeps the in-sample fit:
gate failures are few and a failing shape must be excluded even when it is the only one.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klineage.kb.conditions import PORTABLE_FEATURES, parse_condition

__all__ = ["ALPHA", "MARGIN", "MIN_CLASS", "MIN_SUPPORT", "PERMUTATIONS", "InducedCondition", "LabelledPoint",
           "induce_condition", "induce_profitable", "permutation_p", "readable_threshold"]

#: A kept rule's out-of-sample accuracy must reach the majority-class rate plus this much.
MARGIN = 0.10
#: Fewest points a PROFITABLE_WHEN rule is induced from.
MIN_SUPPORT = 8
#: Fewest points of each label (paid, did not pay) a PROFITABLE_WHEN rule is induced from.
MIN_CLASS = 2
#: A kept rule's out-of-sample accuracy must also be unlikely by chance: in a permutation test (the
#: labels shuffled ``PERMUTATIONS`` times, the whole procedure rerun), p = (1 + shuffles doing as
#: well) / (1 + PERMUTATIONS) must be at most this.
ALPHA = 0.05
PERMUTATIONS = 49


@dataclass(frozen=True)
class LabelledPoint:
    """One observation: feature values (condition-language names), a boolean label, and the ``group``
    it is held out with when accuracy is measured out of sample (a shape, or a workload)."""

    features: Mapping[str, Any]
    label: bool
    group: str = ""


@dataclass(frozen=True)
class InducedCondition:
    """An induced rule: ``expr`` (condition language), its ``accuracy`` on the points it was induced
    from (fraction classified right), ``support`` (number of points), ``positives`` (points labelled
    True), ``depth`` (0, 1 or 2), ``clauses`` (number of clauses) and a human ``description``.

    For ``induce_profitable``: ``oos_accuracy`` (out of sample, ``validation`` says how), ``majority``
    (the majority-class rate on the points) and ``kept`` (False: no rule passed the bar; ``expr``
    is then the best in-sample tree, for diagnosis only, and must not be stored as a condition)."""

    expr: str
    accuracy: float
    support: int
    positives: int
    depth: int
    clauses: int
    description: str
    oos_accuracy: float | None = None
    majority: float | None = None
    kept: bool = True
    validation: str = ""

    @property
    def constant(self) -> bool:
        """True when the rule is ``True`` or ``False`` (no feature separates the labels)."""
        return self.depth == 0

    def to_json(self, source: str = "induced") -> dict[str, Any]:
        """The lineage document's condition object: ``{expr, source, description, accuracy, support}``
        plus ``oos_accuracy`` and ``majority`` when measured."""
        out: dict[str, Any] = {"expr": self.expr, "source": source, "description": self.description,
                               "accuracy": round(self.accuracy, 6), "support": self.support}
        if self.oos_accuracy is not None:
            out["oos_accuracy"] = round(self.oos_accuracy, 6)
        if self.majority is not None:
            out["majority"] = round(self.majority, 6)
        return out


@dataclass(frozen=True)
class _Clause:
    text: str
    negated_text: str
    mask: int  # bit i set when the clause is true on point i
    rank: tuple[int, float, int]  # (feature priority, threshold, polarity): the tie-break order
    feature: str
    op: str  # ">=", "<", "==", "!=", "is", "not"
    value: Any


@dataclass(frozen=True)
class _Leaf:
    """A side of the root: a constant (``clause`` None, ``value``) or a clause."""

    correct: int
    clause: _Clause | None
    value: bool


@dataclass(frozen=True)
class _Tree:
    expr: str
    correct: int
    depth: int
    clauses: int


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _power_text(k: int) -> str:
    if k < 20:
        return str(2**k)
    e = 10 * (k // 10)
    m = 2 ** (k - e)
    return f"2 ** {e}" if m == 1 else f"{m} * 2 ** {e}"


def _decimal_text(value: float) -> str:
    if float(value).is_integer() and abs(value) < 2**62:
        return str(int(value))
    return f"{value:.12g}"


def readable_threshold(lo: float, hi: float) -> tuple[float, str]:
    """A readable number ``t`` with ``lo < t <= hi`` and its condition-language text.

    The power of two nearest the geometric mean of ``lo`` and ``hi`` when one lies in ``(lo, hi]``
    (``2**26`` is written ``64 * 2 ** 20``, powers below 2**20 as integers), else the number with
    the fewest significant digits in that interval, nearest its middle (``3000``, ``0.5``). The text
    evaluates to exactly ``t``.
    """
    if not lo < hi:
        raise ValueError(f"readable_threshold: expected lo < hi, got {lo!r}, {hi!r}")
    if lo >= 0.5 and math.isfinite(hi):
        k_lo, k_hi = math.floor(math.log2(lo)) + 1, math.floor(math.log2(hi))
        if 2 ** (k_lo - 1) > lo:  # float rounding at an exact power
            k_lo -= 1
        ks = [k for k in range(k_lo, k_hi + 1) if lo < 2**k <= hi]
        if ks:
            target = math.log2(math.sqrt(lo * hi)) if lo > 0 else math.log2(hi)
            k = min(ks, key=lambda k: (abs(k - target), k))
            return float(2**k), _power_text(k)
    middle = (lo + hi) / 2
    scale = max(abs(lo), abs(hi))
    top = math.floor(math.log10(scale)) if scale > 0 else 0
    for digits in range(1, 16):
        step = 10.0 ** (top - digits + 1)
        first, last = math.floor(lo / step) + 1, math.floor(hi / step)
        candidates = [round(i * step, 12) for i in range(first, last + 1)] if last - first < 1000 else []
        candidates = [c for c in candidates if lo < c <= hi]
        if candidates:
            best = min(candidates, key=lambda c: (abs(c - middle), c))
            return best, _decimal_text(best)
    return hi, _decimal_text(hi)


def _priority(names: Iterable[str]) -> list[str]:
    order = {name: i for i, name in enumerate(PORTABLE_FEATURES)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _clauses(points: Sequence[LabelledPoint], names: Sequence[str]) -> list[_Clause]:
    """Every clause on ``names`` (both polarities), in tie-break order, identical masks dropped."""
    out: list[_Clause] = []
    n = len(points)
    full = (1 << n) - 1
    for prio, name in enumerate(names):
        values = [p.features[name] for p in points]
        if all(isinstance(v, bool) for v in values):
            mask = sum(1 << i for i, v in enumerate(values) if v)
            out.append(_Clause(name, f"not {name}", mask, (prio, 0.0, 0), name, "is", True))
            out.append(_Clause(f"not {name}", name, full & ~mask, (prio, 0.0, 1), name, "not", True))
        elif all(_is_number(v) for v in values):
            for lo, hi in itertools.pairwise(sorted(set(values))):
                t, text = readable_threshold(float(lo), float(hi))
                mask = sum(1 << i for i, v in enumerate(values) if v >= t)
                out.append(_Clause(f"{name} >= {text}", f"{name} < {text}", mask, (prio, t, 0), name, ">=", t))
                out.append(_Clause(f"{name} < {text}", f"{name} >= {text}", full & ~mask, (prio, t, 1), name, "<",
                                   t))
        elif all(isinstance(v, str) for v in values):
            for k, value in enumerate(sorted(set(values))):
                mask = sum(1 << i for i, v in enumerate(values) if v == value)
                out.append(_Clause(f"{name} == {value!r}", f"{name} != {value!r}", mask, (prio, float(k), 0), name,
                                   "==", value))
                out.append(_Clause(f"{name} != {value!r}", f"{name} == {value!r}", full & ~mask,
                                   (prio, float(k), 1), name, "!=", value))
        # mixed-type features cannot be split by one clause: skipped
    seen: set[int] = set()
    unique = []
    for clause in sorted(out, key=lambda c: c.rank):
        if clause.mask in (0, full) or clause.mask in seen:
            continue
        seen.add(clause.mask)
        unique.append(clause)
    return unique


def _common_features(points: Sequence[LabelledPoint], allowed: Iterable[str] | None) -> list[str]:
    allowed_set = set(PORTABLE_FEATURES if allowed is None else allowed)
    names = set.intersection(*({k for k, v in p.features.items() if v is not None} for p in points))
    return _priority(names & allowed_set)


def _best_leaf(side: int, positives: int, clauses: Sequence[_Clause]) -> _Leaf:
    """The best leaf on the points of ``side``: a constant, or a clause when it is strictly better."""
    n_pos = (side & positives).bit_count()
    n_neg = side.bit_count() - n_pos
    best = _Leaf(n_pos, None, True) if n_pos > n_neg else _Leaf(n_neg, None, False)
    for clause in clauses:
        correct = (side & ~(clause.mask ^ positives)).bit_count()
        if correct > best.correct:
            best = _Leaf(correct, clause, True)
    return best


def _implies(a: _Clause, b: _Clause) -> bool:
    """True when clause ``a`` alone guarantees clause ``b`` (same feature: a tighter bound, or an
    equality that rules the other value out)."""
    if a.text == b.text:
        return True
    if a.feature != b.feature:
        return False
    if a.op == "==" and b.op == "!=":
        return a.value != b.value
    if a.op != b.op or a.op not in (">=", "<"):
        return False
    return a.value >= b.value if a.op == ">=" else a.value <= b.value


def _negation(c: _Clause) -> _Clause:
    op = {">=": "<", "<": ">=", "==": "!=", "!=": "==", "is": "not", "not": "is"}[c.op]
    return _Clause(c.negated_text, c.text, 0, c.rank, c.feature, op, c.value)


def _conj(a: _Clause, b: _Clause) -> tuple[str, int]:
    """``a and b`` with a redundant clause dropped (``rows >= 128 and rows >= 4096`` is
    ``rows >= 4096``); returns the text and its clause count."""
    if _implies(a, b):
        return a.text, 1
    if _implies(b, a):
        return b.text, 1
    return f"{a.text} and {b.text}", 2


def _render(root: _Clause, left: _Leaf, right: _Leaf) -> tuple[str, int]:
    """The positive region of the tree (root true -> left, root false -> right) and its clause count."""
    c, not_c = root, _negation(root)
    if left.clause is None and right.clause is not None:
        if left.value:  # c or (not c and e)  ==  c or e
            return f"{c.text} or {right.clause.text}", 2
        return _conj(not_c, right.clause)
    if right.clause is None and left.clause is not None:
        if right.value:  # (c and d) or not c  ==  not c or d
            return f"{not_c.text} or {left.clause.text}", 2
        return _conj(c, left.clause)
    assert left.clause is not None and right.clause is not None
    (lt, ln), (rt, rn) = _conj(c, left.clause), _conj(not_c, right.clause)
    return " or ".join(f"({t})" if n > 1 else t for t, n in ((lt, ln), (rt, rn))), ln + rn


def _fit(points: Sequence[LabelledPoint], features: Iterable[str] | None, max_depth: int = 2) -> _Tree:
    """The most accurate, then simplest, tree of depth <= ``max_depth`` on ``points`` (non-empty)."""
    n = len(points)
    positives = sum(1 << i for i, p in enumerate(points) if p.label)
    n_pos = positives.bit_count()
    everything = (1 << n) - 1
    # depth 0: the majority (a tie predicts False: do not claim what half the evidence denies)
    best = _Tree("True" if n_pos > n - n_pos else "False", max(n_pos, n - n_pos), 0, 0)
    best_key = (best.correct, 0, 0)
    if 0 < n_pos < n and max_depth >= 1:
        clauses = _clauses(points, _common_features(points, features))
        for clause in clauses:  # depth 1
            correct = (everything & ~(clause.mask ^ positives)).bit_count()
            if (correct, -1, -1) > best_key:
                best_key, best = (correct, -1, -1), _Tree(clause.text, correct, 1, 1)
        if max_depth >= 2:
            for root in clauses:  # depth 2 (a root and its negation give the same trees; both are tried
                # because deduplication may have kept only one polarity of a partition)
                left = _best_leaf(root.mask, positives, clauses)
                right = _best_leaf(everything & ~root.mask, positives, clauses)
                if left.clause is None and right.clause is None:
                    continue  # that is a depth-0 or depth-1 tree, already considered
                expr, count = _render(root, left, right)
                key = (left.correct + right.correct, -count, -2)
                if key > best_key:
                    best_key, best = key, _Tree(expr, left.correct + right.correct, 2, count)
    parse_condition(best.expr)
    return best


def _describe(expr: str, correct: int, n: int, n_pos: int, positive: str) -> str:
    pct = 100.0 * correct / n
    if expr == "True":
        return f"{positive} on all {n} measured points: no measured point says otherwise"
    if expr == "False":
        if n_pos == 0:
            return (f"{positive} on none of the {n} measured points: not so anywhere it was measured "
                    "(no rule is invented)")
        return (f"{positive} on only {n_pos} of {n} measured points and no clause separates them; "
                f"'False' classifies {correct}/{n} ({pct:.0f}%)")
    return (f"{positive} on {n_pos} of {n} measured points; `{expr}` classifies {correct}/{n} "
            f"({pct:.0f}%) of them (decision tree of depth <= 2 over portable features)")


def induce_condition(points: Sequence[LabelledPoint], features: Iterable[str] | None = None,
                     positive: str = "held") -> InducedCondition | None:
    """The most accurate, then simplest, depth-<=2 rule separating True-labelled points from the rest,
    judged on the points themselves (in sample; what VALID_WHEN uses).

    ``features``: the names the rule may use (default: ``PORTABLE_FEATURES``); only those present in
    every point are considered. ``positive`` words the description ("passed the gates"). Returns
    None for no points. All points True gives ``"True"``; all False gives ``"False"`` with a
    description saying that it held nowhere (no rule is invented). The returned ``expr`` always
    parses in ``kb.conditions``; evaluated on each point's features it gives exactly the predictions
    behind ``accuracy``.
    """
    n = len(points)
    if n == 0:
        return None
    tree = _fit(points, features)
    n_pos = sum(p.label for p in points)
    return InducedCondition(tree.expr, tree.correct / n, n, n_pos, tree.depth, tree.clauses,
                            _describe(tree.expr, tree.correct, n, n_pos, positive))


def _out_of_sample(points: Sequence[LabelledPoint], features: Iterable[str] | None, max_depth: int) -> float:
    """Fraction of points predicted right by the tree fitted without their group (unknown is wrong)."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(p.group, []).append(i)
    right = 0
    for members in groups.values():
        held = set(members)
        train = [p for i, p in enumerate(points) if i not in held]
        expr = _fit(train, features, max_depth).expr
        compiled = parse_condition(expr)
        right += sum(compiled.evaluate(points[i].features).value is points[i].label for i in members)
    return right / len(points)


def _best_out_of_sample(points: Sequence[LabelledPoint], features: Iterable[str] | None) -> tuple[int, float]:
    """The tree depth (1 or 2) with the better out-of-sample accuracy (1 on a tie), and that accuracy."""
    oos1 = _out_of_sample(points, features, 1)
    oos2 = _out_of_sample(points, features, 2)
    return (2, oos2) if oos2 > oos1 else (1, oos1)


def permutation_p(points: Sequence[LabelledPoint], features: Iterable[str] | None, observed: float,
                  permutations: int = PERMUTATIONS, alpha: float = ALPHA, seed: int = 0) -> float:
    """How likely the out-of-sample accuracy ``observed`` is by chance: the labels are shuffled
    ``permutations`` times (a fixed ``seed``: the same points give the same answer) and the whole
    procedure (both depths, every fold) rerun; returns (1 + shuffles reaching ``observed``) /
    (1 + permutations). Stops early once the answer exceeds ``alpha`` (then it returns a value >
    ``alpha``, not the full estimate)."""
    rng = random.Random(seed)
    labels = [p.label for p in points]
    reached = 0
    for _ in range(permutations):
        rng.shuffle(labels)
        shuffled = [LabelledPoint(p.features, label, p.group) for p, label in zip(points, labels, strict=True)]
        if _best_out_of_sample(shuffled, features)[1] >= observed - 1e-12:
            reached += 1
            if (1 + reached) / (1 + permutations) > alpha:
                break
    return (1 + reached) / (1 + permutations)


def induce_profitable(points: Sequence[LabelledPoint], features: Iterable[str] | None = None,
                      positive: str = "paid", margin: float = MARGIN, min_support: int = MIN_SUPPORT,
                      min_class: int = MIN_CLASS, validation: str = "", alpha: float = ALPHA
                      ) -> InducedCondition | None:
    """A PROFITABLE_WHEN rule kept only when it predicts held-out groups (module docstring).

    ``points`` carry their ``group`` (a shape, or a workload); ``validation`` names the scheme for the
    description (e.g. "leave-one-workload-out"). Returns None for no points; otherwise an
    InducedCondition whose ``oos_accuracy`` and ``majority`` are set and whose ``kept`` says whether
    the rule passed: at least ``min_support`` points, ``min_class`` of each label, two groups, a
    non-constant tree, out-of-sample accuracy >= majority + ``margin``, and a ``permutation_p`` <=
    ``alpha`` (shuffled labels rarely do as well). A rule that is not kept
    has a description saying plainly "<positive> on x of n measured shapes; no rule separates them"
    (or that it paid on all / none of them), with the numbers behind that verdict.
    """
    n = len(points)
    if n == 0:
        return None
    n_pos = sum(p.label for p in points)
    majority = max(n_pos, n - n_pos) / n
    scheme = validation or "leave-one-group-out"
    n_groups = len({p.group for p in points})
    if n_pos in (0, n):
        what = "all" if n_pos == n else "none"
        tree = _fit(points, features, 0)
        text = (f"{positive} on {what} of the {n} measured shapes"
                + ("; no rule is needed" if n_pos == n else "; no rule is invented"))
        return InducedCondition(tree.expr, 1.0, n, n_pos, 0, 0, text, None, majority, False, scheme)
    if n < min_support or min(n_pos, n - n_pos) < min_class or n_groups < 2:
        tree = _fit(points, features)
        text = (f"{positive} on {n_pos} of {n} measured shapes; no rule separates them (too little evidence "
                f"to test one: a rule needs >= {min_support} shapes, >= {min_class} of each outcome and "
                f"2 groups to hold out; {n_groups} group(s))")
        return InducedCondition(tree.expr, tree.correct / n, n, n_pos, tree.depth, tree.clauses, text, None,
                                majority, False, scheme)
    depth, oos = _best_out_of_sample(points, features)
    tree = _fit(points, features, depth)
    beats = tree.depth > 0 and oos >= majority + margin - 1e-12
    chance = permutation_p(points, features, oos, alpha=alpha) if beats else 1.0
    kept = beats and chance <= alpha
    where = f"{scheme}, {n_groups} folds"
    if kept:
        text = (f"{positive} on {n_pos} of {n} measured shapes; `{tree.expr}` classifies {tree.correct}/{n} "
                f"in sample and {100 * oos:.0f}% out of sample ({where}) against a majority rate of "
                f"{100 * majority:.0f}% (permutation p {chance:.2g})")
    else:
        bar = f"a rule must beat it by {100 * margin:.0f} points" + (
            f" and beyond chance: permutation p {chance:.2g} > {alpha:g}" if beats else "")
        text = (f"{positive} on {n_pos} of {n} measured shapes; no rule separates them (the best tree "
                f"predicts {100 * oos:.0f}% of held-out shapes ({where}) against a majority rate of "
                f"{100 * majority:.0f}%; {bar})")
    return InducedCondition(tree.expr, tree.correct / n, n, n_pos, tree.depth, tree.clauses, text, oos,
                            majority, kept, scheme)
