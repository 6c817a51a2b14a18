"""A walk that timed nothing (the CPU, under the Triton interpreter) must not pollute the knowledge base:
its document says ``"measured": false``, an interpreter limitation is a ``skipped`` step (not a
rejection, so no risk or VALID_WHEN), and ingesting it adds no support, no effect and no search
confidence to any skill."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from klineage.ingest.pipeline import ingest_lineages
from klineage.ingest.walker import Walker
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase
from klineage.schema.gate_result import GateOutcome, GateResult
from klineage.schema.ids import kernel_sha
from klineage.schema.lineage_document import parse_lineage_document
from klineage.schema.records import skill_id
from klineage.transforms.operator import Anchor, Operator, Rewrite, make_rewrite

ROOT = Path(__file__).resolve().parents[1]
ROWSUM = ROOT / "validator" / "workloads" / "rowsum"
GEMM_FIXTURE = ROOT / "fixtures" / "lineages" / "gemm.sample.json"
CPU = "none (CPU: Triton interpreter, cross-compile only)"
LIMITATION = ("run raised on bf16 {'rows': 3, 'cols': 40000} seed 1 (base): InterpreterError: "
              "AttributeError(\"'InterpreterBuilder' object has no attribute 'get_bf16'\")")


class Marker(Operator):
    """Removes the line ``# OPT <id>``."""

    name = intent = carrier = anchor_predicate = anchor_description = "toy"

    def __init__(self, op_id: str) -> None:
        self.id = op_id  # type: ignore[misc]
        self.line = f"# OPT {op_id}\n"

    def detect(self, source: str) -> list[Anchor]:
        return [Anchor("present", 1, 1, "marker")] if self.line in source else []

    def simplify(self, source: str) -> Rewrite | None:
        if self.line not in source:
            return None
        return make_rewrite(source, source.replace(self.line, ""), self.id, {}, "simplify")

    def apply(self, source: str, **params: Any) -> Rewrite | None:
        return None


class InterpreterValidator:
    """What the local validator answers on a CPU: nothing timed; without marker ``interp`` the
    correctness gate fails with the interpreter's own error, without ``broken`` with wrong results."""

    def validate(self, source: str, workload_dir: Any, gates: Sequence[str] = (), shapes: Any = None) -> GateResult:
        outcomes = [GateOutcome("static", "pass")]
        if "correctness" in gates:
            if "# OPT interp\n" not in source:
                outcomes.append(GateOutcome("correctness", "fail", LIMITATION))
            elif "# OPT broken\n" not in source:
                outcomes.append(GateOutcome("correctness", "fail", "fp32 {'rows': 3}: relative error 0.5 > 1e-2"))
            else:
                outcomes.append(GateOutcome("correctness", "pass"))
        if "performance" in gates:
            outcomes.append(GateOutcome("performance", "skipped", "no GPU: interpreter mode, nothing to time"))
        return GateResult(kernel_sha(source), CPU, {"torch": "x"}, tuple(outcomes), "rowsum")


def _cpu_walk(tmp_path: Path) -> dict[str, Any]:
    folder = tmp_path / "rowsum"
    shutil.copytree(ROWSUM, folder)
    kernel = folder / "kernel.py"
    kernel.write_text(kernel.read_text(encoding="utf-8") + "# OPT interp\n# OPT broken\n# OPT fine\n",
                      encoding="utf-8")
    events: list[Any] = []
    ops = [Marker("interp"), Marker("broken"), Marker("fine")]
    doc = Walker(folder, InterpreterValidator(), ops, on_event=events.append).run()
    doc["events"] = [(e.kind, e.message) for e in events]
    return doc


def test_a_cpu_walk_says_unmeasured_and_skips_interpreter_limitations(tmp_path: Path) -> None:
    doc = _cpu_walk(tmp_path)
    events = doc.pop("events")
    assert doc["measured"] is False and doc["sample"] is False
    steps = {s["operator"]: s for s in doc["steps"]}
    assert steps["interp"]["accepted"] is False and steps["interp"].get("skipped") is True
    assert steps["broken"]["accepted"] is False and not steps["broken"].get("skipped")
    assert steps["fine"]["accepted"] is True
    assert ("skip", f"interp: not judged (interpreter limitation): {LIMITATION[:160]}") in events
    parse_lineage_document(json.loads(json.dumps(doc)))  # the schema knows both keys
    # a real failure is evidence (a risk); the interpreter's limitation is not
    from klineage.ingest.extract import skill_instances

    by_op = {i.operator: i for i in skill_instances(doc)}
    assert "interp" not in by_op
    assert [r.gate for r in by_op["broken"].rejections] == ["correctness"]


class HashEmbedder:
    """Deterministic unit vectors from a hash of the text (the model is not what this test is about)."""

    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in self.embed([text])[0])


def _unmeasured_copy(data: dict[str, Any], flag: bool | None) -> dict[str, Any]:
    """The gemm fixture as a CPU walk would write it: same steps, no timings, another lineage id."""
    doc = copy.deepcopy(data)
    doc["sample"] = False
    doc["gpu"] = {"name": CPU, "arch": "sm_0", "sm_count": None, "smem_per_sm": None}
    doc["versions"] = {**doc["versions"], "python": "3.11"}
    for step in doc["steps"]:
        step["timings"] = []
    if flag is not None:
        doc["measured"] = flag
    return doc


def test_ingesting_an_unmeasured_walk_adds_no_support_effect_or_confidence(tmp_path: Path) -> None:
    data = json.loads(GEMM_FIXTURE.read_text(encoding="utf-8"))
    for flag in (False, None):  # explicit, and an older document without the key (no timings anywhere)
        kb = KnowledgeBase(EmbeddedStore(tmp_path / f"kb-{flag}"), embedder=HashEmbedder())
        ingest_lineages(kb, [parse_lineage_document(data)])
        sid = skill_id("tile-size")
        before = kb.skill(sid)
        assert before is not None and before.support_steps == 1
        [hit_before] = [h for h in kb.search(context={"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}, limit=20)
                        if h.skill.id == sid]
        ingest_lineages(kb, [parse_lineage_document(_unmeasured_copy(data, flag))])
        after = kb.skill(sid)
        assert after is not None
        assert len(kb.lineages()) == 2
        assert (after.support_steps, after.support_lineages) == (before.support_steps, before.support_lineages)
        assert after.effect == before.effect
        [hit_after] = [h for h in kb.search(context={"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}, limit=20)
                       if h.skill.id == sid]
        assert hit_after.confidence == hit_before.confidence
        assert hit_after.score == hit_before.score
