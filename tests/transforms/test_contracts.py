"""Contracts (requires / provides / conflicts) agree with the operators and the measured lineages.

Corpus: every kernel version of the committed lineages, the workloads' kernels and the held-out kernels.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from klineage.transforms.contracts import CONTRACTS, MEANING, Contract, contract_of, flags, unmet
from klineage.transforms.facts import APPLICABLE, operator_anchors
from klineage.transforms.features import kernel_features
from klineage.transforms.registry import all_operators, get_operator, operator_ids
from klineage.transforms.under_autotune import apply_or_under_autotune

ROOT = Path(__file__).resolve().parents[2]
LINEAGES = sorted((ROOT / "lineages").glob("*.lineage.json"))


@cache
def corpus() -> dict[str, str]:
    """Name -> source of every kernel the project holds."""
    sources = {}
    for path in LINEAGES:
        for kernel in json.loads(path.read_text(encoding="utf-8"))["kernels"]:
            sources[f"{path.stem}:{kernel['sha'][:12]}"] = kernel["source"]
    for path in [*ROOT.glob("heldout/*/naive.py"), *ROOT.glob("workloads/*/*.py")]:
        if path.name != "reference.py":
            sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return sources


def test_every_operator_has_a_contract_in_known_flags() -> None:
    known = set(flags(kernel_features(next(iter(corpus().values())))))
    assert set(CONTRACTS) == set(operator_ids())
    for op, contract in CONTRACTS.items():
        named = {*contract.requires, *contract.provides, *contract.conflicts}
        assert named <= known, (op, named - known)
        assert named <= set(MEANING), (op, named - set(MEANING))
        assert not set(contract.requires) & set(contract.conflicts), op


def test_unmet_names_each_missing_requirement_and_present_conflict() -> None:
    contract = Contract(requires=("has_dot", "has_loop"), conflicts=("uses_autotune",))
    why = unmet(contract, {"has_dot": False, "n_loops": 2, "uses_autotune": True})
    assert why == ["requires has_dot (a tl.dot), which the kernel lacks",
                   "conflicts with uses_autotune (@triton.autotune), which the kernel has"]
    assert unmet(contract, {"has_dot": True, "has_k_loop": True, "uses_autotune": False}) == []
    assert unmet(contract_of("no-such-operator"), {}) == []


@cache
def analysed(name: str) -> tuple[dict, dict]:
    """The features and operator anchors of one corpus kernel (computed once for every operator's test)."""
    features = kernel_features(corpus()[name])
    return features, operator_anchors(corpus()[name], features)


@pytest.mark.parametrize("path", LINEAGES, ids=lambda p: p.stem)
def test_every_accepted_lineage_step_keeps_its_skills_contract(path: Path) -> None:
    """Applied to the kernel it was measured on, each skill's requirements held and its conflicts were
    absent; on the kernel it produced, what it provides is present: no contract rules out evidence."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    sources = {k["sha"]: k["source"] for k in doc["kernels"]}
    checked = 0
    for step in doc["steps"]:
        if not step.get("accepted") or step["from"] not in sources or step["to"] not in sources:
            continue
        contract = contract_of(step["operator"])
        simplified = kernel_features(sources[step["to"]])
        expert = flags(kernel_features(sources[step["from"]]))
        assert unmet(contract, simplified) == [], (step["index"], step["operator"])
        assert all(expert.get(p) for p in contract.provides), (step["index"], step["operator"], contract.provides)
        checked += 1
    assert checked, f"{path.name} has no accepted step"


@pytest.mark.parametrize("op", operator_ids())
def test_apply_provides_what_the_contract_says_wherever_it_applies(op: str) -> None:
    operator = get_operator(op)
    contract = contract_of(op)
    for name, source in corpus().items():
        features, anchors = analysed(name)
        if anchors.get(op, {}).get("state") != APPLICABLE:
            continue
        assert unmet(contract, features) == [], (op, name)
        result = apply_or_under_autotune(operator, source)  # an autotuned kernel: configs out and back
        assert result is not None, (op, name)
        after = flags(kernel_features(result.source))
        assert all(after.get(p) for p in contract.provides), (op, name, contract.provides)


def test_a_broken_contract_makes_the_operator_absent_with_the_reason() -> None:
    """A cumulative sum over rows in blocks of several rows: single-pass-row's detect finds its column loop,
    its contract (no multi-row kernel) rules it out, and the anchor says so."""
    from tests.transforms.harness import naive_cases

    source = naive_cases()["naive_cumsum"].source
    assert get_operator("single-pass-row").applicable(source)
    anchor = operator_anchors(source)["single-pass-row"]
    assert anchor["state"] == "absent"
    assert "conflicts with multi_row" in anchor["detail"]
    assert len(all_operators()) == len(CONTRACTS)
