"""One validation job, parent side: check the request, run ``static``, sandbox the rest, build the document.

``validate_job`` is what ``LocalValidator``, the service's workers and the CLI all call. The candidate
is never executed in the calling process: only parsed (the static gate). Everything else happens in a
worker subprocess (``sandbox.run_worker``), whose progress file tells which gate was running when it
was killed or died.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klineage.schema.errors import ManifestError
from klineage.schema.gate_result import GATES, GateOutcome, GateResult
from klineage.schema.ids import canonical_json, kernel_sha, sha256_text
from klineage.schema.manifest import WorkloadManifest, load_manifest
from klineage.validator.sandbox import clean_env, run_worker
from klineage.validator.static import check_source

DEFAULT_TIMEOUT_CPU_S = 300.0
DEFAULT_TIMEOUT_GPU_S = 600.0
CPU_MEMORY_BYTES = 12 * 1024**3


class ValidationRequestError(ValueError):
    """A request the validator refuses before creating a job (bad usage: exit code 2, HTTP 4xx)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def normalize_gates(gates: Sequence[str] | str | None) -> tuple[str, ...]:
    """Gates in canonical order; ``static`` always included (it guards the sandbox); unknown names refused."""
    if gates is None:
        return GATES
    if isinstance(gates, str):
        gates = [g for g in gates.split(",") if g.strip()]
    names = [str(g).strip() for g in gates]
    unknown = [g for g in names if g not in GATES]
    if unknown:
        raise ValidationRequestError(f"unknown gate {unknown[0]!r}; expected some of {', '.join(GATES)}", 422)
    if not names:
        raise ValidationRequestError(f"no gates given; expected some of {', '.join(GATES)}", 422)
    wanted = {"static", *names}
    return tuple(g for g in GATES if g in wanted)


def normalize_shapes(shapes: Any) -> tuple[dict[str, int | bool], ...] | None:
    """Check a shape list (``[{"M": 64, ...}, ...]``); None means the manifest's grid."""
    if shapes is None:
        return None
    if not isinstance(shapes, list | tuple) or not shapes:
        raise ValidationRequestError("shapes must be a non-empty list of {dimension: integer} objects", 422)
    out = []
    for i, shape in enumerate(shapes):
        if not isinstance(shape, Mapping) or not shape:
            raise ValidationRequestError(f"shapes[{i}] must be a non-empty object of dimension: integer", 422)
        for dim, size in shape.items():
            ok = isinstance(size, bool) or (isinstance(size, int) and 0 < size <= 1 << 34)
            if not isinstance(dim, str) or not ok:
                raise ValidationRequestError(f"shapes[{i}].{dim} must be a positive integer or a boolean", 422)
        out.append(dict(shape))
    return tuple(out)


def check_candidate_text(data: bytes | str) -> str:
    """Decode candidate source as UTF-8 (refusing anything else) and return it."""
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationRequestError("candidate is not valid UTF-8 text", 400) from exc
        text = data
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationRequestError(f"candidate is not valid UTF-8 text (byte {exc.start})", 400) from exc
    if not text.strip():
        raise ValidationRequestError("candidate source is empty", 400)
    return text


@dataclass(frozen=True)
class WorkloadRef:
    """A loaded workload and the hashes that identify its version in the result cache."""

    manifest: WorkloadManifest
    manifest_sha: str
    reference_sha: str

    @property
    def name(self) -> str:
        return self.manifest.name


def load_workload(workload_dir: Path | str) -> WorkloadRef:
    """Load and hash a workload folder; a missing folder or malformed manifest is a request error."""
    path = Path(workload_dir)
    if not path.is_dir():
        raise ValidationRequestError(f"workload folder {str(path)!r} does not exist", 404)
    try:
        manifest = load_manifest(path)
    except ManifestError as exc:
        raise ValidationRequestError(f"malformed workload manifest: {exc}", 422) from exc
    manifest_path = manifest.directory / "manifest.toml"
    return WorkloadRef(manifest=manifest,
                       manifest_sha=sha256_text(manifest_path.read_bytes().decode("utf-8")),
                       reference_sha=sha256_text(manifest.reference_path.read_bytes().decode("utf-8",
                                                                                              "replace")))


@dataclass
class DeviceInfo:
    """What the worker processes run on (from ``python -m klineage.validator.worker --probe``)."""

    gpu: str
    versions: dict[str, str]
    cuda: bool
    device_count: int = 0


_PROBES: dict[tuple[str, bool], DeviceInfo] = {}
_PROBE_LOCK = threading.Lock()


