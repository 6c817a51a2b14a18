"""Induce a readable condition from labelled points: a decision tree of depth <= 2 (pure functions).

Used for both kinds of skill condition (DESIGN.md, "Conditions"): ``PROFITABLE_WHEN`` (label: the
optimization paid on this shape) and ``VALID_WHEN`` (label: the gates passed on this shape).

The tree is found by exhaustive search, so the result is the best tree, not a greedy one:

* a *clause* is ``feature op constant``: ``f >= t`` / ``f < t`` for a numeric feature, with ``t`` the
  midpoint of two neighbouring observed values; ``f == 'v'`` / ``f != 'v'`` for a categorical one;
  ``f`` / ``not f`` for a boolean one;
* depth 0 is a constant (``True`` or ``False``), depth 1 a single clause, depth 2 a root clause
  whose two sides are each a constant or a clause;
* trees are ranked by accuracy on the points, then simplicity (fewer clauses, then less depth), then
  a fixed feature order (the vocabulary order of ``kb.conditions.PROBLEM_FEATURES``: M, N, K, ...,
  before derived features such as numel or flops), then the smaller threshold;
* only features that every point has (not None) are used, so the rule is never *unknown* on its own
  evidence; a point set drawn from several workloads (GEMM and softmax) therefore splits on what
  they share (dtype, numel, bytes).

The tree is printed as an expression of the condition language (``kb.conditions``): clauses joined
by ``and`` / ``or``, with parentheses, e.g. ``K >= 2304`` or ``(M >= 3072 and K >= 768) or (M < 3072
and dtype == 'fp32')``. Every printed expression is checked with ``kb.conditions.parse_condition``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klineage.kb.conditions import FEATURES, PROBLEM_FEATURES, parse_condition

__all__ = ["InducedCondition", "LabelledPoint", "induce_condition"]


@dataclass(frozen=True)
class LabelledPoint:
    """One observation: feature values (condition-language names) and a boolean label."""

    features: Mapping[str, Any]
    label: bool


@dataclass(frozen=True)
class InducedCondition:
    """An induced rule: ``expr`` (condition language), its ``accuracy`` on the points it was induced
    from (fraction classified right), ``support`` (number of points), ``positives`` (points labelled
    True), ``depth`` (0, 1 or 2), ``clauses`` (number of clauses) and a human ``description``."""

    expr: str
    accuracy: float
    support: int
    positives: int
    depth: int
    clauses: int
    description: str

    @property
    def constant(self) -> bool:
        """True when the rule is ``True`` or ``False`` (no feature separates the labels)."""
        return self.depth == 0

    def to_json(self, source: str = "induced") -> dict[str, Any]:
        """The lineage document's condition object: ``{expr, source, description, accuracy, support}``."""
        return {"expr": self.expr, "source": source, "description": self.description,
                "accuracy": round(self.accuracy, 6), "support": self.support}


@dataclass(frozen=True)
class _Clause:
    text: str
    negated_text: str
    mask: int  # bit i set when the clause is true on point i
    rank: tuple[int, float, int]  # (feature priority, threshold, polarity): the tie-break order


@dataclass(frozen=True)
class _Leaf:
    """A side of the root: a constant (``clause`` None, ``value``) or a clause."""

    correct: int
    clause: _Clause | None
    value: bool


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt_threshold(lo: float, hi: float) -> str:
    mid = (lo + hi) / 2
    if float(mid).is_integer() and abs(mid) < 2**62:
        return str(int(mid))
    short = f"{mid:.6g}"
    if "e" not in short and lo < float(short) <= hi:
        return short
    return repr(float(mid))


def _priority(names: Iterable[str]) -> list[str]:
    order = {name: i for i, name in enumerate(PROBLEM_FEATURES)}
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
            out.append(_Clause(name, f"not {name}", mask, (prio, 0.0, 0)))
            out.append(_Clause(f"not {name}", name, full & ~mask, (prio, 0.0, 1)))
        elif all(_is_number(v) for v in values):
            distinct = sorted(set(values))
            for lo, hi in itertools.pairwise(distinct):
                t = _fmt_threshold(lo, hi)
                mask = sum(1 << i for i, v in enumerate(values) if v >= float(t))
                out.append(_Clause(f"{name} >= {t}", f"{name} < {t}", mask, (prio, float(t), 0)))
                out.append(_Clause(f"{name} < {t}", f"{name} >= {t}", full & ~mask, (prio, float(t), 1)))
        elif all(isinstance(v, str) for v in values):
            for k, value in enumerate(sorted(set(values))):
                mask = sum(1 << i for i, v in enumerate(values) if v == value)
                out.append(_Clause(f"{name} == {value!r}", f"{name} != {value!r}", mask, (prio, float(k), 0)))
                out.append(_Clause(f"{name} != {value!r}", f"{name} == {value!r}", full & ~mask,
                                   (prio, float(k), 1)))
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
    allowed_set = set(FEATURES if allowed is None else allowed)
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


