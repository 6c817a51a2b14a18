"""One interface to the validator, in process or over HTTP: what ingest and agent call.

``ValidatorClient.validate(candidate_source, workload_dir, gates, shapes) -> GateResult``

* ``LocalValidator`` runs jobs from this process, the *trusted side* (inputs, reference, comparison,
  verdict, cache), each candidate in a warm sandboxed worker process that only runs it, with an
  optional SQLite result cache written only here.
* ``HttpValidator(base_url)`` talks to ``klineage validator serve``. The service refers to workloads by
  *name* (the folder name under its configured roots, ``KLINEAGE_WORKLOADS``): workload code is
  executed by the service's workers, so only workloads that live on the server can be used. When
  ``workload_dir`` is a local folder, its name is sent along with the SHA-256 of its manifest, and the
  service refuses (409) if its copy differs.

Bad requests (unknown gate, missing workload, malformed manifest, non-UTF-8 candidate) raise
``ValidationRequestError`` before any job is created.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from klineage.schema.gate_result import GATES, GateOutcome, GateResult
from klineage.schema.ids import kernel_sha, sha256_text
from klineage.validator.cache import ResultCache, ResultStore
from klineage.validator.pool import WorkerPool
from klineage.validator.runner import (
    DeviceInfo,
    JobOutput,
    ValidationRequestError,
    WorkloadRef,
    cache_key,
    check_candidate_text,
    load_workload,
    measure_device_ceilings,
    normalize_gates,
    normalize_shapes,
    probe_device,
    validate_job,
)
from klineage.validator.single_flight import SingleFlight

__all__ = ["HttpValidator", "LocalValidator", "PreparedRequest", "ValidationRequestError", "ValidatorClient",
           "ValidatorUnavailable", "prepare_request"]

# A checked request: (source, workload, gates in canonical order, shapes or None, result-cache key).
PreparedRequest = tuple[str, WorkloadRef, tuple[str, ...], tuple[dict[str, int | bool], ...] | None, str]


class ValidatorUnavailable(RuntimeError):
    """The validator service could not be reached or answered with a server error."""


@runtime_checkable
class ValidatorClient(Protocol):
    """Anything that validates a candidate against a workload and returns the gate result document."""

    def validate(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] = GATES,
                 shapes: Sequence[Mapping[str, int | bool]] | None = None) -> GateResult:
        """Run ``gates`` on ``candidate_source`` for the workload; ``shapes`` None = the manifest's grid."""
        ...


