"""Skill extraction on a synthetic lineage (an accepted step and a rejection of each gate kind) and on
the sample fixtures; merging across lineages; ENABLES on a real expert kernel."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from klineage.ingest.extract import (
    enables_of,
    extract_skills,
    merge_skills,
    shape_features,
    skill_instances,
    together_of,
)
from klineage.ingest.induce import MARGIN
from klineage.kb.conditions import PORTABLE_FEATURES, evaluate, parse_condition, validate_condition
from klineage.schema.ids import kernel_sha
from klineage.schema.lineage_document import parse_lineage_document

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"
BIG = "bf16 {'M': 16384, 'N': 16384, 'K': 16384}"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.sample.json").read_text(encoding="utf-8"))


def timing(m: int, k: int, from_ms: float, to_ms: float) -> dict[str, Any]:
    return {"shape": {"M": m, "N": m, "K": k}, "dtype": "bf16", "from_ms": from_ms, "to_ms": to_ms}


def synthetic() -> dict[str, Any]:
    """The gemm fixture's kernels with steps made up to exercise every rule."""
    data = fixture("gemm")
    k0, k1, k2, k3 = (k["sha"] for k in data["kernels"])
    data["steps"] = [
        {"index": 0, "operator": "grouped-order", "params": {"GROUP_M": 8}, "from": k0, "to": k1, "accepted": True,
         "timings": [timing(8192, 8192, 1.0, 1.1), timing(8192, 512, 0.2, 0.19), timing(4096, 4096, 0.2, 0.22)]},
        {"index": 1, "operator": "fp32-accumulate", "from": k1, "to": None, "accepted": False, "gate": "correctness",
         "reason": "bf16 {'M': 4096, 'N': 4096, 'K': 4096} seed 2 (normal): max rel err 4e-2 > 2e-2"},
        {"index": 2, "operator": "tile-size", "params": {"BLOCK_M": 128}, "from": k1, "to": k2, "accepted": True,
         "timings": [timing(8192, 8192, 1.8, 3.8), timing(4096, 4096, 0.22, 0.47), timing(1024, 1024, 0.0052, 0.0051)]},
        {"index": 3, "operator": "tile-size", "from": k2, "to": k3, "accepted": False, "gate": "compile",
         "reason": "out of resources: shared memory 266240 > 232448",
         "gate_runs": [{"kernel_sha": k3, "gates": [{"gate": "compile", "status": "fail", "reason": "oor",
                                                    "metrics": {"case": BIG}}]}]},
        {"index": 4, "operator": "grouped-order", "from": k2, "to": k3, "accepted": False, "gate": "policy",
         "reason": "a cycle", "timings": [timing(8192, 512, 0.2, 0.18)]},
        {"index": 5, "operator": "num-warps", "params": {"num_warps": 8}, "from": k2, "to": k3, "accepted": True,
         "timings": [timing(8192, 8192, 3.8, 4.4), timing(1024, 1024, 0.0051, 0.005)]},
        {"index": 6, "operator": "num-warps", "from": k3, "to": k2, "accepted": False, "gate": "performance",
         "reason": f"timing failed on {BIG}: illegal memory access",
         "gate_runs": [{"kernel_sha": k2, "gates": [{"gate": "performance", "status": "fail", "reason": "x",
                                                    "metrics": {"rows": [{"shape": {"M": 2048, "N": 2048, "K": 2048},
                                                                          "dtype": "bf16"}]}}]}]},
    ]
    data["skills"] = []
    return data


def by_op(skills: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["operator"]: s for s in skills}


def paid(t: dict[str, Any]) -> bool:
    return t["to_ms"] / t["from_ms"] >= 1.03


def test_synthetic_lineage_gives_skills_that_the_schema_accepts() -> None:
    data = synthetic()
    skills = extract_skills(data)
    assert [s["operator"] for s in skills] == ["grouped-order", "tile-size", "num-warps"]  # fp32: rejected only
    data["skills"] = skills
    parse_lineage_document(data)  # schema + "skills cite accepted steps"
    for s in skills:
        for c in (*s["valid_when"], *s["profitable_when"]):
            validate_condition(c["expr"])
        assert s["name"] and s["intent"] and s["anchor"]["description"]


