"""Records have deterministic ids and round-trip through graph nodes."""

from __future__ import annotations

import pytest

from klineage.schema.gate_result import GateOutcome, GateResult
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.ids import canonical_json, content_id, kernel_sha
from klineage.schema.records import Anchor, Condition, Effect, Risk, Skill, skill_id


def test_content_ids_are_deterministic_and_order_insensitive_for_maps() -> None:
    assert content_id("Step", {"a": 1, "b": 2}) == content_id("Step", {"b": 2, "a": 1})
    assert content_id("Step", 1) != content_id("Step", 2)
    assert content_id("Skill", "x").startswith("skill:")
    assert len(kernel_sha("x")) == 64


def test_skill_round_trip_and_merge_identity() -> None:
    skill = Skill("exp2", "Use exp2", "Replace exp by exp2 with log2(e) folded.", Anchor("uses_exp", "exp"),
                  "tl.exp calls", {"operator": "exp2", "params": {}}, Effect.of([1.0, 1.1, 1.3]), 2, 1,
                  ("sm_90",), (0.1, 0.2))
    back = Skill.from_node(skill.to_node())
    assert back == skill
    assert skill.id == skill_id("exp2")
    assert back.effect.median == pytest.approx(1.1) and back.effect.n == 3


def test_condition_and_risk_round_trip() -> None:
    c = Condition("K % 64 == 0", "valid", "gate-failure", "tail", None, 3)
    assert Condition.from_node(c.to_node()) == c
    assert Condition("K % 64 == 0", "profitable").id != c.id
    r = Risk("out-of-resources", "too many stages")
    assert Risk.from_node(r.to_node()) == r


def test_effect_of_nothing_is_unmeasured() -> None:
    assert Effect.of([]) == Effect(None, None, None, 0)


def test_graph_records_reject_unknown_labels_and_types() -> None:
    with pytest.raises(ValueError, match="unknown node label"):
        Node("Person", "p:1")
    with pytest.raises(ValueError, match="unknown relationship"):
        Relationship("KNOWS", "a", "b")
    batch = GraphBatch.of([Node("Risk", "r:1", {"a": 1}), Node("Risk", "r:1", {"a": 2})])
    assert len(batch.nodes) == 1 and batch.nodes[0].props == {"a": 2}


def test_gate_result_verdict_is_computed() -> None:
    result = GateResult("abc", "cpu", {"torch": "2.11.0"}, (
        GateOutcome("static", "pass"), GateOutcome("compile", "skipped", "no GPU"),
        GateOutcome("correctness", "fail", "rel err 3e-1 > 2e-2")))
    assert result.verdict == "fail"
    assert result.failed_gate is not None and result.failed_gate.gate == "correctness"
    doc = result.to_dict()
    doc["verdict"] = "pass"  # a forged verdict is not trusted on read
    assert GateResult.from_dict(doc).verdict == "fail"
    with pytest.raises(ValueError):
        GateOutcome("speed", "pass")


def test_induced_condition_measures_and_the_profitability_note_round_trip() -> None:
    c = Condition("bytes >= 64 * 2 ** 20", "profitable", "induced", "paid on 9 of 16", 1.0, 16, 0.875, 0.625)
    back = Condition.from_node(c.to_node())
    assert back == c and (back.oos_accuracy, back.majority) == (0.875, 0.625)
    assert Condition.from_node(Condition("True", "valid").to_node()).oos_accuracy is None
    skill = Skill("exp2", "Use exp2", "i", Anchor("", "exp"), "c", {"operator": "exp2"},
                  profitability="paid on 5 of 9 measured shapes; no rule separates them")
    assert Skill.from_node(skill.to_node()) == skill


def test_the_lineage_schema_knows_the_dim_roles_of_the_manifest() -> None:
    import json
    from pathlib import Path

    from klineage.schema.manifest import DIM_ROLES

    schema = json.loads((Path(__file__).resolve().parents[2] / "klineage" / "schema" / "lineage.schema.json")
                        .read_text(encoding="utf-8"))
    roles = schema["properties"]["workload"]["properties"]["roles"]["additionalProperties"]["enum"]
    assert tuple(roles) == DIM_ROLES


