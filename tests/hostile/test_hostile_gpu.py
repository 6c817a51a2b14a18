"""The hostile suite on the GPU, through the in-process client (each job still its own worker process).

Order matters for one check: the out-of-bounds candidate (an illegal address) is followed directly by
the workload's honest kernel, which must pass — the crash poisoned only its own process.
Skipped without CUDA; with ``KLINEAGE_GPU_OUT`` set, every verdict and timing is written there.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from validator import gpu_report  # noqa: E402

from hostile.table import CANDIDATES, ESCAPE_FILES, HONEST, HOSTILE, ROWSUM  # noqa: E402
from klineage.validator import LocalValidator  # noqa: E402


@pytest.fixture(scope="module")
def gpu_suite() -> dict[str, Any]:
    for path in ESCAPE_FILES:
        path.unlink(missing_ok=True)
    validator = LocalValidator(cache=None)
    order = [h.name for h in HOSTILE if h.name != "out_of_bounds"] + ["out_of_bounds", "kernel", *HONEST]
    docs: dict[str, Any] = {}
    walls: dict[str, float] = {}
    start_all = time.monotonic()

    def report() -> None:
        total = time.monotonic() - start_all
        gpu_report.write("hostile_gpu", {
            "jobs": len(docs), "wall_s": total, "jobs_per_minute": 60 * len(docs) / total,
            "per_job_wall_s": walls,
            "verdicts": {n: {"verdict": d["verdict"],
                             "gates": [(g["gate"], g["status"], g["reason"]) for g in d["gates"]]}
                         for n, d in docs.items()},
            "performance": {n: d["gates"][4]["metrics"] for n, d in docs.items() if d["verdict"] == "pass"},
            "compile": {n: d["gates"][1]["metrics"] for n, d in docs.items() if d["gates"][1]["status"] == "pass"},
        })

    for name in order:
        path = ROWSUM / "kernel.py" if name == "kernel" else CANDIDATES / f"{name}.py"
        start = time.monotonic()
        timeout = 30.0 if name == "infinite_loop" else 300.0
        docs[name] = validator.validate(path.read_text(), ROWSUM, timeout_s=timeout).to_dict()
        walls[name] = time.monotonic() - start
        report()
    return docs


@pytest.mark.parametrize("row", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_candidate_fails_on_gpu(gpu_suite: dict[str, Any], row: Any) -> None:
    doc = gpu_suite[row.name]
    failed = [g for g in doc["gates"] if g["status"] == "fail"]
    assert doc["verdict"] == "fail" and len(failed) == 1, doc["gates"]
    assert re.fullmatch(row.gate_pattern(on_gpu=True), failed[0]["gate"]), failed[0]
    assert re.search(row.pattern(on_gpu=True), failed[0]["reason"]), failed[0]["reason"]


def test_job_after_illegal_address_passes(gpu_suite: dict[str, Any]) -> None:
    assert gpu_suite["out_of_bounds"]["verdict"] == "fail"
    doc = gpu_suite["kernel"]
    assert doc["verdict"] == "pass", doc["gates"]
    perf = doc["gates"][4]
    assert perf["status"] == "pass" and perf["metrics"]["rows"], perf


def test_slow_but_correct_passes_with_low_speedup(gpu_suite: dict[str, Any]) -> None:
    doc = gpu_suite["slow_but_correct"]
    assert doc["verdict"] == "pass", doc["gates"]
    perf = doc["gates"][4]["metrics"]
    assert perf["geomean_speedup"] < 0.8, perf["geomean_speedup"]
    assert all("pct_roofline" in row for row in perf["rows"])
    assert not perf["flags"]


def test_no_file_escaped_on_gpu(gpu_suite: dict[str, Any]) -> None:
    assert gpu_suite
    for path in ESCAPE_FILES:
        assert not path.exists(), path