def test_three_shapes_are_too_few_for_a_rule_and_the_skill_says_so() -> None:
    data = synthetic()
    skills = by_op(extract_skills(data))
    for op, index in (("grouped-order", 0), ("tile-size", 2)):
        n_paid = sum(paid(t) for t in data["steps"][index]["timings"])
        assert skills[op]["profitable_when"] == []
        assert skills[op]["profitability"].startswith(f"paid (speedup >= 1.03x) on {n_paid} of 3 measured shapes; "
                                                      "no rule separates them (too little evidence")
    assert skills["grouped-order"]["transform"] == {"operator": "grouped-order", "params": {"GROUP_M": 8}}


def grid_step(index: int, operator: str, workload_shapes: list[dict[str, int]], pays: Any) -> dict[str, Any]:
    return {"index": index, "operator": operator, "from": None, "to": None, "accepted": True,
            "timings": [{"shape": shape, "dtype": dtype, "from_ms": 1.0, "to_ms": 1.2 if pays(shape, dtype) else 1.0}
                        for shape in workload_shapes for dtype in ("bf16", "fp16")]}


GEMM_GRID = [{"M": m, "N": n, "K": k} for m, n, k in ((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 1024),
                                                       (4096, 4096, 512), (4096, 4096, 4096), (8192, 8192, 1024),
                                                       (1024, 8192, 2048), (8192, 1024, 4096))]


def gemm_lineage(pays: Any) -> dict[str, Any]:
    data = fixture("gemm")
    data["steps"] = [grid_step(0, "grouped-order", GEMM_GRID, pays)]
    data["skills"] = []
    return data


def test_a_size_threshold_on_enough_shapes_is_a_portable_rule_with_its_out_of_sample_accuracy() -> None:
    data = gemm_lineage(lambda s, _d: s["M"] * s["N"] >= 2**24)
    merged = merge_skills([skill_instances(data)])[0]
    rule = merged.profitable_rule
    assert rule is not None and rule.validation == "leave-one-shape-out"
    assert rule.oos_accuracy is not None and rule.majority is not None
    assert rule.oos_accuracy >= rule.majority + MARGIN
    assert parse_condition(rule.expr).names <= set(PORTABLE_FEATURES)
    assert rule.expr == "out_elems >= 16 * 2 ** 20"  # M*N >= 2**24, in portable terms and a readable number
    cond = by_op(extract_skills(data))["grouped-order"]["profitable_when"][0]
    assert cond["oos_accuracy"] == pytest.approx(rule.oos_accuracy) and cond["majority"] == pytest.approx(rule.majority)
    for t in data["steps"][0]["timings"]:
        assert evaluate(cond["expr"], shape_features(t["shape"], t["dtype"], family="gemm")).value is paid(t)
    # portable: the rule evaluates (true or false, never unknown) on a workload whose dims are named otherwise
    other = shape_features({"rows": 4096, "cols": 4096}, "bf16", family="row-reduction")
    assert evaluate(cond["expr"], other).value is not None


def test_noise_on_one_workload_gives_no_rule() -> None:
    import random

    rng = random.Random(11)
    noisy = {(tuple(sorted(s.items())), d): rng.random() < 0.5 for s in GEMM_GRID for d in ("bf16", "fp16")}
    merged = merge_skills([skill_instances(gemm_lineage(lambda s, d: noisy[(tuple(sorted(s.items())), d)]))])[0]
    assert merged.profitable is not None and merged.profitable_rule is None
    n_paid = sum(noisy.values())
    assert merged.profitability.startswith(f"paid (speedup >= 1.03x) on {n_paid} of 16 measured shapes; "
                                           "no rule separates them")


