"""Lineage documents are checked against the JSON Schema and the rules it cannot express."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from klineage.schema.errors import LineageDocumentError
from klineage.schema.ids import kernel_sha
from klineage.schema.lineage_document import lineage_to_batch, load_lineage_document, parse_lineage_document

EXPERT = "import triton\n# expert\ndef run(x):\n    return x\n"
SIMPLER = "import triton\n# simpler\ndef run(x):\n    return x\n"


def minimal_document() -> dict[str, Any]:
    a, b = kernel_sha(EXPERT), kernel_sha(SIMPLER)
    return {
        "format": "klineage.lineage", "version": 1, "sample": True,
        "workload": {"name": "toy", "family": "elementwise"},
        "gpu": {"name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132},
        "versions": {"torch": "2.11.0", "triton": "3.6.0"}, "created": "2026-12-03T00:00:00Z",
        "start": a,
        "kernels": [{"sha": a, "source": EXPERT}, {"sha": b, "source": SIMPLER}],
        "steps": [
            {"index": 0, "operator": "num-warps", "from": a, "to": b, "accepted": True,
             "timings": [{"shape": {"n": 1024}, "dtype": "fp32", "from_ms": 1.0, "to_ms": 1.5}]},
            {"index": 1, "operator": "tile-size", "from": a, "to": None, "accepted": False,
             "gate": "compile", "reason": "out of resources"},
        ],
        "skills": [{"operator": "num-warps", "name": "Match warps", "intent": "More warps for wide rows.",
                    "anchor": {"predicate": "num_warps > 0", "description": "any launch"},
                    "carrier": "num_warps", "transform": {"operator": "num-warps"}, "steps": [0]}],
    }


def test_valid_document_becomes_a_graph_batch() -> None:
    doc = parse_lineage_document(minimal_document())
    batch = lineage_to_batch(doc)
    labels = sorted(n.label for n in batch.nodes)
    assert labels.count("Kernel") == 2 and labels.count("Step") == 2 and labels.count("Skill") == 1
    skill = next(n for n in batch.nodes if n.label == "Skill")
    assert skill.props["effect"]["median"] == pytest.approx(1.5)
    assert skill.props["sample"] is True
    types = {r.type for r in batch.relationships}
    assert {"OF", "STARTS_AT", "HAS_STEP", "FROM", "TO", "REVERSES_INTO"} <= types
    assert lineage_to_batch(parse_lineage_document(minimal_document())) == batch  # deterministic


def mutate(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(minimal_document())
    target = data
    keys = path.split("/")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        ("version", 2, "$.version"),
        ("format", "other", "$.format"),
        ("gpu/arch", "hopper", "$.gpu.arch"),
        ("kernels/0/sha", "0" * 64, "$.kernels[0].sha"),
        ("start", "f" * 64, "$.start"),
        ("steps/0/to", "e" * 64, "$.steps[0].to"),
        ("steps/1/gate", KeyError, "$.steps[1].gate"),
        ("skills/0/steps", [1], "$.skills[0].steps[0]"),
        ("steps/0/timings/0/from_ms", 0, "$.steps[0].timings[0].from_ms"),
        ("workload/colour", "red", "$.workload"),
    ],
)
def test_bad_documents_name_the_key(path: str, value: Any, key: str) -> None:
    with pytest.raises(LineageDocumentError) as info:
        parse_lineage_document(mutate(path, value), "doc.json")
    assert info.value.key == key
    assert str(info.value).startswith("doc.json: ")


def test_load_reports_json_position(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": ')
    with pytest.raises(LineageDocumentError, match="line 1"):
        load_lineage_document(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(minimal_document()))
    assert load_lineage_document(good).workload == "toy"
