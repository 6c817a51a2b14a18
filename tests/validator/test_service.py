"""The HTTP service: endpoints, refusals that create no job, the cache, and the HTTP client.

Jobs here fail at the static gate (no worker process), so the file stays fast; real jobs through the
service are exercised by the hostile suite (tests/hostile/test_hostile.py).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from klineage.validator import HttpValidator, ValidationRequestError
from klineage.validator.service import ServiceConfig, create_app

WORKLOADS = Path(__file__).resolve().parent / "workloads"
STATIC_FAIL = "import os\n"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("roots")
    bad = root / "broken"
    bad.mkdir()
    (bad / "manifest.toml").write_text('[workload]\nname = "broken"\n')
    config = ServiceConfig(workload_roots=[WORKLOADS, root], cache_path=root / "cache.sqlite", device="cpu",
                           max_body_bytes=64 * 1024)
    with TestClient(create_app(config)) as test_client:
        yield test_client


def _jobs(client: Any) -> int:
    return len(client.app.state.manager.jobs)


def test_health_and_info(client: Any) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    info = client.get("/v1/info").json()
    assert info["cuda"] is False and "interpreter" in info["gpu"]
    assert {"torch", "triton"} <= set(info["versions"])
    assert info["gates"] == ["static", "compile", "correctness", "integrity", "performance"]
    assert {"rowsum", "matmul_small", "broken"} <= set(info["workloads"])
    assert info["ceilings"] == {"status": "no GPU: not measured"}


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"candidate": "x = 1\n", "workload": "nope"}, 404, "unknown workload 'nope'"),
    ({"candidate": "x = 1\n", "workload": "../etc"}, 422, "workload must be a workload folder name"),
    ({"candidate": "x = 1\n", "workload": "broken"}, 422, "malformed workload manifest"),
    ({"candidate": "x = 1\n", "workload": "rowsum", "gates": ["static", "speed"]}, 422, "unknown gate 'speed'"),
    ({"candidate": 3, "workload": "rowsum"}, 422, "candidate must be"),
    ({"candidate": "x = 1\n", "workload": "rowsum", "shapes": [{"rows": 0}]}, 422, "shapes[0].rows"),
    ({"candidate": "x = 1\n", "workload": "rowsum", "colour": "red"}, 422, "unknown field 'colour'"),
    ({"candidate": "x = 1\n", "workload": "rowsum", "timeout_s": 1e9}, 422, "timeout_s"),
    ({"candidate": "x = 1\n", "workload": "rowsum", "manifest_sha": "0" * 64}, 409, "differs from the client"),
])
@pytest.mark.parametrize("endpoint", ["/v1/jobs", "/v1/validate"])
def test_bad_requests_create_no_job(client: Any, endpoint: str, body: dict, status: int, message: str) -> None:
    before = _jobs(client)
    response = client.post(endpoint, json=body)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    assert _jobs(client) == before


def test_body_that_is_not_utf8_json_or_too_big(client: Any) -> None:
    before = _jobs(client)
    bad_utf8 = client.post("/v1/jobs", content=b'{"candidate": "caf\xe9", "workload": "rowsum"}',
                           headers={"content-type": "application/json"})
    assert bad_utf8.status_code == 400 and "not valid UTF-8" in bad_utf8.json()["error"]
    surrogate = client.post("/v1/jobs", content=b'{"candidate": "\\ud800", "workload": "rowsum"}',
                            headers={"content-type": "application/json"})
    assert surrogate.status_code == 400 and "candidate is not valid UTF-8" in surrogate.json()["error"]
    not_json = client.post("/v1/jobs", content=b"{candidate", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]
    not_object = client.post("/v1/jobs", json=[1, 2])
    assert not_object.status_code == 400
    huge = client.post("/v1/jobs", json={"candidate": "#" * 100_000, "workload": "rowsum"})
    assert huge.status_code == 413 and "over the limit" in huge.json()["error"]
    assert _jobs(client) == before
    assert client.get("/healthz").status_code == 200  # unharmed


def test_job_lifecycle_and_cache(client: Any) -> None:
    created = client.post("/v1/jobs", json={"candidate": STATIC_FAIL, "workload": "rowsum"})
    assert created.status_code == 202
    job_id = created.json()["id"]
    deadline = time.monotonic() + 30
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] == "done":
            break
        time.sleep(0.05)
    assert job["status"] == "done" and job["verdict"] == "fail"
    assert job["result"]["gates"][0]["reason"].startswith("forbidden import 'os'")
    assert client.get("/v1/jobs/does-not-exist").status_code == 404

    # The same request again: answered from the cache, synchronously, fast.
    latencies = []
    for _ in range(20):
        start = time.perf_counter()
        response = client.post("/v1/validate", json={"candidate": STATIC_FAIL, "workload": "rowsum"})
        latencies.append(time.perf_counter() - start)
        assert response.status_code == 200 and response.headers["X-Klineage-Cached"] == "1"
    assert response.json()["verdict"] == "fail"
    assert statistics.median(latencies) < 0.05, latencies


def test_validate_returns_202_when_not_done_in_time(client: Any) -> None:
    body = {"candidate": (WORKLOADS / "rowsum" / "kernel.py").read_text() + "\n# 202\n", "workload": "rowsum",
            "gates": ["static", "compile"], "wait_s": 0}
    response = client.post("/v1/validate", json=body)
    assert response.status_code == 202 and response.json()["status"] in ("queued", "running")
    again = client.post("/v1/jobs", json={k: v for k, v in body.items() if k != "wait_s"})
    assert again.json()["id"] == response.json()["id"]  # the in-flight job is shared, not duplicated


def test_http_validator_round_trip(client: Any) -> None:
    http = HttpValidator("http://testserver", client=client)
    result = http.validate(STATIC_FAIL, WORKLOADS / "rowsum")  # sends the name and the manifest's sha
    assert result.verdict == "fail" and result.failed_gate.gate == "static"  # type: ignore[union-attr]
    by_name = http.validate(STATIC_FAIL, "rowsum")
    assert by_name.kernel_sha == result.kernel_sha
    with pytest.raises(ValidationRequestError, match="unknown workload"):
        http.validate(STATIC_FAIL, "no_such_workload")
    assert http.info()["cuda"] is False


def test_token_bounded_queue_and_shape_cap(tmp_path: Path) -> None:
    """With a token configured, job endpoints need it (401); a full queue answers 429 and creates no job;
    a requested shape over the element cap is refused (422); the info says so."""
    config = ServiceConfig(workload_roots=[WORKLOADS], cache_path=tmp_path / "cache.sqlite", device="cpu",
                           token="s3cret", max_queued=0, max_shape_elements=1000)
    with TestClient(create_app(config)) as client:
        body = {"candidate": STATIC_FAIL, "workload": "rowsum"}
        assert client.post("/v1/jobs", json=body).status_code == 401
        wrong = client.post("/v1/validate", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "KLINEAGE_VALIDATOR_TOKEN" in wrong.json()["error"]
        assert client.get("/v1/jobs/x").status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        full = client.post("/v1/jobs", json=body, headers=auth)
        assert full.status_code == 429 and "queue is full" in full.json()["error"]
        assert _jobs(client) == 0
        big = client.post("/v1/jobs", json={**body, "shapes": [{"rows": 100, "cols": 100}]}, headers=auth)
        assert big.status_code == 422 and "over the server's limit of 1000" in big.json()["error"]
        info = client.get("/v1/info").json()
        assert info["limits"]["token_required"] is True and info["limits"]["max_queued"] == 0
        assert client.get("/healthz").status_code == 200
