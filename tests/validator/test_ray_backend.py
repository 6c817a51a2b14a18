"""The Ray backend on CPU (issue 17): a local Ray cluster of CPU slots in interpreter mode.

A batch with hostile candidates gets the verdicts, failed gates and gate statuses the local pool gives;
the result cache is shared (a job measured once is never run again, by the client or by any actor, and
identical jobs in flight share one run); a worker killed mid-job is retried once elsewhere, recorded, and
its lost attempt writes nothing; a job lost on its only attempt fails cleanly and is not cached. The
service runs its jobs through Ray with ``--ray``. Ray comes with the dev extra: in CI (``KLINEAGE_REQUIRE_REAL=1``)
a skip here is a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from klineage.schema.gate_result import GateResult
from klineage.validator import LocalValidator, ValidationRequestError, ValidatorUnavailable

pytestmark = pytest.mark.real("ray")

HERE = Path(__file__).resolve().parent
ROWSUM = HERE / "workloads" / "rowsum"
CANDIDATES = HERE.parent / "hostile" / "candidates"
ROOT = HERE.parents[1]
# (name, source): the workload's kernel and an honest slow one pass; the rest fail at static, correctness
# (NaN output; an out-of-bounds access that kills or breaks the candidate's worker) or integrity.
BATCH = [("kernel", (ROWSUM / "kernel.py").read_text())] + [
    (name, (CANDIDATES / f"{name}.py").read_text())
    for name in ("slow_but_correct", "torch_op", "nan_output", "input_mutation", "out_of_bounds")]
EXPECTED = {"kernel": None, "slow_but_correct": None, "torch_op": "static", "nan_output": "correctness",
            "input_mutation": "integrity", "out_of_bounds": "correctness"}
ONE_SHAPE = [{"rows": 3, "cols": 64}]


def _spinning(spin: int, tag: str) -> str:
    """The workload's kernel behind a host-code busy loop (a few seconds a job): honest, slow to finish."""
    base = (ROWSUM / "kernel.py").read_text()
    source = base.replace("    rows, cols = x.shape\n",
                          f"    rows, cols = x.shape\n    n = 0\n    while n < {spin}:\n        n += 1\n")
    assert source != base
    return source + f"\n# {tag}\n"


def _summary(result: GateResult) -> tuple[str, str | None, list[tuple[str, str]]]:
    failed = result.failed_gate
    return result.verdict, failed.gate if failed else None, [(g.gate, g.status) for g in result.gates]


@pytest.fixture(scope="module")
def ray_module() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from klineage.validator.ray_backend import shutdown_ray_validators

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves the machine
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024**2,
             namespace="klineage-tests")
    try:
        yield ray
    finally:
        shutdown_ray_validators()
        ray.shutdown()


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray-cache") / "results.sqlite"


@pytest.fixture(scope="module")
def validator(ray_module: Any, cache_path: Path) -> Any:
    from klineage.validator.ray_backend import RayValidator

    return RayValidator(cache=cache_path, device="cpu", actors=2, seeds=1)


@pytest.fixture(scope="module")
def batch(validator: Any) -> dict[str, Any]:
    """The batch through Ray (four threads over two actors) and through a local pool (two threads)."""
    def on_ray(item: tuple[str, str]) -> tuple[str, GateResult, dict[str, Any] | None, bool]:
        result = validator.validate(item[1], ROWSUM)
        return item[0], result, validator.last_where, validator.last_cached

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        ray_results = list(pool.map(on_ray, BATCH))
    ray_wall = time.monotonic() - start
    local = LocalValidator(cache=None, device="cpu", seeds=1)
    with ThreadPoolExecutor(max_workers=2) as pool:
        local_results = dict(zip([n for n, _ in BATCH], pool.map(lambda item: local.validate(item[1], ROWSUM), BATCH),
                                 strict=True))
    return {"ray": {n: r for n, r, _, _ in ray_results}, "where": {n: w for n, _, w, _ in ray_results},
            "cached": {n: c for n, _, _, c in ray_results}, "local": local_results, "ray_wall_s": ray_wall,
            "stats": dict(validator.stats)}


