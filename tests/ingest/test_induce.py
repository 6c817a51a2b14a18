"""Condition induction on hand-made points whose correct tree is known, including ties and noise."""

from __future__ import annotations

import random

from klineage.ingest.induce import LabelledPoint, induce_condition
from klineage.kb.conditions import evaluate, validate_condition


def pts(rows: list[tuple[dict, bool]]) -> list[LabelledPoint]:
    return [LabelledPoint(f, label) for f, label in rows]


def predictions_agree(expr: str, points: list[LabelledPoint]) -> float:
    right = sum(evaluate(expr, p.features).value is p.label for p in points)
    return right / len(points)


def test_single_threshold_at_the_midpoint() -> None:
    points = pts([({"K": 512}, False), ({"K": 1024}, False), ({"K": 4096}, True), ({"K": 8192}, True)])
    rule = induce_condition(points)
    assert rule is not None
    assert rule.expr == "K >= 2560" and rule.depth == 1 and rule.accuracy == 1.0 and rule.support == 4
    assert rule.positives == 2 and "2 of 4" in rule.description
    validate_condition(rule.expr)


def test_all_positive_is_true_and_all_negative_is_false_with_a_clear_description() -> None:
    yes = induce_condition(pts([({"M": 1}, True), ({"M": 2}, True)]))
    assert yes is not None and yes.expr == "True" and yes.accuracy == 1.0 and yes.depth == 0
    no = induce_condition(pts([({"M": 1}, False), ({"M": 2}, False)]), positive="paid")
    assert no is not None and no.expr == "False" and "none of the 2" in no.description
    assert evaluate("True", {}).value is True and evaluate("False", {}).value is False
    assert induce_condition([]) is None


def test_categorical_and_boolean_features() -> None:
    dtype = pts([({"dtype": "bf16"}, True), ({"dtype": "fp16"}, False), ({"dtype": "fp32"}, False)])
    assert induce_condition(dtype).expr == "dtype == 'bf16'"  # type: ignore[union-attr]
    causal = pts([({"causal": True}, False), ({"causal": False}, True), ({"causal": True}, False)])
    rule = induce_condition(causal)
    assert rule is not None and rule.expr == "not causal" and rule.accuracy == 1.0


def test_depth_two_conjunction_is_found_and_evaluates_as_trained() -> None:
    rows = []
    for m in (1024, 4096, 8192):
        for dt in ("bf16", "fp32"):
            rows.append(({"M": m, "dtype": dt}, m >= 4096 and dt == "bf16"))
    points = pts(rows)
    rule = induce_condition(points)
    assert rule is not None and rule.depth == 2 and rule.accuracy == 1.0 and rule.clauses == 2
    assert set(rule.expr.split(" and ")) == {"M >= 2560", "dtype == 'bf16'"}
    assert predictions_agree(rule.expr, points) == 1.0


def test_simplest_rule_wins_when_as_accurate() -> None:
    # one mislabelled point: no depth-2 tree on K alone can fix it without a second feature,
    # and a depth-2 tree that is no more accurate must lose to the single clause
    points = pts([({"K": 256}, False), ({"K": 512}, False), ({"K": 1024}, True), ({"K": 2048}, True),
                  ({"K": 4096}, True), ({"K": 8192}, True)])
    rule = induce_condition(points)
    assert rule is not None and rule.expr == "K >= 768" and rule.depth == 1


def test_noise_and_ties_lower_the_accuracy_honestly() -> None:
    # the same features labelled both ways (a tie) cannot be separated by any rule
    points = pts([({"M": 4096}, True), ({"M": 4096}, False), ({"M": 8192}, True), ({"M": 8192}, True),
                  ({"M": 1024}, False), ({"M": 1024}, False)])
    rule = induce_condition(points)
    assert rule is not None and rule.accuracy == 5 / 6
    assert predictions_agree(rule.expr, points) == rule.accuracy
    even = induce_condition(pts([({"M": 1}, True), ({"M": 1}, False)]))
    assert even is not None and even.expr == "False" and even.accuracy == 0.5  # a tie claims nothing


def test_feature_order_breaks_ties_and_only_shared_features_are_used() -> None:
    points = pts([({"M": 1024, "numel": 10, "rows": 1}, False), ({"M": 8192, "numel": 20}, True)])
    rule = induce_condition(points)
    assert rule is not None and rule.expr.startswith("M ")  # M before the derived numel; rows not shared


def test_reported_accuracy_matches_evaluation_on_random_points() -> None:
    rng = random.Random(7)
    for _ in range(20):
        points = [LabelledPoint({"M": rng.choice([256, 1024, 4096]), "K": rng.choice([64, 512, 8192]),
                                 "dtype": rng.choice(["bf16", "fp32"])}, rng.random() < 0.5)
                  for _ in range(12)]
        rule = induce_condition(points)
        assert rule is not None and rule.depth <= 2
        validate_condition(rule.expr)
        assert abs(predictions_agree(rule.expr, points) - rule.accuracy) < 1e-12
        majority = max(sum(p.label for p in points), sum(not p.label for p in points)) / 12
        assert rule.accuracy >= majority


def test_a_bound_implied_by_another_on_the_same_feature_is_not_printed() -> None:
    # positives: rows >= 3072 (any dtype) and tiny fp32 rows; the tree's root is rows >= 88.5,
    # whose true side needs rows >= 3072: "rows >= 88.5 and rows >= 3072" must print as one clause
    rows = []
    for r in (16, 64, 256, 1024, 4096, 16384):
        for dt in ("bf16", "fp32"):
            rows.append(({"rows": r, "dtype": dt}, r >= 3072 or (r < 88.5 and dt == "fp32")))
    points = pts(rows)
    rule = induce_condition(points)
    assert rule is not None and rule.accuracy == 1.0
    assert rule.expr.count("rows >=") <= 1 and rule.clauses == rule.expr.count(" and ") + rule.expr.count(" or ") + 1
    assert predictions_agree(rule.expr, points) == 1.0
    validate_condition(rule.expr)