def test_rejections_become_risks_and_valid_when() -> None:
    skills = by_op(extract_skills(synthetic()))
    tile = skills["tile-size"]
    assert {r["kind"] for r in tile["risks"]} == {"out-of-resources"}
    valid = tile["valid_when"][0]
    assert valid["source"] == "gate-failure" and "16384" in valid["description"]
    assert evaluate(valid["expr"], shape_features({"M": 16384, "N": 16384, "K": 16384}, "bf16")).value is False
    assert evaluate(valid["expr"], shape_features({"M": 4096, "N": 4096, "K": 4096}, "bf16")).value is True
    warps = skills["num-warps"]
    assert "runtime-failure" in {r["kind"] for r in warps["risks"]}
    assert warps["valid_when"] and warps["valid_when"][0]["support"] == 4  # 2 accepted + 1 timed row + 1 failure
    grouped = {r["kind"]: r for r in skills["grouped-order"]["risks"]}
    assert "regression" in grouped  # the policy rejection measured the simplified kernel faster
    regressions = [r["description"] for r in skills["grouped-order"]["risks"] if r["kind"] == "regression"]
    assert any("11.1%" in d for d in regressions) and any("K=512" in d for d in regressions)


def test_correctness_failure_is_a_risk_not_a_valid_when() -> None:
    merged = {m.operator: m for m in merge_skills([skill_instances(synthetic())])}
    fp32 = merged["fp32-accumulate"]
    assert not fp32.accepted and fp32.valid is None and fp32.profitable is None
    assert [r.kind for r in fp32.risks] == ["wrong-results"]
    assert fp32.risks[0].description.startswith("wrong results without it")


@pytest.mark.parametrize("name", ["gemm", "softmax"])
def test_fixtures_extract_and_parse(name: str) -> None:
    data = fixture(name)
    skills = extract_skills(data)
    accepted_ops = {s["operator"] for s in data["steps"] if s["accepted"]}
    assert {s["operator"] for s in skills} == accepted_ops
    doc = parse_lineage_document({**data, "skills": skills})
    assert len(doc.data["skills"]) == len(accepted_ops)


def test_fixture_rules_gemm_and_softmax() -> None:
    gemm = by_op(extract_skills(fixture("gemm")))
    grouped = gemm["grouped-order"]  # paid at K = 4096, 8192, not 512: three shapes, too few for a rule
    assert grouped["profitable_when"] == [] and "on 2 of 3 measured shapes" in grouped["profitability"]
    softmax = by_op(extract_skills(fixture("softmax")))
    exp2 = softmax["exp2"]
    assert exp2["profitable_when"] == [] and "none of the 3" in exp2["profitability"]  # never paid: said, not hidden


def test_merge_across_lineages_reinduces_on_shared_features() -> None:
    gemm, softmax = fixture("gemm"), fixture("softmax")
    merged = {m.operator: m for m in merge_skills([skill_instances(gemm), skill_instances(softmax)])}
    warps = merged["num-warps"]
    assert warps.workloads == ("gemm", "softmax") and len(warps.effects) == 6
    assert warps.profitable is not None and warps.profitable.support == 6
    assert warps.profitable.validation == "leave-one-workload-out"  # two workloads: held out one at a time
    expr = warps.profitable.expr
    validate_condition(expr)
    assert parse_condition(expr).names <= set(PORTABLE_FEATURES)  # never M, N, K, cols, numel
    for e in warps.effects:  # the rule is never unknown on its own evidence
        assert evaluate(expr, e.features()).value is not None
    # one lineage alone induces from its own 3 points
    alone = {m.operator: m for m in merge_skills([skill_instances(gemm)])}
    assert alone["num-warps"].profitable is not None and alone["num-warps"].profitable.support == 3