def test_a_batch_with_hostile_candidates_gets_the_local_pools_results(batch: dict[str, Any]) -> None:
    for name, _ in BATCH:
        ray_result, local_result = batch["ray"][name], batch["local"][name]
        assert _summary(ray_result) == _summary(local_result), name
        failed = ray_result.failed_gate
        assert (failed.gate if failed else None) == EXPECTED[name], (name, ray_result.to_dict()["gates"])
        assert ray_result.workload == "rowsum" and ray_result.kernel_sha == local_result.kernel_sha
        assert ray_result.gpu == local_result.gpu and ray_result.versions == local_result.versions
        assert not batch["cached"][name]
        # a candidate that crashes its own worker is the candidate's failure, not a lost Ray worker
        assert all("ray_retries" not in g.metrics for g in ray_result.gates), name
    assert batch["ray"]["nan_output"].failed_gate.reason == batch["local"]["nan_output"].failed_gate.reason
    # the jobs ran on both actors (two processes), each job on one
    pids = {w["pid"] for w in batch["where"].values() if w is not None}
    assert len(pids) == 2, batch["where"]
    assert batch["stats"]["ran"] == len(BATCH) and batch["stats"]["lost"] == 0


def test_the_result_cache_is_shared_by_the_client_and_every_actor(validator: Any, batch: dict[str, Any]) -> None:
    from klineage.validator.ray_backend import RayJob, bundle_workload

    ran = validator.stats["ran"]
    for name, source in BATCH:
        if "worker died" in (batch["ray"][name].failed_gate or batch["ray"][name].gates[0]).reason:
            # a job whose worker died says nothing certain about the candidate: never cached (as locally)
            assert validator.cached(validator.prepare(source, ROWSUM, None, None)[-1]) is None
            continue
        start = time.monotonic()
        again = validator.validate(source, ROWSUM)
        assert validator.last_cached and time.monotonic() - start < 5.0, name
        assert validator.last_where is None  # answered by the client's look-up: no actor was asked
        assert again.to_dict()["gates"] == batch["ray"][name].to_dict()["gates"], name
    assert validator.stats["ran"] == ran
    # An actor asked directly (as when two clients race) answers from the shared cache without running.
    source, _, gates, shapes, _ = validator.prepare(BATCH[0][1], ROWSUM, None, None)
    job = RayJob(source=source, workload=bundle_workload(ROWSUM), gates=gates, shapes=shapes, seeds=1, timing=None,
                 timeout_s=None, tag="direct")
    import ray

    replies = ray.get([actor.validate.remote(job) for actor in validator.actors])
    assert all(reply.cached for reply in replies)
    assert all(reply.result.to_dict()["gates"] == batch["ray"]["kernel"].to_dict()["gates"] for reply in replies)
    # Two identical requests at once share one run.
    fresh = (ROWSUM / "kernel.py").read_text() + "\n# asked twice at once\n"
    before = dict(validator.stats)
    with ThreadPoolExecutor(max_workers=2) as pool:
        twins = list(pool.map(lambda _: validator.validate(fresh, ROWSUM, gates=["correctness"]), range(2)))
    after = validator.stats
    assert twins[0].to_dict() == twins[1].to_dict() and twins[0].verdict == "pass"
    assert after["ran"] - before["ran"] == 1 and after["shared"] - before["shared"] == 1
    stats = validator.cache.stats()
    assert stats["rows"] >= len(BATCH) - 1 and stats["hits"] >= len(BATCH) + 1


