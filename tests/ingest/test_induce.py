"""Condition induction on hand-made points whose correct tree is known, including ties and noise; the
honest PROFITABLE_WHEN gate (out-of-sample accuracy against the majority rate) and readable thresholds."""

from __future__ import annotations

import random

import pytest

from klineage.ingest.induce import (
    MARGIN,
    LabelledPoint,
    _fit,
    induce_condition,
    induce_profitable,
    readable_threshold,
)
from klineage.kb.conditions import PORTABLE_FEATURES, evaluate, parse_condition, validate_condition


def pts(rows: list[tuple[dict, bool]]) -> list[LabelledPoint]:
    return [LabelledPoint(f, label) for f, label in rows]


def predictions_agree(expr: str, points: list[LabelledPoint]) -> float:
    right = sum(evaluate(expr, p.features).value is p.label for p in points)
    return right / len(points)


def test_single_threshold_is_a_readable_number_between_the_observed_values() -> None:
    points = pts([({"reduce_len": 512}, False), ({"reduce_len": 1024}, False), ({"reduce_len": 4096}, True),
                  ({"reduce_len": 8192}, True)])
    rule = induce_condition(points)
    assert rule is not None
    assert rule.expr == "reduce_len >= 2048" and rule.depth == 1 and rule.accuracy == 1.0 and rule.support == 4
    assert rule.positives == 2 and "2 of 4" in rule.description
    validate_condition(rule.expr)


@pytest.mark.parametrize(("lo", "hi", "text"), [
    (33619968, 93406208, "64 * 2 ** 20"),  # 2**26: the power of two nearest the geometric mean
    (1000, 4096, "2048"),
    (3000, 5000, "4096"),
    (2**29 + 1, 2**31, "2 ** 30"),
    (1363001, 1790265, "1600000"),  # no power of two in between: fewest significant digits
    (8192, 12288, "10000"),
    (0.3, 0.7, "0.5"),
    (1000, 1001, "1001"),
])
def test_readable_threshold(lo: float, hi: float, text: str) -> None:
    value, printed = readable_threshold(lo, hi)
    assert printed == text and lo < value <= hi
    assert parse_condition(f"x >= {printed}").evaluate({"x": value}).value is True
    assert parse_condition(f"x >= {printed}").evaluate({"x": lo}).value is False
    with pytest.raises(ValueError):
        readable_threshold(5, 5)


def test_all_positive_is_true_and_all_negative_is_false_with_a_clear_description() -> None:
    yes = induce_condition(pts([({"rows": 1}, True), ({"rows": 2}, True)]))
    assert yes is not None and yes.expr == "True" and yes.accuracy == 1.0 and yes.depth == 0
    no = induce_condition(pts([({"rows": 1}, False), ({"rows": 2}, False)]), positive="paid")
    assert no is not None and no.expr == "False" and "none of the 2" in no.description
    assert induce_condition([]) is None and induce_profitable([]) is None


def test_categorical_and_boolean_features() -> None:
    dtype = pts([({"dtype": "bf16"}, True), ({"dtype": "fp16"}, False), ({"dtype": "fp32"}, False)])
    assert induce_condition(dtype, features=["dtype"]).expr == "dtype == 'bf16'"  # type: ignore[union-attr]
    causal = pts([({"causal": True}, False), ({"causal": False}, True), ({"causal": True}, False)])
    rule = induce_condition(causal)
    assert rule is not None and rule.expr == "not causal" and rule.accuracy == 1.0


def test_only_portable_features_are_used_by_default() -> None:
    # M separates the labels perfectly, bytes does not: the rule must still not be written over M
    points = pts([({"M": 1024, "bytes": 10}, False), ({"M": 2048, "bytes": 30}, False),
                  ({"M": 4096, "bytes": 20}, True), ({"M": 8192, "bytes": 40}, True)])
    rule = induce_condition(points)
    assert rule is not None and "M" not in parse_condition(rule.expr).names
    assert parse_condition(rule.expr).names <= set(PORTABLE_FEATURES)
    assert induce_condition(points, features=["M"]).expr == "M >= 4096"  # type: ignore[union-attr]