def probe_device(force_cpu: bool = False, python: str | None = None) -> DeviceInfo:
    """Ask a worker process what it sees (GPU, versions); cached per (python, force_cpu)."""
    import sys

    key = (python or sys.executable, force_cpu)
    with _PROBE_LOCK:
        if key in _PROBES:
            return _PROBES[key]
        workdir = Path(tempfile.mkdtemp(prefix="klineage-probe-"))
        try:
            run = run_worker(["--probe"], workdir, clean_env(workdir, interpret=force_cpu), 120.0, python)
            if run.timed_out or run.returncode != 0:
                raise RuntimeError(f"validator worker probe failed: {run.stderr_tail[-500:]}")
            data = json.loads(run.stdout_tail.strip().splitlines()[-1])
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        info = DeviceInfo(gpu=data["gpu"], versions={k: str(v) for k, v in data["versions"].items()},
                          cuda=bool(data["cuda"]), device_count=int(data.get("device_count", 0)))
        _PROBES[key] = info
        return info


def cache_key(sha: str, workload: WorkloadRef, shapes: Sequence[Mapping[str, Any]] | None,
              gates: Sequence[str], device: DeviceInfo, seeds: int,
              timing: Mapping[str, Any] | None = None) -> str:
    """The result-cache key: kernel, workload version, shapes, gates, GPU, versions (and timing options)."""
    key: dict[str, Any] = {
        "kernel": sha, "workload": workload.name, "manifest": workload.manifest_sha,
        "reference": workload.reference_sha, "shapes": [dict(s) for s in shapes] if shapes else None,
        "gates": list(gates), "gpu": device.gpu, "versions": device.versions, "seeds": seeds,
    }
    if timing:  # only when not the defaults, so that keys of default jobs stay what they were
        key["timing"] = dict(timing)
    return sha256_text(canonical_json(key))


@dataclass
class JobOutput:
    """A finished job: the document, and whether it may be cached (not after a timeout or crash)."""

    result: GateResult
    cacheable: bool
    wall_s: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_progress(path: Path) -> list[dict[str, Any]]:
    events = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return events
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a kill
    return events