def test_enables_when_removing_one_optimization_takes_the_others_place_away() -> None:
    """single-pass-row enables multi-row: multi-row packs rows into the single-pass kernel's tile,
    so once the single-pass kernel is gone there is no place left for it (the ENABLES edge the
    H200 walks of layernorm and softmax produce)."""
    from klineage.transforms.registry import all_operators, get_operator

    single, multi = get_operator("single-pass-row"), get_operator("multi-row")
    frontier = [(ROOT / "workloads" / "layernorm" / "expert.py").read_text(encoding="utf-8")]
    pair = None
    for _ in range(4):  # find a kernel where removing single-pass-row makes multi-row inapplicable
        nxt = []
        for src in frontier:
            rewrite = single.simplify(src)
            if rewrite is not None and multi.applicable(src) and not multi.applicable(rewrite.source):
                pair = (src, rewrite.source)
                break
            nxt += [r.source for op in all_operators() if (r := op.simplify(src)) is not None]
        if pair:
            break
        frontier = nxt[:12]
    assert pair is not None
    before, after = pair
    start = copy.deepcopy(before) + "\n# start\n"
    kernels = {kernel_sha(s): s for s in (start, before, after)}
    sha = {s: kernel_sha(s) for s in (start, before, after)}
    steps = [{"index": 0, "operator": "multi-row", "from": sha[start], "to": sha[before], "accepted": True},
             {"index": 1, "operator": "single-pass-row", "from": sha[before], "to": sha[after], "accepted": True}]
    data = {"kernels": [{"sha": k, "source": v} for k, v in kernels.items()], "steps": steps}
    assert enables_of(data) == {"single-pass-row": ("multi-row",)}
    reverse = [{**steps[1], "index": 0}, {**steps[0], "index": 1}]  # removed first: nothing was enabled
    assert enables_of({**data, "steps": reverse}) == {}


def test_the_committed_walks_record_single_pass_row_enabling_multi_row() -> None:
    import json

    for workload in ("layernorm", "softmax"):
        doc = json.loads((ROOT / "lineages" / f"{workload}.lineage.json").read_text(encoding="utf-8"))
        assert "multi-row" in enables_of(doc).get("single-pass-row", ()), workload


def _step(index: int, operator: str, gain: float, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """An accepted walk step whose optimization made two shapes ``gain`` times faster."""
    return {"index": index, "operator": operator, "accepted": True, "params": params or {}, "from": "a", "to": "b",
            "timings": [timing(1024, 1024, 1.0, gain), timing(4096, 4096, 2.0, 2.0 * gain)]}


def test_moves_together_are_read_from_the_steps_timings() -> None:
    """Walk order is expert -> naive, so the forward (naive -> expert) order is by falling index: num-warps (5)
    is added first. The launch configuration joins the autotune step that carries configs; a step that lost
    alone pairs with the next step only when the two gained together beyond the noise."""
    configs = {"kernels": {"k": {"configs": [{"BLOCK_M": "128", "num_warps": "8"}]}}}
    data = {"steps": [_step(5, "num-warps", 1.5), _step(4, "grouped-order", 0.88), _step(3, "contiguity-hints", 1.25),
                      _step(2, "autotune", 1.1, configs), _step(1, "int64-offsets", 0.9),
                      {"index": 0, "operator": "exp2", "accepted": False, "timings": []}]}
    found = together_of(data)
    config_set = found["autotune"][0]
    assert config_set["operators"] == ["autotune", "num-warps"] and config_set["steps"] == [2, 5]
    assert config_set["kind"] == "launch-configuration" and config_set["gain"] == pytest.approx(1.65)
    assert found["num-warps"] == [config_set]
    assert found["grouped-order"] == [{"steps": [4, 3], "operators": ["grouped-order", "contiguity-hints"],
                                       "gain": pytest.approx(1.1), "kind": "pair", "kernel_kind": []}]
    assert "contiguity-hints" not in found and "int64-offsets" not in found  # the last step has no next to pay with

    without_configs = {"steps": [dict(s, params={}) if s["operator"] == "autotune" else s for s in data["steps"]]}
    assert "autotune" not in together_of(without_configs)  # no config list: nothing carries the values
    lost_twice = {"steps": [_step(4, "grouped-order", 0.88), _step(3, "contiguity-hints", 1.1)]}
    assert together_of(lost_twice) == {}  # 0.88 x 1.1 < 1.03: no evidence the pair pays