_COMPARISON = re.compile(r"^(\w+) (>=|<|==|!=) (.+)$")


def _implies(a: str, b: str) -> bool:
    """True when clause ``a`` alone guarantees clause ``b`` (same feature: a tighter bound, or an
    equality that rules the other value out)."""
    if a == b:
        return True
    ma, mb = _COMPARISON.match(a), _COMPARISON.match(b)
    if ma is None or mb is None or ma[1] != mb[1]:
        return False
    if ma[2] == "==" and mb[2] == "!=":
        return ma[3] != mb[3]
    if ma[2] != mb[2] or ma[2] not in (">=", "<"):
        return False
    ta, tb = float(ma[3]), float(mb[3])
    return ta >= tb if ma[2] == ">=" else ta <= tb


def _conj(a: str, b: str) -> tuple[str, int]:
    """``a and b`` with a redundant clause dropped (``rows >= 88.5 and rows >= 3072`` is
    ``rows >= 3072``); returns the text and its clause count."""
    if _implies(a, b):
        return a, 1
    if _implies(b, a):
        return b, 1
    return f"{a} and {b}", 2


def _render(root: _Clause, left: _Leaf, right: _Leaf) -> tuple[str, int]:
    """The positive region of the tree (root true -> left, root false -> right) and its clause count."""
    c, not_c = root.text, root.negated_text
    if left.clause is None and right.clause is not None:
        if left.value:  # c or (not c and e)  ==  c or e
            return f"{c} or {right.clause.text}", 2
        return _conj(not_c, right.clause.text)
    if right.clause is None and left.clause is not None:
        if right.value:  # (c and d) or not c  ==  not c or d
            return f"{not_c} or {left.clause.text}", 2
        return _conj(c, left.clause.text)
    assert left.clause is not None and right.clause is not None
    (lt, ln), (rt, rn) = _conj(c, left.clause.text), _conj(not_c, right.clause.text)
    return " or ".join(f"({t})" if n > 1 else t for t, n in ((lt, ln), (rt, rn))), ln + rn


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
            f"({pct:.0f}%) of them (decision tree of depth <= 2, thresholds at midpoints)")


def induce_condition(points: Sequence[LabelledPoint], features: Iterable[str] | None = None,
                     positive: str = "held") -> InducedCondition | None:
    """The most accurate, then simplest, depth-<=2 rule separating True-labelled points from the rest.

    ``features``: the names the rule may use (default: the condition-language vocabulary); only
    those present in every point are considered. ``positive`` words the description ("paid",
    "passed the gates"). Returns None for no points. All points True gives ``"True"``; all False gives
    ``"False"`` with a description saying that it held nowhere (no rule is invented). The returned
    ``expr`` always parses in ``kb.conditions``; evaluated on each point's features it gives exactly
    the predictions behind ``accuracy``.
    """
    n = len(points)
    if n == 0:
        return None
    positives = sum(1 << i for i, p in enumerate(points) if p.label)
    n_pos = positives.bit_count()
    everything = (1 << n) - 1
    # depth 0: the majority (a tie predicts False: do not claim what half the evidence denies)
    best_expr = "True" if n_pos > n - n_pos else "False"
    best_key = (max(n_pos, n - n_pos), 0, 0)
    best_depth, best_clauses = 0, 0
    if 0 < n_pos < n:
        clauses = _clauses(points, _common_features(points, features))
        for clause in clauses:  # depth 1
            correct = (everything & ~(clause.mask ^ positives)).bit_count()
            if (correct, -1, -1) > best_key:
                best_key, best_expr, best_depth, best_clauses = (correct, -1, -1), clause.text, 1, 1
        for root in clauses:  # depth 2 (a root and its negation give the same trees; both are tried
            # because deduplication may have kept only one polarity of a partition)
            left = _best_leaf(root.mask, positives, clauses)
            right = _best_leaf(everything & ~root.mask, positives, clauses)
            if left.clause is None and right.clause is None:
                continue  # that is a depth-0 or depth-1 tree, already considered
            expr, count = _render(root, left, right)
            key = (left.correct + right.correct, -count, -2)
            if key > best_key:
                best_key, best_expr, best_depth, best_clauses = key, expr, 2, count
    parse_condition(best_expr)
    correct = best_key[0]
    return InducedCondition(best_expr, correct / n, n, n_pos, best_depth, best_clauses,
                            _describe(best_expr, correct, n, n_pos, positive))
