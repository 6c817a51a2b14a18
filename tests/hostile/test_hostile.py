"""The hostile suite on CPU, through the HTTP service: every candidate fails at its gate, for its reason.

All jobs are submitted at once to a service with two worker threads (interpreter mode); while they run
(the infinite loop among them) the service must keep answering; afterwards a fresh honest job passes.
No hostile candidate may leave a file behind.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from hostile.table import CANDIDATES, ESCAPE_FILES, HONEST, HOSTILE, ROWSUM, Hostile

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from klineage.validator.service import ServiceConfig, create_app

INFINITE_LOOP_TIMEOUT_S = 20
SUITE_DEADLINE_S = 420


@pytest.fixture(scope="module")
def suite(validator_cache_path: Path) -> dict[str, Any]:
    for path in ESCAPE_FILES:
        path.unlink(missing_ok=True)
    # The session's result cache (tests/conftest.py): no other test validates these candidates, and the
    # job after the hang is a fresh kernel, so every job here runs.
    config = ServiceConfig(workload_roots=[ROWSUM.parent], cache_path=validator_cache_path, workers=2, device="cpu",
                           job_timeout_s=150)
    with TestClient(create_app(config)) as client:
        ids: dict[str, str] = {}
        # The hang first, so that the other jobs run while it holds a worker.
        names = ["infinite_loop"] + [h.name for h in HOSTILE if h.name != "infinite_loop"] + list(HONEST)
        for name in names:
            body: dict[str, Any] = {"candidate": (CANDIDATES / f"{name}.py").read_text(), "workload": "rowsum"}
            if name == "infinite_loop":
                body["timeout_s"] = INFINITE_LOOP_TIMEOUT_S
            response = client.post("/v1/jobs", json=body)
            assert response.status_code == 202, response.text
            ids[name] = response.json()["id"]
        health: list[float] = []
        deadline = time.monotonic() + SUITE_DEADLINE_S
        jobs: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline and len(jobs) < len(ids):
            start = time.monotonic()
            assert client.get("/healthz").status_code == 200
            health.append(time.monotonic() - start)
            for name, job_id in ids.items():
                if name not in jobs:
                    job = client.get(f"/v1/jobs/{job_id}").json()
                    if job["status"] in ("done", "error"):
                        jobs[name] = job
            time.sleep(0.5)
        # After the hang was killed: a new job (not in the cache) passes.
        fresh = (ROWSUM / "kernel.py").read_text() + "\n# a fresh copy: not in the result cache\n"
        after = client.post("/v1/validate", json={"candidate": fresh, "workload": "rowsum"})
    return {"jobs": jobs, "health": health, "after": after}


@pytest.mark.parametrize("row", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_candidate_fails_at_its_gate(suite: dict[str, Any], row: Hostile) -> None:
    job = suite["jobs"].get(row.name)
    assert job is not None, f"{row.name} did not finish in time"
    assert job["status"] == "done", job
    doc = job["result"]
    assert doc["verdict"] == "fail", f"{row.name} ({row.what}) was not caught: {doc['gates']}"
    failed = [g for g in doc["gates"] if g["status"] == "fail"]
    assert len(failed) == 1
    gate = failed[0]["gate"]
    assert re.fullmatch(row.gate_pattern(on_gpu=False), gate), f"{row.name}: failed at {gate}: {failed[0]['reason']}"
    assert re.search(row.pattern(on_gpu=False), failed[0]["reason"]), failed[0]["reason"]
    order = [g["gate"] for g in doc["gates"]]
    later = order[order.index(gate) + 1:]
    assert all(g["status"] == "skipped" and g["reason"].startswith("earlier gate failed")
               for g in doc["gates"] if g["gate"] in later)


@pytest.mark.parametrize("name", HONEST)
def test_honest_candidate_passes(suite: dict[str, Any], name: str) -> None:
    doc = suite["jobs"][name]["result"]
    assert doc["verdict"] == "pass", doc["gates"]
    status = {g["gate"]: g["status"] for g in doc["gates"]}
    assert status == {"static": "pass", "compile": "pass", "correctness": "pass", "integrity": "pass",
                      "performance": "skipped"}


def test_service_kept_answering_and_next_job_passes(suite: dict[str, Any]) -> None:
    assert suite["health"], "the service was never polled"
    assert max(suite["health"]) < 2.0, f"healthz stalled while jobs ran: {max(suite['health']):.2f} s"
    after = suite["after"]
    assert after.status_code == 200, after.text
    assert after.json()["verdict"] == "pass", after.json()["gates"]


def test_no_hostile_candidate_left_a_file(suite: dict[str, Any]) -> None:
    assert suite["jobs"]
    for path in ESCAPE_FILES:
        assert not path.exists(), f"{path} appeared: a candidate escaped the sandbox"


def test_suite_covers_the_issue_list() -> None:
    assert len(HOSTILE) >= 15
    gates = {g for h in HOSTILE for g in h.gate.split("|")}
    assert gates == {"static", "compile", "correctness", "integrity"}
    for h in HOSTILE:
        assert Path(h.path).is_file(), h.path
