"""The profitability prediction: agents' verified trials on new code outvote the lineage's rules, the rules
outvote the lineage median, and search follows the same prediction (no cap, no demotion) once trials say a
skill pays."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.profitability import MIN_TRIALS, predict_profit
from klineage.kb.service import KnowledgeBase
from klineage.schema.graph import GraphBatch, Relationship
from klineage.schema.records import Anchor, Condition, Effect, Skill

VEC = tuple([1.0] + [0.0] * 383)


def _skill(op: str, speedups: list[float], paid: int = 0, verified: int = 0) -> Skill:
    return Skill(op, op, "synthetic", Anchor("", ""), "c", {"operator": op}, effect=Effect.of(speedups),
                 support_steps=3, support_lineages=1, embedding=VEC, applied=verified, verified=verified, paid=paid)


def test_trials_outvote_rules_once_there_are_enough() -> None:
    skill = _skill("autotune", [1.4], paid=MIN_TRIALS, verified=MIN_TRIALS)
    got = predict_profit(skill, [False, False, False])
    assert (got.pays, got.source) == (True, "trials")
    assert got.basis == f"paid on {MIN_TRIALS} of {MIN_TRIALS} verified trials on new code"
    few = predict_profit(replace(skill, paid=MIN_TRIALS - 1, verified=MIN_TRIALS - 1), [False, False, False])
    assert (few.pays, few.source) == (False, "rule")


def test_trials_that_mostly_did_not_pay_predict_no_gain_even_when_the_rule_holds() -> None:
    got = predict_profit(_skill("tile-size", [1.5], paid=1, verified=4), [True, True])
    assert (got.pays, got.source) == (False, "trials")
    tie = predict_profit(_skill("tile-size", [1.5], paid=2, verified=4), [True])
    assert tie.pays is False  # a tie is not a majority for a gain


def test_rules_vote_per_shape_and_unknown_shapes_do_not_vote() -> None:
    skill = _skill("pipelining", [0.9])
    assert predict_profit(skill, [True, None, None, False]).pays is True  # 1 of 2 known shapes false
    assert predict_profit(skill, [False, None, None, False, True]).pays is False
    only_unknown = predict_profit(skill, [None, None])
    assert (only_unknown.pays, only_unknown.source) == (False, "lineage")  # falls through to the median 0.9


def test_without_rules_or_trials_the_lineage_median_decides_and_nothing_predicts_nothing() -> None:
    assert predict_profit(_skill("exp2", [1.05, 1.06])).pays is True
    assert predict_profit(_skill("rsqrt", [1.0])).pays is False
    nothing = predict_profit(None)
    assert (nothing.pays, nothing.source) == (None, "none")
    explicit = predict_profit(None, (), trials=(3, 4))
    assert (explicit.pays, explicit.source) == (True, "trials")


def test_search_lifts_the_cap_of_a_false_rule_when_trials_paid(tmp_path: Path) -> None:
    rule = Condition("bytes < 1024", "profitable", "induced")
    doubted = _skill("doubted", [2.0])
    trusted = _skill("trusted", [2.0], paid=4, verified=5)
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([doubted.to_node(), trusted.to_node(), rule.to_node()],
                               [Relationship("PROFITABLE_WHEN", doubted.id, rule.id),
                                Relationship("PROFITABLE_WHEN", trusted.id, rule.id)]))
    hits = {h.skill.operator: h for h in KnowledgeBase(store, embedder=None).search(context={"bytes": 4096},
                                                                                       limit=5)}
    assert hits["doubted"].unprofitable and hits["doubted"].expected_gain == 1.0
    assert "capped at 1.0×" in hits["doubted"].gain_basis
    assert not hits["trusted"].unprofitable and hits["trusted"].expected_gain == 2.0
    assert "outvoted by trials on new code (paid on 4 of 5 verified trials on new code)" in hits["trusted"].gain_basis


def test_search_expects_what_trials_on_new_code_measured_once_there_are_enough(tmp_path: Path) -> None:
    lineage_only = _skill("lineage-only", [1.5])
    tried = replace(_skill("tried", [1.0], paid=3, verified=4), field_effect=Effect.of([2.5, 2.0, 3.0, 0.9]))
    few = replace(_skill("few", [1.2], paid=2, verified=2), field_effect=Effect.of([4.0, 4.0]))
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([s.to_node() for s in (lineage_only, tried, few)]))
    hits = {h.skill.operator: h for h in KnowledgeBase(store, embedder=None).search(context={"M": 64}, limit=5)}
    assert hits["tried"].expected_gain == 2.25
    assert hits["tried"].gain_basis == "2.25× median of 4 verified trials by agents on new code"
    assert hits["few"].expected_gain == 1.2  # two trials are not enough: the lineage's median stands
    assert hits["lineage-only"].expected_gain == 1.5
    ranked = KnowledgeBase(store, embedder=None).search(context={"M": 64}, limit=5)
    assert ranked[0].skill.operator == "tried"