def _timing_that_matters(source: str, timing: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``timing`` without ``autotune_rep_ms`` when ``source`` cannot autotune: the option only sets how
    long an autotuner times its configs, and the static gate lets a candidate reach one only through
    ``triton.autotune`` written out (a text check: a comment naming it merely keeps the option in the key)."""
    if not timing or "autotune_rep_ms" not in timing or "autotune" in source:
        return timing
    return {k: v for k, v in timing.items() if k != "autotune_rep_ms"}


def prepare_request(candidate_source: str, workload_dir: Path | str, gates: Sequence[str] | str | None,
                    shapes: Any, device: DeviceInfo, seeds: int,
                    timing: Mapping[str, Any] | None) -> PreparedRequest:
    """Check a request (raises ValidationRequestError) and return its parts and its result-cache key.

    ``device``: what the jobs run on (the key names the GPU and the versions); ``timing``: the
    performance-gate options, part of the key only when the performance gate is requested, and
    ``autotune_rep_ms`` only for a candidate that can autotune (no other result depends on it). Every
    validator that runs jobs itself (``LocalValidator``, ``RayValidator``) keys its cache through here.
    """
    source = check_candidate_text(candidate_source)
    workload = load_workload(workload_dir)
    wanted = normalize_gates(gates)
    shape_list = normalize_shapes(list(shapes) if shapes is not None else None)
    options = _timing_that_matters(source, timing) if "performance" in wanted else None
    key = cache_key(kernel_sha(source), workload, shape_list, wanted, device, seeds, options)
    return source, workload, wanted, shape_list, key


class LocalValidator:
    """Validate in this process's control, each job sandboxed in a worker subprocess.

    ``cache``: a ResultCache (or any ``ResultStore``) or a path to its SQLite file (None: no cache).
    ``device``: ``"auto"`` (the GPU when the worker sees one) or ``"cpu"`` (interpreter mode even on a GPU
    machine).
    ``timeout_s``: wall-clock limit per job (default: derived from the work, ``trusted.job_time_limit``,
    and stated in each gate's metrics). ``pool``: the warm worker pool the jobs run in (default: the
    process-wide ``pool.default_pool()``). ``max_timeout_s``: a cap on any job's limit (the service's).
    ``timing``:
    performance-gate options, e.g. ``{"rep_ms": 50, "baseline": False, "host_lead_us": 200,
    "autotune_rep_ms": 25}`` (the last: how long an autotuned candidate's autotuner times each config; None:
    the gate's defaults, 100 ms per case, the vendor timed beside the candidate, no host lead).
    """

    def __init__(self, cache: ResultStore | Path | str | None = None, timeout_s: float | None = None,
                 device: str = "auto", seeds: int = 5, visible_devices: str | None = None,
                 timing: Mapping[str, Any] | None = None, pool: WorkerPool | None = None,
                 max_timeout_s: float | None = None) -> None:
        if device not in ("auto", "cpu"):
            raise ValueError("device must be 'auto' or 'cpu'")
        self.cache: ResultStore | None = ResultCache(cache) if isinstance(cache, Path | str) else cache
        self.timeout_s = timeout_s
        self.force_cpu = device == "cpu"
        self.seeds = seeds
        self.visible_devices = visible_devices
        self.timing = dict(timing) if timing else None
        self.pool = pool
        self.max_timeout_s = max_timeout_s
        self.last_cached = False
        self.last_output: JobOutput | None = None
        self._ceilings: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._flights: SingleFlight[tuple[GateResult, bool]] = SingleFlight()

    def device_info(self) -> DeviceInfo:
        """What the worker processes run on (probed once)."""
        return probe_device(force_cpu=self.force_cpu)

    def ceilings(self) -> dict[str, Any] | None:
        """Device copy bandwidth and bf16 GEMM rate: measured once per GPU and versions, then cached."""
        info = self.device_info()
        if not info.cuda:
            return None
        with self._lock:
            if self._ceilings is None:
                key = sha256_text(f"{info.gpu}|{sorted(info.versions.items())}")
                stored = self.cache.get_ceilings(key) if self.cache is not None else None
                if stored is None:
                    stored = measure_device_ceilings(visible_devices=self.visible_devices)
                    if self.cache is not None:
                        self.cache.put_ceilings(key, stored)
                self._ceilings = stored
            return self._ceilings

    def prepare(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] | str | None,
                shapes: Any) -> PreparedRequest:
        """Check a request (raises ValidationRequestError) and return its parts and its cache key."""
        return prepare_request(candidate_source, workload_dir, gates, shapes, self.device_info(), self.seeds,
                               self.timing)

    def cached(self, key: str) -> GateResult | None:
        """The cached result for a prepared request's key, if any."""
        return self.cache.get(key) if self.cache is not None else None

    def validate(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] = GATES,
                 shapes: Sequence[Mapping[str, int | bool]] | None = None,
                 timeout_s: float | None = None) -> GateResult:
        """Validate ``candidate_source`` (see ValidatorClient); served from the cache when possible.

        ``timeout_s`` overrides the validator's per-job wall-clock limit for this call.
        """
        source, workload, wanted, shape_list, key = self.prepare(candidate_source, workload_dir, gates, shapes)

        def answer() -> tuple[GateResult, bool]:
            hit = self.cached(key)
            if hit is not None:
                self._store_checks_of(source, workload_dir, wanted, shapes, hit)
                return hit, True
            info = self.device_info()
            ceilings = self.ceilings() if info.cuda and "performance" in wanted else None
            output = validate_job(source, workload, wanted, shape_list, info,
                                  timeout_s=timeout_s or self.timeout_s, seeds=self.seeds, ceilings=ceilings,
                                  visible_devices=self.visible_devices,
                                  timing=self.timing if "performance" in wanted else None, pool=self.pool,
                                  max_timeout_s=self.max_timeout_s)
            self.last_output = output
            if self.cache is not None and output.cacheable:
                self.cache.put(key, output.result)
                self._store_checks_of(source, workload_dir, wanted, shapes, output.result)
            return output.result, False

        # side-by-side callers asking for the same job while it runs get its answer (validated once)
        (result, cached), shared = self._flights.do(key, answer)
        self.last_cached = cached or shared
        return result

    def _store_checks_of(self, source: str, workload_dir: Path | str, wanted: Sequence[str], shapes: Any,
                         result: GateResult) -> None:
        """A job that ran the checking gates and the performance gate also answers the same request
        without performance: that answer is cached too (when missing), so that a later request under
        other timing options re-runs only the performance gate. The checks never depend on timing."""
        if self.cache is None or "performance" not in wanted or len(wanted) < 3:
            return
        checks = tuple(g for g in wanted if g != "performance")
        key = self.prepare(source, workload_dir, checks, shapes)[-1]
        if self.cache.get(key) is None:
            gates = tuple(g if g.gate != "performance" else GateOutcome("performance", "skipped", "not requested")
                          for g in result.gates)
            self.cache.put(key, replace(result, gates=gates))

    def validate_file(self, path: Path | str, workload_dir: Path | str, gates: Sequence[str] = GATES,
                      shapes: Sequence[Mapping[str, int | bool]] | None = None) -> GateResult:
        """Read ``path`` (must exist and be UTF-8) and validate it."""
        file = Path(path)
        if not file.is_file():
            raise ValidationRequestError(f"candidate file {str(file)!r} does not exist", 404)
        return self.validate(check_candidate_text(file.read_bytes()), workload_dir, gates, shapes)