def test_klineage_walk_parallel_submits_through_ray(validator: Any, cache_path: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`klineage walk --validator ray --parallel 2`: the walker's candidate and baseline clients are two
    Ray validators (other timing options) on the same actors, and its checking jobs run side by side."""
    import json

    from typer.testing import CliRunner

    from klineage.cli.main import app
    from klineage.validator import factory
    from klineage.validator.ray_backend import RayValidator

    asked: list[tuple[str | None, dict[str, Any]]] = []
    real = factory.make_validator

    def make(spec: str | None = None, **options: Any) -> Any:
        asked.append((spec, options))
        assert isinstance(real(spec, **{**options, "actors": 2}), RayValidator)  # the factory's own answer...
        # ... with the test's one seed per case, to stay quick
        return RayValidator(cache=options["cache"], device=options["device"], actors=2, seeds=1,
                            timing=options["timing"])

    monkeypatch.setattr(factory, "make_validator", make)
    ran = validator.stats["ran"]
    out = tmp_path / "rowsum.lineage.json"
    done = CliRunner().invoke(app, ["walk", str(ROWSUM), "--validator", "ray", "--parallel", "2", "--cpu",
                                    "--cache", str(cache_path), "--out", str(out), "--no-skills"])
    assert done.exit_code == 0, done.output
    assert [spec for spec, _ in asked] == ["ray", "ray"]
    assert {json.dumps(o["timing"], sort_keys=True) for _, o in asked} == {
        json.dumps({"rep_ms": 50.0, "baseline": False}, sort_keys=True), "null"}
    doc = json.loads(out.read_text())
    assert doc["measured"] is False and doc["steps"], doc
    assert validator.stats["ran"] - ran >= len(doc["steps"])  # every step's checks ran on Ray (the start: cached)


def _kill_when_running(validator: Any, tag_part: str, after_s: float = 0.5) -> tuple[int, int]:
    """SIGKILL the actor process running a job whose tag contains ``tag_part``; (actor index, pid)."""
    import ray

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for index, actor in enumerate(validator.actors):
            if any(tag_part in tag for tag in ray.get(actor.running.remote())):
                time.sleep(after_s)  # well inside the job: compile and correctness run in the workers
                pid = ray.get(actor.where.remote())["pid"]
                os.kill(pid, signal.SIGKILL)
                return index, pid
        time.sleep(0.1)
    raise AssertionError(f"no actor ran {tag_part} within 90 s")


def test_a_worker_killed_mid_job_is_retried_once_elsewhere_and_its_attempt_writes_nothing(validator: Any) -> None:
    from klineage.schema.ids import kernel_sha

    source = _spinning(20_000_000, "killed once")
    key = validator.prepare(source, ROWSUM, ["compile", "correctness"], ONE_SHAPE)[-1]
    box: dict[str, Any] = {}

    def submit() -> None:
        box["result"] = validator.validate(source, ROWSUM, ["compile", "correctness"], ONE_SHAPE)
        box["where"] = validator.last_where

    thread = threading.Thread(target=submit)
    thread.start()
    index, pid = _kill_when_running(validator, kernel_sha(source)[:12])
    assert validator.cached(key) is None  # the lost attempt wrote nothing
    thread.join(timeout=180)
    assert not thread.is_alive()
    result: GateResult = box["result"]
    assert result.verdict == "pass", result.to_dict()["gates"]
    for gate in ("static", "compile", "correctness"):
        metrics = result.gate(gate).metrics  # type: ignore[union-attr]
        assert metrics["ray_retries"] == 1, metrics
        assert len(metrics["ray_lost"]) == 1 and f"on actor {index}" in metrics["ray_lost"][0]
    assert "ray_retries" not in result.gate("integrity").metrics  # type: ignore[union-attr]
    assert box["where"]["attempts"] == 2 and box["where"]["actor"] != index and box["where"]["pid"] != pid
    assert validator.stats["retried"] >= 1 and any(kernel_sha(source)[:12] in line for line in validator.lost_log)
    # The cache holds the retry's complete result (the record of the loss is on the answer only).
    stored = validator.cached(key)
    assert stored is not None and _summary(stored) == _summary(result)
    assert stored.gate("correctness").metrics["gate_wall_s"] == result.gate("correctness").metrics["gate_wall_s"]


def test_a_job_lost_on_its_last_attempt_fails_cleanly_and_is_not_cached(validator: Any, cache_path: Path) -> None:
    from klineage.schema.ids import kernel_sha
    from klineage.validator.ray_backend import RayValidator

    no_retry = RayValidator(cache=cache_path, device="cpu", actors=2, seeds=1, max_retries=0)
    assert no_retry.actors == validator.actors  # same settings: the same actors
    source = _spinning(20_000_000, "killed, no retry")
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", no_retry.validate(source, ROWSUM,
                                                                                       ["correctness"], ONE_SHAPE)))
    thread.start()
    _kill_when_running(no_retry, kernel_sha(source)[:12])
    thread.join(timeout=120)
    result: GateResult = box["result"]
    assert result.verdict == "fail" and result.failed_gate.gate == "static"  # type: ignore[union-attr]
    reason = result.failed_gate.reason  # type: ignore[union-attr]
    assert reason.startswith("the job ended before this gate ran: the Ray worker running it was lost on each of "
                             "its 1 attempt(s), not retried again (attempt 1 on actor ")
    assert "ActorUnavailableError" in reason or "ActorDiedError" in reason or "RayActorError" in reason
    assert [g.status for g in result.gates] == ["fail", "skipped", "skipped", "skipped", "skipped"]
    assert result.gate("correctness").reason == "earlier gate failed (static)"  # type: ignore[union-attr]
    assert result.gate("static").metrics["ray_retries"] == 0  # type: ignore[union-attr]
    assert no_retry.cached(no_retry.prepare(source, ROWSUM, ["correctness"], ONE_SHAPE)[-1]) is None


def test_the_service_runs_its_jobs_through_ray(ray_module: Any, cache_path: Path, batch: dict[str, Any]) -> None:
    from fastapi.testclient import TestClient

    from klineage.validator.service import ServiceConfig, create_app

    config = ServiceConfig(workload_roots=[ROWSUM.parent], cache_path=cache_path, device="cpu", workers=1,
                           ray_address="auto")
    with TestClient(create_app(config)) as client:
        info = client.get("/v1/info").json()
        assert info["backend"] == "ray" and info["workers"] == 1 and info["cuda"] is False
        body = {"candidate": BATCH[0][1], "workload": "rowsum", "gates": ["correctness"]}
        measured = client.post("/v1/validate", json=body)  # 5 seeds (the batch had 1): a new job, on Ray
        assert measured.status_code == 200 and measured.headers["X-Klineage-Cached"] == "0"
        assert measured.json()["verdict"] == "pass"
        assert "20 cases within tolerance" in measured.json()["gates"][2]["reason"]
        again = client.post("/v1/validate", json=body)
        assert again.headers["X-Klineage-Cached"] == "1" and again.json() == measured.json()
        refused = client.post("/v1/validate", json={"candidate": "import os\n", "workload": "rowsum"})
        assert refused.status_code == 200 and refused.json()["verdict"] == "fail"
        assert "forbidden import 'os'" in refused.json()["gates"][0]["reason"]
        manager = client.app.state.manager
        assert manager.ray is not None and manager.ray.stats["ran"] == 2 and len(manager.ray.actors) == 1


def test_bad_input_is_refused_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from klineage.validator import HttpValidator
    from klineage.validator.factory import make_validator, ray_address
    from klineage.validator.ray_backend import RAY_MISSING, import_ray

    assert ray_address("ray") == (True, None) and ray_address("ray:auto") == (True, "auto")
    assert ray_address("ray:10.0.0.1:6379") == (True, "10.0.0.1:6379")
    assert ray_address("ray://head:10001") == (True, "ray://head:10001")
    assert ray_address("http://x:8100") == (False, None) and ray_address("ray:") == (False, None)
    assert isinstance(make_validator(None, device="cpu"), LocalValidator)
    assert isinstance(make_validator("local", device="cpu"), LocalValidator)
    assert isinstance(make_validator("http://127.0.0.1:9"), HttpValidator)
    with pytest.raises(ValidationRequestError, match="unknown validator 'rayy'"):
        make_validator("rayy")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ValidatorUnavailable, match=r'pip install -e "\.\[ray\]"'):
        import_ray()
    assert "ray" in RAY_MISSING
    monkeypatch.undo()
    # In a fresh process: KLineage imports without Ray, and an address nobody answers is refused at once.
    candidate = tmp_path / "candidate.py"
    candidate.write_text(BATCH[0][1])
    probe = ("import sys; sys.modules['ray'] = None; import klineage.validator.ray_backend, "
             "klineage.validator.factory, klineage.cli.main; print('imported')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr
    start = time.monotonic()
    cli = subprocess.run([sys.executable, "-c", "from klineage.cli.main import app; app()", "validate",
                          str(candidate), "--workload", str(ROWSUM), "--validator", "ray:127.0.0.1:9"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert cli.returncode == 2, (cli.stdout, cli.stderr)
    assert "no Ray cluster answers at 127.0.0.1:9" in " ".join(cli.stderr.split())
    assert time.monotonic() - start < 60