def validate_job(source: str, workload: WorkloadRef, gates: Sequence[str], shapes: Sequence[Mapping] | None,
                 device: DeviceInfo, timeout_s: float | None = None, seeds: int = 5,
                 ceilings: Mapping[str, Any] | None = None, visible_devices: str | None = None,
                 keep_workdir: bool = False, timing: Mapping[str, Any] | None = None) -> JobOutput:
    """Run every requested gate on ``source`` and return the gate result document.

    ``gates`` come from ``normalize_gates``; ``device`` from ``probe_device``. On a CPU device the worker
    runs under ``TRITON_INTERPRET=1``. ``timing``: performance-gate options (``rep_ms``, ``baseline``,
    ``host_lead_us``).
    """
    sha = kernel_sha(source)
    outcomes: dict[str, GateOutcome] = {}
    report = check_source(source)
    outcomes["static"] = GateOutcome("static", "pass" if report.ok else "fail",
                                     report.reason or f"{len(report.kernels)} Triton kernels, "
                                     f"{report.launches} launch sites reachable from run; imports, "
                                     "host code and builtins within the rules", report.metrics())
    gpu, versions = device.gpu, dict(device.versions)
    cacheable = True
    notes: dict[str, Any] = {}
    wall = 0.0
    remaining = [g for g in gates if g != "static"]
    if report.ok and remaining:
        timeout = timeout_s or (DEFAULT_TIMEOUT_GPU_S if device.cuda else DEFAULT_TIMEOUT_CPU_S)
        workdir = Path(tempfile.mkdtemp(prefix="klineage-job-"))
        try:
            (workdir / "candidate.py").write_text(source, encoding="utf-8")
            # Without a GPU, Triton cannot compile and interpret in one process (triton.language's own
            # @jit helpers are bound to one mode at import): compile runs in a first worker, the rest in a
            # second one under TRITON_INTERPRET=1. With a GPU one worker runs every gate.
            if device.cuda:
                phases = [(remaining, False)]
            else:
                phases = [(p, i) for p, i in ((["compile"] if "compile" in remaining else [], False),
                                              ([g for g in remaining if g != "compile"], True)) if p]
            events: list[dict[str, Any]] = []
            run = None
            for index, (phase_gates, interpret) in enumerate(phases):
                job = {"candidate": str(workdir / "candidate.py"),
                       "workload_dir": str(workload.manifest.directory), "gates": phase_gates,
                       "shapes": [dict(s) for s in shapes] if shapes else None, "seeds": seeds,
                       "interpret": interpret, "ceilings": dict(ceilings) if ceilings else None,
                       "timing": dict(timing) if timing else None,
                       "progress": str(workdir / f"progress{index}.jsonl"),
                       "cpu_seconds": int(timeout) + 30, "memory_bytes": None if device.cuda else CPU_MEMORY_BYTES}
                (workdir / f"job{index}.json").write_text(json.dumps(job), encoding="utf-8")
                env = clean_env(workdir, interpret=interpret or not device.cuda, visible_devices=visible_devices)
                if not interpret:
                    env.pop("TRITON_INTERPRET", None)
                run = run_worker([str(workdir / f"job{index}.json")], workdir, env, max(timeout - wall, 1.0))
                wall += run.wall_s
                phase_events = _read_progress(workdir / f"progress{index}.jsonl")
                events.extend(phase_events)
                done = any(e.get("event") == "done" for e in phase_events)
                failed = any(e.get("event") == "outcome" and e.get("status") == "fail" for e in phase_events)
                if not done or failed:
                    break
            current: str | None = None
            for event in events:
                kind = event.get("event")
                if kind == "env":
                    gpu, versions = str(event["gpu"]), {k: str(v) for k, v in event["versions"].items()}
                elif kind == "start":
                    current = event["gate"]
                elif kind == "outcome":
                    outcomes[event["gate"]] = GateOutcome(event["gate"], event["status"], event.get("reason", ""),
                                                          event.get("metrics") or {})
                    current = None
                elif kind == "ceilings":
                    notes["ceilings"] = event["ceilings"]
                elif kind == "done":
                    current = None
            assert run is not None
            finished = bool(events) and events[-1].get("event") == "done"
            if not finished:
                cacheable = False
                if run.timed_out:
                    why = f"time limit of {timeout:g} s exceeded; the job was killed"
                elif run.signal_name:
                    why = f"the worker died ({run.signal_name})"
                else:
                    why = f"the worker exited with code {run.returncode}"
                last = [line for line in run.stderr_tail.strip().splitlines() if line.strip()]
                detail = f": {last[-1][:300]}" if last and not run.timed_out else ""
                gate = current or next((g for g in remaining if g not in outcomes), remaining[0])
                where = f" during {gate}" if current else " before the gate started"
                if current == "compile":
                    where += " (which runs the candidate's host code to find its launches)"
                outcomes[gate] = GateOutcome(gate, "fail", f"{why}{where}{detail}",
                                             {"wall_s": round(run.wall_s, 2), "timed_out": run.timed_out,
                                              "signal": run.signal_name, "returncode": run.returncode})
        finally:
            if keep_workdir:
                notes["workdir"] = str(workdir)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    failed: str | None = None
    final: list[GateOutcome] = []
    for gate in GATES:
        if gate in outcomes and failed is None:
            final.append(outcomes[gate])
            if outcomes[gate].status == "fail":
                failed = gate
        elif gate not in gates:
            final.append(GateOutcome(gate, "skipped", "not requested"))
        elif failed is not None:
            final.append(GateOutcome(gate, "skipped", f"earlier gate failed ({failed})"))
        else:
            final.append(GateOutcome(gate, "skipped", "the job ended before this gate ran"))
            cacheable = False
    result = GateResult(kernel_sha=sha, gpu=gpu, versions=versions, gates=tuple(final),
                        workload=workload.name, date=_now())
    return JobOutput(result=result, cacheable=cacheable, wall_s=wall, notes=notes)


def measure_device_ceilings(timeout_s: float = 300.0, visible_devices: str | None = None) -> dict[str, Any]:
    """Measure copy bandwidth and bf16 GEMM rate in a worker process (GPU only)."""
    workdir = Path(tempfile.mkdtemp(prefix="klineage-ceilings-"))
    try:
        run = run_worker(["--ceilings"], workdir, clean_env(workdir, interpret=False,
                                                            visible_devices=visible_devices), timeout_s)
        if run.timed_out or run.returncode != 0:
            raise RuntimeError(f"ceiling measurement failed: {run.stdout_tail[-300:]} {run.stderr_tail[-500:]}")
        data = json.loads(run.stdout_tail.strip().splitlines()[-1])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ceilings = dict(data["ceilings"])
    ceilings.update({"gpu": data["gpu"], "versions": data["versions"], "date": _now()})
    return ceilings
