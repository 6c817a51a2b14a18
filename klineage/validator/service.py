"""The validator service: FastAPI over a job queue with one worker thread per GPU (one on CPU).

Endpoints

* ``POST /v1/jobs`` — body ``{"candidate": str, "workload": name, "gates": [..]?, "shapes": [..]?,
  "manifest_sha": str?, "timeout_s": number?}`` (``timeout_s``: a shorter or longer wall-clock limit for
  this job, at most ``max_job_timeout_s``) → 202 ``{"id", "status", "cached"}``. A cached result gives a job that is
  already ``done``; an identical job still queued or running is returned instead of a new one.
* ``GET /v1/jobs/{id}`` → ``{"id", "status": queued|running|done|error, "cached", "result"?, ...}``.
* ``POST /v1/validate`` — the same body plus ``"wait_s"`` → 200 with the gate result document, or 202
  ``{"id", "status"}`` when the job has not finished within ``min(wait_s, max_sync_wait_s)``.
* ``GET /v1/info`` — GPU, versions, device ceilings, workloads, limits. ``GET /healthz``.

With ``$KLINEAGE_VALIDATOR_TOKEN`` set (``ServiceConfig.token``), the job endpoints need
``Authorization: Bearer <token>`` (401 otherwise; ``/healthz`` and ``/v1/info`` stay open); serving
beyond the loopback interface without one prints a warning. Server-side caps: body size
(413), ``timeout_s`` and the derived time limit (``max_job_timeout_s``), elements per requested shape
(422), and a bounded queue: a new job when ``max_queued`` jobs are already waiting is answered 429.

Workloads are named, never sent: ``workload`` is a folder name under one of the roots in
``KLINEAGE_WORKLOADS`` (``os.pathsep``-separated; default ``./workloads`` and ``./heldout``), because
workload code (``reference.py``) runs in the workers. A request that is refused — body over the size
limit (413), not UTF-8 or not JSON (400), unknown gate or bad shapes (422), unknown workload (404),
malformed manifest (422), manifest differing from the client's copy (409) — creates no job.

Each job runs through ``runner.validate_job``: this process is the trusted side (inputs, reference,
comparison, verdict, cache); the candidate runs only in a warm sandboxed worker process
(``pool.py``), so a hang or crash ends that job (and that worker) and the service answers the next.
Results are cached in SQLite (``KLINEAGE_VALIDATOR_CACHE``, default ``.klineage/validator/cache.sqlite``).

With ``ServiceConfig.ray_address`` (``klineage validator serve --ray ADDRESS``) the jobs run on a Ray
cluster instead (``ray_backend.RayValidator``: one actor per GPU of the cluster, each a trusted side with
its own warm workers, the same gates, limits and documents; the SQLite cache here shared by every actor);
the service keeps one thread per actor feeding them, and checks requests and the cache as before.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import os
import queue
import re
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from klineage.schema.gate_result import GATES
from klineage.validator.baseline_timer import shutdown_baseline_timers
from klineage.validator.cache import ResultCache
from klineage.validator.client import LocalValidator
from klineage.validator.pool import shutdown_default_pool
from klineage.validator.runner import ValidationRequestError
from klineage.validator.sandbox import kill_live_workers

if TYPE_CHECKING:
    from klineage.validator.ray_backend import RayValidator

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
TOKEN_ENV = "KLINEAGE_VALIDATOR_TOKEN"


def default_workload_roots() -> list[Path]:
    """Roots from ``KLINEAGE_WORKLOADS`` (``os.pathsep``-separated), else ./workloads and ./heldout."""
    env = os.environ.get("KLINEAGE_WORKLOADS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path("workloads"), Path("heldout")]


@dataclass
class ServiceConfig:
    """Service settings; every field has a default usable on a developer machine."""

    workload_roots: list[Path] = field(default_factory=default_workload_roots)
    cache_path: Path | None = field(default_factory=lambda: Path(
        os.environ.get("KLINEAGE_VALIDATOR_CACHE", ".klineage/validator/cache.sqlite")))
    max_body_bytes: int = 1 << 20
    max_sync_wait_s: float = 900.0
    job_timeout_s: float | None = None
    max_job_timeout_s: float = 1800.0
    workers: int | None = None
    device: str = "auto"
    max_jobs_kept: int = 10_000
    measure_ceilings_at_start: bool = True
    token: str | None = field(default_factory=lambda: os.environ.get(TOKEN_ENV) or None)
    max_queued: int = 64
    max_shape_elements: int = 1 << 31
    # Run jobs on a Ray cluster: "auto", "local", "HOST:PORT" or "ray://HOST:PORT" (None: in this process).
    # ``workers`` then counts Ray actors (default: one per GPU of the cluster, or per CPU without GPUs).
    ray_address: str | None = None


@dataclass
class Job:
    """One queued, running or finished job."""

    id: str
    key: str
    workload: str
    gates: tuple[str, ...]
    status: str = "queued"
    cached: bool = False
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    error_status: int | None = None  # a request error found while the job ran (a broken workload): its 4xx
    done: threading.Event = field(default_factory=threading.Event)
    payload: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "status": self.status, "cached": self.cached,
                               "workload": self.workload, "gates": list(self.gates), "created": self.created,
                               "started": self.started, "finished": self.finished}
        if self.result is not None:
            out["result"] = self.result
            out["verdict"] = self.result.get("verdict")
        if self.error is not None:
            out["error"] = self.error
        if self.error_status is not None:
            out["error_status"] = self.error_status
        return out


class RequestRefused(Exception):
    """A request refused before any job exists: HTTP ``status`` and a clear message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class JobManager:
    """The queue, the worker threads and the job table."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        cache = ResultCache(config.cache_path) if config.cache_path is not None else None
        self.validators: list[LocalValidator] = []
        self.cache = cache
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.jobs: dict[str, Job] = {}
        self.inflight: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.ceilings: dict[str, Any] | None = None
        self.ceilings_error: str | None = None
        self.ray: RayValidator | None = None
        if config.ray_address is not None:
            from klineage.validator.ray_backend import RayValidator

            self.ray = RayValidator(config.ray_address, cache=cache, device=config.device, actors=config.workers,
                                    timeout_s=config.job_timeout_s, max_timeout_s=config.max_job_timeout_s)
        self.info_validator: LocalValidator | RayValidator = self.ray or LocalValidator(
            cache=cache, timeout_s=config.job_timeout_s, device=config.device)

    def start(self) -> None:
        """Probe the device and start one worker thread per GPU (one without a GPU); with Ray, one per
        job slot of the cluster's actors."""
        if self.ray is not None:
            for i in range(self.ray.slots):
                thread = threading.Thread(target=self._work, args=(self.ray, i == 0), daemon=True,
                                          name=f"klineage-validator-ray-{i}")
                thread.start()
                self.threads.append(thread)
            return
        info = self.info_validator.device_info()
        count = self.config.workers or (max(1, info.device_count) if info.cuda else 1)
        for i in range(count):
            visible = str(i) if info.cuda and count > 1 else None
            validator = LocalValidator(cache=self.cache, timeout_s=self.config.job_timeout_s,
                                       device=self.config.device, visible_devices=visible,
                                       max_timeout_s=self.config.max_job_timeout_s)
            self.validators.append(validator)
            thread = threading.Thread(target=self._work, args=(validator, i == 0), daemon=True,
                                      name=f"klineage-validator-{i}")
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        """Stop the worker threads: queued jobs are dropped, running worker processes are killed."""
        for _ in self.threads:
            self.queue.put(None)
        kill_live_workers()
        shutdown_default_pool()
        shutdown_baseline_timers()
        if self.ray is not None:
            self.ray.close()

    def _work(self, validator: LocalValidator | RayValidator, first: bool) -> None:
        if first and self.config.measure_ceilings_at_start and validator.device_info().cuda:
            try:
                self.ceilings = validator.ceilings()
            except Exception as exc:  # reported by /v1/info; performance jobs retry
                self.ceilings_error = str(exc)
        while True:
            job = self.queue.get()
            if job is None:
                return
            job.status, job.started = "running", time.time()
            try:
                source, workload_dir, gates, shapes, timeout = job.payload
                result = validator.validate(source, workload_dir, gates, shapes, timeout_s=timeout)
                job.result = result.to_dict()
                job.cached = validator.last_cached
                job.status = "done"
            except ValidationRequestError as exc:  # the workload's trusted code is broken: the request's fault
                job.status, job.error, job.error_status = "error", str(exc), exc.status
            except Exception as exc:
                job.status, job.error = "error", f"{type(exc).__name__}: {exc}"
            finally:
                job.finished = time.time()
                job.payload = ()
                with self.lock:
                    self.inflight.pop(job.key, None)
                job.done.set()

    def resolve_workload(self, name: Any) -> Path:
        """The folder of workload ``name`` under the configured roots; RequestRefused when unknown."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise RequestRefused(422, "workload must be a workload folder name (letters, digits, '_', '-', '.')")
        for root in self.config.workload_roots:
            folder = root / name
            if (folder / "manifest.toml").is_file():
                return folder
        known = ", ".join(self.workload_names()[:20]) or "none"
        raise RequestRefused(404, f"unknown workload {name!r} (known: {known})")

    def workload_names(self) -> list[str]:
        """Names of the workload folders under the roots."""
        names: list[str] = []
        for root in self.config.workload_roots:
            if root.is_dir():
                names.extend(p.name for p in sorted(root.iterdir()) if (p / "manifest.toml").is_file())
        return sorted(set(names))

    def submit(self, body: dict[str, Any]) -> Job:
        """Check a request body and queue its job (or return the cached / in-flight one)."""
        unknown = set(body) - {"candidate", "workload", "gates", "shapes", "manifest_sha", "wait_s", "timeout_s"}
        if unknown:
            raise RequestRefused(422, f"unknown field {sorted(unknown)[0]!r}")
        candidate = body.get("candidate")
        if not isinstance(candidate, str):
            raise RequestRefused(422, "candidate must be the candidate module's source text (a string)")
        folder = self.resolve_workload(body.get("workload"))
        try:
            source, workload, gates, shapes, key = self.info_validator.prepare(
                candidate, folder, body.get("gates"), body.get("shapes"))
        except ValidationRequestError as exc:
            raise RequestRefused(exc.status, str(exc)) from exc
        timeout = body.get("timeout_s")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not 0 < timeout <= self.config.max_job_timeout_s):
            limit = self.config.max_job_timeout_s
            raise RequestRefused(422, f"timeout_s must be a number of seconds in (0, {limit:g}]")
        for i, shape in enumerate(shapes or ()):
            elements = math.prod(int(v) for v in shape.values() if not isinstance(v, bool))
            if elements > self.config.max_shape_elements:
                raise RequestRefused(422, f"shapes[{i}] has {elements} elements, over the server's limit of "
                                     f"{self.config.max_shape_elements}")
        expected = body.get("manifest_sha")
        if expected is not None and expected != workload.manifest_sha:
            raise RequestRefused(409, f"workload {workload.name!r} on the server differs from the client's copy "
                                 "(manifest sha256 mismatch)")
        with self.lock:
            if key in self.inflight:
                return self.inflight[key]
            job = Job(id=uuid.uuid4().hex, key=key, workload=workload.name, gates=gates)
            hit = self.info_validator.cached(key)
            if hit is not None:
                job.status, job.cached, job.result = "done", True, hit.to_dict()
                job.finished = job.started = time.time()
                job.done.set()
            else:
                if self.queue.qsize() >= self.config.max_queued:
                    raise RequestRefused(429, f"the queue is full ({self.config.max_queued} jobs waiting); "
                                         "retry later")
                job.payload = (source, folder, gates, shapes, timeout)
                self.inflight[key] = job
            self.jobs[job.id] = job
            self._trim()
        if not job.done.is_set():
            self.queue.put(job)
        return job

    def _trim(self) -> None:
        if len(self.jobs) <= self.config.max_jobs_kept:
            return
        for job_id in [j.id for j in self.jobs.values() if j.done.is_set()][: len(self.jobs) // 10 + 1]:
            self.jobs.pop(job_id, None)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request, limit: int) -> dict[str, Any]:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestRefused(413, f"request body of {length} bytes is over the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestRefused(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestRefused(400, f"request body is not valid UTF-8 (byte {exc.start})") from exc
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestRefused(400, f"request body is not JSON: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(body, dict):
        raise RequestRefused(400, "request body must be a JSON object")
    return body


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """Build the service (the job manager starts with the app's lifespan)."""
    config = config or ServiceConfig()
    manager = JobManager(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(manager.start)
        yield
        manager.stop()

    app = FastAPI(title="KLineage validator", version="1", lifespan=lifespan)
    app.state.manager = manager

    @app.exception_handler(RequestRefused)
    async def refused(request: Request, exc: RequestRefused) -> JSONResponse:
        return _error(exc.status, exc.message)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "queued": manager.queue.qsize(), "workers": len(manager.threads)}

    @app.get("/v1/info")
    async def info() -> dict[str, Any]:
        device = manager.info_validator.device_info()
        ceilings: Any = manager.ceilings
        if ceilings is None:
            ceilings = {"status": "no GPU: not measured"} if not device.cuda else \
                {"status": manager.ceilings_error or "measuring"}
        return {"gpu": device.gpu, "versions": device.versions, "cuda": device.cuda,
                "workers": len(manager.threads), "backend": "ray" if manager.ray is not None else "local",
                "ceilings": ceilings, "gates": list(GATES),
                "workloads": manager.workload_names(),
                "workload_roots": [str(p) for p in config.workload_roots],
                "limits": {"max_body_bytes": config.max_body_bytes, "max_sync_wait_s": config.max_sync_wait_s,
                           "job_timeout_s": config.job_timeout_s, "max_job_timeout_s": config.max_job_timeout_s,
                           "max_queued": config.max_queued, "max_shape_elements": config.max_shape_elements,
                           "token_required": config.token is not None}}

    def authorize(request: Request) -> None:
        if config.token is None:
            return
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer ") or not hmac.compare_digest(header.removeprefix("Bearer ").strip(),
                                                                        config.token):
            raise RequestRefused(401, f"this validator needs the header 'Authorization: Bearer <token>' "
                                 f"matching ${TOKEN_ENV}")

    @app.post("/v1/jobs", status_code=202)
    async def create_job(request: Request) -> JSONResponse:
        authorize(request)
        body = await _read_body(request, config.max_body_bytes)
        job = await asyncio.to_thread(manager.submit, body)
        return JSONResponse({"id": job.id, "status": job.status, "cached": job.cached}, status_code=202)

    @app.get("/v1/jobs/{job_id}")
    async def get_job(job_id: str, request: Request) -> JSONResponse:
        authorize(request)
        job = manager.jobs.get(job_id)
        if job is None:
            return _error(404, f"unknown job {job_id!r}")
        return JSONResponse(job.to_dict())

    @app.post("/v1/validate")
    async def validate(request: Request) -> JSONResponse:
        authorize(request)
        body = await _read_body(request, config.max_body_bytes)
        wait = body.get("wait_s", config.max_sync_wait_s)
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
            raise RequestRefused(422, "wait_s must be a non-negative number of seconds")
        job = manager.submit(body) if _cheap(body) else await asyncio.to_thread(manager.submit, body)
        deadline = time.monotonic() + min(float(wait), config.max_sync_wait_s)
        while not job.done.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        headers = {"X-Klineage-Job": job.id, "X-Klineage-Cached": "1" if job.cached else "0"}
        if job.status == "done" and job.result is not None:
            return JSONResponse(job.result, headers=headers)
        if job.status == "error":
            if job.error_status is not None:
                return _error(job.error_status, job.error or "bad request")
            return _error(500, f"job {job.id} failed in the service: {job.error}")
        return JSONResponse({"id": job.id, "status": job.status}, status_code=202, headers=headers)

    return app


def _cheap(body: dict[str, Any]) -> bool:
    """Small requests are checked inline (no thread hop): the cached path stays fast."""
    candidate = body.get("candidate")
    return isinstance(candidate, str) and len(candidate) < 200_000


def serve(host: str = "127.0.0.1", port: int = 8100, config: ServiceConfig | None = None) -> None:
    """Run the service with uvicorn (blocking). Warns when listening beyond the loopback interface without
    a token (``$KLINEAGE_VALIDATOR_TOKEN``): the service runs submitted code in its workers (the compose
    file binds 0.0.0.0 inside its container and publishes the port on the host's loopback only)."""
    import sys

    import uvicorn

    config = config or ServiceConfig()
    if config.token is None and host not in ("127.0.0.1", "localhost", "::1"):
        print(f"WARNING: serving on {host} without a token: anyone who reaches the port can run code in the "
              f"workers; set ${TOKEN_ENV}", file=sys.stderr)

    uvicorn.run(create_app(config), host=host, port=port, log_level="info")


__all__ = ["JobManager", "RequestRefused", "ServiceConfig", "create_app", "serve"]