class HttpValidator:
    """Client of the validator service (``klineage validator serve``)."""

    def __init__(self, base_url: str, timeout_s: float = 900.0, poll_s: float = 0.5, client: Any = None) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._client = client or httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout_s))

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ValidatorUnavailable(f"validator at {self.base_url} unreachable: {exc}") from exc
        if 400 <= response.status_code < 500:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise ValidationRequestError(str(message), response.status_code)
        if response.status_code >= 500:
            raise ValidatorUnavailable(f"validator error {response.status_code}: {response.text[:300]}")
        return response

    def info(self) -> dict[str, Any]:
        """The service's GPU, versions, ceilings and workloads."""
        return dict(self._request("GET", "/v1/info").json())

    def device_info(self) -> DeviceInfo:
        """What the service's workers run on (from ``/v1/info``), as ``LocalValidator.device_info`` says it."""
        data = self.info()
        return DeviceInfo(gpu=str(data["gpu"]), versions={k: str(v) for k, v in data["versions"].items()},
                          cuda=bool(data["cuda"]), device_count=int(data.get("workers", 1)) if data["cuda"] else 0)

    def validate(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] = GATES,
                 shapes: Sequence[Mapping[str, int | bool]] | None = None) -> GateResult:
        """Validate over HTTP (see the module docstring for how the workload is named)."""
        source = check_candidate_text(candidate_source)
        path = Path(workload_dir)
        body: dict[str, Any] = {"candidate": source, "workload": path.name, "gates": list(normalize_gates(gates)),
                                "shapes": [dict(s) for s in shapes] if shapes is not None else None,
                                "wait_s": self.timeout_s}
        manifest = path / "manifest.toml"
        if manifest.is_file():
            body["manifest_sha"] = sha256_text(manifest.read_bytes().decode("utf-8", "replace"))
        deadline = time.monotonic() + self.timeout_s
        response = self._request("POST", "/v1/validate", json=body)
        while response.status_code == 202:
            if time.monotonic() > deadline:
                raise ValidatorUnavailable(f"job {response.json().get('id')} not finished after {self.timeout_s} s")
            time.sleep(self.poll_s)
            job_id = response.json()["id"]
            job = self._request("GET", f"/v1/jobs/{job_id}").json()
            if job["status"] == "done":
                return GateResult.from_dict(job["result"])
            if job["status"] == "error":
                status = job.get("error_status")
                if isinstance(status, int) and 400 <= status < 500:  # a request error found while it ran
                    raise ValidationRequestError(str(job.get("error")), status)
                raise ValidatorUnavailable(f"job {job_id} failed in the service: {job.get('error')}")
        return GateResult.from_dict(response.json())

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()
