"""Round trips without running anything: ``apply(simplify(x).source, **simplify(x).params)`` gives back
``x`` byte for byte, for every expert and every operator whose simplify rewrites it, and along the
accepted steps of every walked lineage (the replay check rebuilds the expert this way)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from klineage.transforms.registry import all_operators, get_operator, operator_ids

ROOT = Path(__file__).resolve().parents[2]
EXPERTS = ("gemm", "softmax", "layernorm", "attention", "cross_entropy")
LINEAGES = sorted((ROOT / "lineages").glob("*.lineage.json"))


def _expert(workload: str) -> str:
    return (ROOT / "workloads" / workload / "expert.py").read_text()


def _json_roundtrip(params: Any) -> Any:
    """Params as a lineage file stores them (and as the replay check reads them back)."""
    return json.loads(json.dumps(params))


@pytest.mark.parametrize("workload", EXPERTS)
@pytest.mark.parametrize("op_id", operator_ids())
def test_apply_with_recorded_params_rebuilds_the_expert(op_id: str, workload: str) -> None:
    source = _expert(workload)
    op = get_operator(op_id)
    rw = op.simplify(source)
    if rw is None:
        pytest.skip(f"{op_id} does not simplify the {workload} expert")
    params = _json_roundtrip(dict(rw.params))
    assert params == dict(rw.params), "simplify params must be JSON values"
    back = op.apply(rw.source, **params)
    assert back is not None, f"{op_id}.apply with the recorded params found nothing to restore"
    assert back.source == source, f"{op_id} on {workload}:\n{back.diff}"


def test_every_expert_has_round_trips() -> None:
    """The parametrized check is not vacuous: most present optimizations simplify."""
    pairs = [
        (op.id, w) for w in EXPERTS for op in all_operators() if op.simplify(_expert(w)) is not None
    ]
    assert len(pairs) >= 30, pairs


@pytest.mark.parametrize("op_id", operator_ids())
def test_unknown_params_are_rejected(op_id: str) -> None:
    source = _expert("cross_entropy")
    with pytest.raises((TypeError, ValueError), match="no_such_param"):
        get_operator(op_id).apply(source, no_such_param=1)


@pytest.mark.parametrize("op_id", ["num-warps", "eviction-hints", "int64-offsets", "tile-size", "autotune"])
def test_malformed_records_are_rejected(op_id: str) -> None:
    name = {"num-warps": "sites", "eviction-hints": "sites", "int64-offsets": "casts", "tile-size": "sites"}
    key = name.get(op_id, "code")
    with pytest.raises(ValueError):
        get_operator(op_id).apply(_expert("gemm"), **{key: "not a list"})


def test_no_params_keeps_the_generic_apply() -> None:
    """Without params apply adds the generic choice (not the expert's): num-warps from the tile."""
    source = _expert("cross_entropy")
    op = get_operator("num-warps")
    rw = op.simplify(source)
    assert rw is not None
    generic = op.apply(rw.source)
    assert generic is not None and generic.source != source
    assert "num_warps=max(4, min(16, block_v // 256))" in generic.source


def _accepted_chain(doc: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    sources = {k["sha"]: k["source"] for k in doc["kernels"]}
    steps = [s for s in sorted(doc["steps"], key=lambda s: s["index"]) if s.get("accepted")]
    return sources, steps


@pytest.mark.parametrize("path", LINEAGES, ids=[p.name for p in LINEAGES])
def test_lineage_chain_rebuilds_the_expert(path: Path) -> None:
    doc = json.loads(path.read_text())
    sources, steps = _accepted_chain(doc)
    if not steps:
        pytest.skip(f"{path.name} has no accepted step")
    assert steps[0]["from"] == doc["start"], "the accepted steps start from the expert"
    recorded = []
    for prev, step in zip([None, *steps], steps, strict=False):
        if prev is not None:
            assert step["from"] == prev["to"], f"accepted steps do not chain at step {step['index']}"
        op = get_operator(step["operator"])
        rw = op.simplify(sources[step["from"]])
        assert rw is not None, f"step {step['index']}: {op.id} no longer simplifies its source"
        assert rw.source == sources[step["to"]], f"step {step['index']}: {op.id} simplify drifted"
        recorded.append((op, _json_roundtrip(dict(rw.params))))
    source = sources[steps[-1]["to"]]
    for (op, params), step in zip(reversed(recorded), reversed(steps), strict=True):
        back = op.apply(source, **params)
        assert back is not None, f"step {step['index']}: {op.id}.apply restored nothing"
        assert back.source == sources[step["from"]], f"step {step['index']}: {op.id}:\n{back.diff}"
        source = back.source
    assert source == sources[doc["start"]]
    expert = ROOT / "workloads" / doc["workload"]["name"] / "expert.py"
    if expert.exists() and expert.read_text() == sources[doc["start"]]:
        assert source == expert.read_text()
