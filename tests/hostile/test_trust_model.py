"""The trust model beyond the static gate (issue 18): candidates that escape into their own process.

The static gate refuses every candidate here (tests/hostile/table.py). These tests assume it did not:
they drive the worker gates directly (``runner._run_gates``, the static gate bypassed) to check the
second line — the process model. A candidate that owns its worker process can forge what that process
writes, rewire what runs inside it and leave processes behind; it must still fail, leave nothing
running, and nothing may be cached as a pass. Plus the warm pool's life cycle: several jobs per worker,
recycling after a crash and after ``max_jobs``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from hostile.table import CANDIDATES, ROWSUM
from klineage.schema.gate_result import GateOutcome
from klineage.validator import LocalValidator
from klineage.validator.pool import WorkerPool, containment, descendants
from klineage.validator.runner import _run_gates, load_workload, probe_device

GATES = ["compile", "correctness", "integrity"]


@pytest.fixture(scope="module")
def pool() -> Any:
    pool = WorkerPool(max_jobs=4, max_workers=1)
    yield pool
    pool.shutdown()


def _bypassing_static(name: str, pool: WorkerPool, gates: list[str] | None = None,
                      timeout_s: float = 120.0) -> tuple[dict[str, GateOutcome], str | None]:
    source = (CANDIDATES / f"{name}.py").read_text(encoding="utf-8")
    outcomes: dict[str, GateOutcome] = {}
    lost = _run_gates(source, load_workload(ROWSUM), list(gates or GATES), None, probe_device(force_cpu=True),
                      timeout_s, 2, None, None, None, pool, False, outcomes, {})
    return outcomes, lost


def _sleepers(marker: str = "4242.25") -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            state = Path(f"/proc/{entry}/stat").read_text(errors="replace").rsplit(")", 1)[-1].split()[:1]
            if cmdline[:2] == [b"sleep", marker.encode()] and state != ["Z"]:
                found.append(int(entry))
    return found


def test_forged_evidence_and_early_exit_fail(pool: WorkerPool) -> None:
    outcomes, _ = _bypassing_static("forge_progress", pool)
    # compile is the first gate to run the candidate's host code: the forged frame carries no outcome,
    # or the exit closes the channel (the worker died); either way a failure, and no later gate ran.
    failed = [o for o in outcomes.values() if o.status == "fail"]
    assert len(failed) == 1 and failed[0].gate in ("compile", "correctness"), outcomes
    assert "forged" not in failed[0].reason
    assert not any(o.status == "pass" for o in outcomes.values() if o.gate != "compile"), outcomes
    assert not Path("progress0.jsonl").exists()


def test_forging_candidate_is_never_cached_as_pass(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    validator = LocalValidator(cache=cache, device="cpu", seeds=2)
    for name in ("forge_progress", "setattr_reference", "setsid_grandchild", "from_file_read", "shared_mmap"):
        result = validator.validate((CANDIDATES / f"{name}.py").read_text(), ROWSUM)
        assert result.verdict == "fail" and result.failed_gate.gate == "static", result.failed_gate  # type: ignore[union-attr]
        hit = validator.cached(validator.prepare((CANDIDATES / f"{name}.py").read_text(), ROWSUM, None, None)[-1])
        assert hit is None or hit.verdict == "fail"
    import sqlite3

    with sqlite3.connect(cache) as db:
        docs = [row[0] for row in db.execute("SELECT doc FROM results")]
    assert docs and all('"verdict": "pass"' not in doc for doc in docs)


def test_rewired_comparison_and_reference_do_not_reach_the_trusted_side(pool: WorkerPool) -> None:
    outcomes, lost = _bypassing_static("setattr_reference", pool)
    assert lost is None
    correctness = outcomes["correctness"]
    assert correctness.status == "fail", correctness
    assert "relative error" in correctness.reason, correctness.reason


def test_grandchild_in_a_new_session_is_killed_with_the_job(pool: WorkerPool) -> None:
    assert not _sleepers(), "a sleeper from an earlier run is still alive"
    outcomes, lost = _bypassing_static("setsid_grandchild", pool, gates=["correctness"])
    assert lost is None
    assert outcomes["correctness"].status == "pass"  # a correct kernel: what matters is what it left behind
    deadline = time.monotonic() + 5
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sleepers(), f"the setsid grandchild outlived its job (containment: {containment()})"


def test_a_warm_worker_serves_several_jobs_and_is_recycled(tmp_path: Path) -> None:
    pool = WorkerPool(max_jobs=3, max_workers=1)
    validator = LocalValidator(device="cpu", seeds=1, pool=pool)
    source = (ROWSUM / "kernel.py").read_text()
    try:
        walls = []
        counts = []
        for i in range(4):
            start = time.monotonic()
            result = validator.validate(f"{source}\n# job {i}\n", ROWSUM, gates=["correctness"])
            walls.append(time.monotonic() - start)
            assert result.verdict == "pass", result.gates
            counts.append((pool.stats()["started"], pool.stats()["retired"]))
        # one interpreter worker served jobs 1-3 and was retired after the third (max_jobs=3); job 4 started
        # a fresh one
        assert counts == [(1, 0), (1, 0), (1, 1), (2, 1)], counts
        assert max(walls[1:3]) < walls[0], walls  # warm: torch and triton already imported

        crashed = validator.validate((CANDIDATES / "out_of_bounds.py").read_text(), ROWSUM, gates=["correctness"])
        assert crashed.verdict == "fail"
        assert "worker died" in crashed.failed_gate.reason or "run raised" in crashed.failed_gate.reason  # type: ignore[union-attr]
        assert validator.last_output is not None
        if "worker died" in crashed.failed_gate.reason:  # type: ignore[union-attr]
            assert not validator.last_output.cacheable
            assert pool.stats()["retired"] == 2  # the crashed worker is gone ...
        after = validator.validate(f"{source}\n# after the crash\n", ROWSUM, gates=["correctness"])
        assert after.verdict == "pass", after.gates  # ... and the next job runs in a fresh one
        for worker in list(pool._all):
            assert not [p for p in descendants(worker.host_pid)], "a job left a process behind"
    finally:
        pool.shutdown()
    assert pool.stats()["live"] == 0


def test_a_hang_is_killed_at_its_limit_and_the_limit_is_stated(pool: WorkerPool) -> None:
    outcomes, lost = _bypassing_static("infinite_loop", pool, gates=["correctness"], timeout_s=8)
    assert lost == "correctness"
    outcome = outcomes["correctness"]
    assert outcome.status == "fail" and "time limit of 8 s exceeded" in outcome.reason, outcome
    assert outcome.metrics["time_limit_s"] == 8 and outcome.metrics["time_limit_basis"] == "given by the caller"