def test_depth_two_conjunction_is_found_and_evaluates_as_trained() -> None:
    rows = []
    for r in (1024, 4096, 8192):
        for width in (2, 4):
            rows.append(({"rows": r, "dtype_bytes": width}, r >= 4096 and width == 2))
    points = pts(rows)
    rule = induce_condition(points)
    assert rule is not None and rule.depth == 2 and rule.accuracy == 1.0 and rule.clauses == 2
    assert set(rule.expr.split(" and ")) == {"rows >= 2048", "dtype_bytes < 4"}
    assert predictions_agree(rule.expr, points) == 1.0


def test_simplest_rule_wins_when_as_accurate() -> None:
    points = pts([({"reduce_len": 256}, False), ({"reduce_len": 512}, False), ({"reduce_len": 1024}, True),
                  ({"reduce_len": 2048}, True), ({"reduce_len": 4096}, True), ({"reduce_len": 8192}, True)])
    rule = induce_condition(points)
    assert rule is not None and rule.expr == "reduce_len >= 1024" and rule.depth == 1


def test_noise_and_ties_lower_the_accuracy_honestly() -> None:
    points = pts([({"rows": 4096}, True), ({"rows": 4096}, False), ({"rows": 8192}, True), ({"rows": 8192}, True),
                  ({"rows": 1024}, False), ({"rows": 1024}, False)])
    rule = induce_condition(points)
    assert rule is not None and rule.accuracy == 5 / 6
    assert predictions_agree(rule.expr, points) == rule.accuracy
    even = induce_condition(pts([({"rows": 1}, True), ({"rows": 1}, False)]))
    assert even is not None and even.expr == "False" and even.accuracy == 0.5  # a tie claims nothing


def test_reported_accuracy_matches_evaluation_on_random_points() -> None:
    rng = random.Random(7)
    for _ in range(20):
        points = [LabelledPoint({"rows": rng.choice([256, 1024, 4096]), "reduce_len": rng.choice([64, 512, 8192]),
                                 "dtype_bytes": rng.choice([2, 4])}, rng.random() < 0.5)
                  for _ in range(12)]
        rule = induce_condition(points)
        assert rule is not None and rule.depth <= 2
        validate_condition(rule.expr)
        assert abs(predictions_agree(rule.expr, points) - rule.accuracy) < 1e-12
        majority = max(sum(p.label for p in points), sum(not p.label for p in points)) / 12
        assert rule.accuracy >= majority


def test_a_bound_implied_by_another_on_the_same_feature_is_not_printed() -> None:
    rows = []
    for r in (16, 64, 256, 1024, 4096, 16384):
        for width in (2, 4):
            rows.append(({"rows": r, "dtype_bytes": width}, r >= 3072 or (r < 88 and width == 4)))
    points = pts(rows)
    rule = induce_condition(points)
    assert rule is not None and rule.accuracy == 1.0
    assert rule.expr.count("rows >=") <= 1 and rule.clauses == rule.expr.count(" and ") + rule.expr.count(" or ") + 1
    assert predictions_agree(rule.expr, points) == 1.0
    validate_condition(rule.expr)


# ------------------------------------------------------------------------------------ PROFITABLE_WHEN