def test_a_skill_is_a_hypothesis_until_a_verified_trial_on_new_code_goes_its_way() -> None:
    from dataclasses import replace

    from klineage.schema.records import Anchor, Effect, Skill

    gain = Skill("exp2", "Exp2", "intent", Anchor("uses_exp", "tl.exp"), "carrier", {}, effect=Effect.of([1.1, 1.2]))
    assert not gain.admitted and gain.admission.startswith("hypothesis: no agent")
    tried = replace(gain, applied=3, verified=2, paid=0, field_effect=Effect.of([0.98, 1.0]))
    assert not tried.admitted and "none reproduced" in tried.admission
    paid = replace(tried, paid=1, field_effect=Effect.of([0.98, 1.12]))
    assert paid.admitted and paid.admission.startswith("admitted")
    loss = replace(gain, effect=Effect.of([0.9, 0.95]), applied=1, verified=1, paid=0, field_effect=Effect.of([0.99]))
    assert loss.admitted  # a loss on the lineages, and no gain on new code: the direction holds
    unmeasured = replace(gain, effect=Effect.of([]), verified=4, paid=4, field_effect=Effect.of([1.2] * 4))
    assert not unmeasured.admitted


def test_walk_records_read_back_every_node_a_lineage_document_writes() -> None:
    """Workload, Architecture, Kernel, Lineage, Step and GateRun records read the nodes ``lineage_to_batch``
    writes and write exactly the same nodes back (same id, same properties)."""
    from pathlib import Path

    from klineage.schema import lineage_records as lr
    from klineage.schema.lineage_document import lineage_to_batch, load_lineage_document

    record_of = {"Workload": lr.Workload, "Architecture": lr.Architecture, "Kernel": lr.Kernel,
                 "Lineage": lr.Lineage, "Step": lr.Step, "GateRun": lr.GateRun}
    fixtures = sorted((Path(__file__).parents[1] / "fixtures" / "lineages").glob("*.json"))
    assert fixtures
    seen: set[str] = set()
    for path in fixtures:
        for node in lineage_to_batch(load_lineage_document(path)).nodes:
            record = record_of.get(node.label)
            if record is None:
                continue
            back = record.from_node(node)
            assert back.to_node() == node, f"{path.name}: {node.label} {node.id}"
            assert back.id == node.id
            seen.add(node.label)
    assert seen == set(record_of)


def test_walk_records_ids_and_defaults() -> None:
    from klineage.schema.lineage_records import GateRun, Kernel, Lineage, Step, Workload
    from klineage.schema.records import kernel_id, workload_id

    assert Workload.named("gemm", "matmul").id == workload_id("gemm")
    assert Kernel.of("ab" * 32, "src").id == kernel_id("ab" * 32)
    assert "name" not in Kernel.of("ab" * 32, "src").to_node().props  # absent, never empty
    assert "roles" not in Workload.named("gemm").to_node().props
    # a node without the newer properties reads with the documented defaults
    step = Step.from_node(Node("Step", "step:x", {"index": 2, "operator": "exp2"}))
    assert (step.index, step.operator, step.measured, step.accepted, step.timings) == (2, "exp2", True, False, ())
    assert Lineage.from_node(Node("Lineage", "lineage:x", {"workload": "gemm"})).measured is True
    timed = Step("step:y", "lineage:x", 0, "exp2", timings=({"shape": {"n": 1}, "dtype": "fp16", "from_ms": 1.0,
                                                             "to_ms": 1.5},))
    assert [x["speedup"] for x in timed.speedups()] == [1.5]
    result = GateResult("abc", "cpu", {"torch": "2.11.0"}, (GateOutcome("static", "pass"),))
    run = GateRun.of(result)
    assert run.id == content_id("GateRun", canonical_json(result.to_dict()))
    assert run.result() == result and GateRun.from_node(run.to_node()) == run