def shapes(n: int, paid: object, seed: int = 0, workload: str | None = None) -> list[LabelledPoint]:
    """``n`` shapes with distinct bytes and rows (one group each, or one group per ``workload``)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        b = 2 ** (16 + i) + rng.randrange(1000)
        f = {"bytes": b, "rows": rng.choice([64, 256, 1024, 4096, 16384]), "dtype_bytes": 2}
        label = paid(f, rng) if callable(paid) else bool(paid)
        out.append(LabelledPoint(f, label, workload or f"shape{i}"))
    return out


def test_a_real_threshold_with_enough_shapes_is_kept_with_its_out_of_sample_accuracy() -> None:
    points = shapes(16, lambda f, _: f["bytes"] >= 2**26)
    rule = induce_profitable(points, validation="leave-one-shape-out")
    assert rule is not None and rule.kept
    assert rule.expr == "bytes >= 64 * 2 ** 20" and rule.accuracy == 1.0
    assert rule.majority == pytest.approx(10 / 16)
    assert rule.oos_accuracy is not None and rule.oos_accuracy >= rule.majority + MARGIN
    assert "out of sample" in rule.description and "leave-one-shape-out" in rule.description
    doc = rule.to_json()
    assert doc["oos_accuracy"] == pytest.approx(rule.oos_accuracy) and doc["majority"] == pytest.approx(10 / 16)


def test_out_of_sample_accuracy_is_what_refitting_without_each_group_predicts() -> None:
    points = shapes(14, lambda f, r: (f["bytes"] >= 2**22) != (r.random() < 0.2), seed=5)
    rule = induce_profitable(points)
    assert rule is not None and rule.oos_accuracy is not None
    by_depth = []
    for depth in (1, 2):  # recomputed by hand: refit without each shape, predict it; the better depth is reported
        right = sum(evaluate(_fit(points[:i] + points[i + 1:], None, depth).expr, p.features).value is p.label
                    for i, p in enumerate(points))
        by_depth.append(right / len(points))
    assert rule.oos_accuracy == pytest.approx(max(by_depth))


def test_noise_labels_give_no_rule_and_say_so() -> None:
    for seed in range(5):
        points = shapes(20, lambda _f, r: r.random() < 0.5, seed=seed)
        rule = induce_profitable(points)
        assert rule is not None and rule.majority is not None and rule.oos_accuracy is not None
        n_pos = sum(p.label for p in points)
        if not rule.kept:
            assert f"on {n_pos} of 20 measured shapes; no rule separates them" in rule.description
        else:  # a lucky split must at least pass the bar it claims
            assert rule.oos_accuracy >= rule.majority + MARGIN
    kept = sum(bool(induce_profitable(shapes(20, lambda _f, r: r.random() < 0.5, seed=s)).kept)  # type: ignore[union-attr]
               for s in range(20))
    assert kept <= 2  # noise rarely passes (permutation test at 0.05); the old in-sample tree always did


def test_too_little_evidence_or_one_outcome_gives_no_rule() -> None:
    few = induce_profitable(shapes(6, lambda f, _: f["bytes"] >= 2**19))
    assert few is not None and not few.kept and "too little evidence" in few.description
    lone = induce_profitable(shapes(12, lambda f, _: f["bytes"] >= 2**27))  # 1 of 12 paid
    assert lone is not None and not lone.kept and "1 of 12" in lone.description and lone.oos_accuracy is None
    everywhere = induce_profitable(shapes(9, True), positive="paid")
    assert everywhere is not None and not everywhere.kept and everywhere.description.startswith("paid on all")
    nowhere = induce_profitable(shapes(9, False), positive="paid")
    assert nowhere is not None and not nowhere.kept and "none of the 9" in nowhere.description


def test_grouping_by_workload_rejects_a_rule_that_does_not_transfer() -> None:
    # within each workload, large shapes pay; but the workloads' size ranges are disjoint and the
    # second workload never pays: bytes separates the pooled points in sample only by memorizing
    # which workload a point came from
    a = shapes(8, lambda f, _: f["bytes"] >= 2**20, seed=1, workload="a")
    b = [LabelledPoint({**p.features, "bytes": p.features["bytes"] * 2**10}, False, "b")
         for p in shapes(8, True, seed=2)]
    pooled = a + b
    by_shape = [LabelledPoint(p.features, p.label, f"{p.group}{i}") for i, p in enumerate(pooled)]
    rule_by_shape = induce_profitable(by_shape)
    rule_by_workload = induce_profitable(pooled, validation="leave-one-workload-out")
    assert rule_by_shape is not None and rule_by_workload is not None
    assert rule_by_workload.oos_accuracy is not None and rule_by_shape.oos_accuracy is not None
    assert rule_by_workload.oos_accuracy < rule_by_shape.oos_accuracy
    assert not rule_by_workload.kept and "2 folds" in rule_by_workload.description
