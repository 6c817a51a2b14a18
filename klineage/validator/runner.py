"""One validation job, trusted side: check the request, run ``static``, drive the worker, decide, build the document.

``validate_job`` is what ``LocalValidator``, the service's workers and the CLI all call. The candidate
is never executed in the calling process: only parsed (the static gate). It runs in a warm worker of
``pool.WorkerPool`` that only runs it (``worker.py``); this process makes the inputs, runs the
workload's reference, compares, times the baseline and decides every gate (``checks.py``,
``perf.py``, ``trusted.py``). Nothing the worker writes (files, logs, exit code) is evidence; a gate
that did not run is a failure, never a pass. Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klineage.schema.errors import ManifestError
from klineage.schema.gate_result import GATES, GateOutcome, GateResult
from klineage.schema.ids import canonical_json, kernel_sha, sha256_text
from klineage.schema.manifest import WorkloadManifest, load_manifest
from klineage.validator.channel import shells
from klineage.validator.device_lock import device_lock, held_alone_s, waited_s
from klineage.validator.errors import ValidationRequestError, WorkloadError
from klineage.validator.gpu_memory import IDLE_KEEP_BYTES, release_idle_memory
from klineage.validator.pool import WorkerLost, WorkerMode, WorkerPool, default_pool
from klineage.validator.sandbox import clean_env, run_worker
from klineage.validator.static import check_source

if TYPE_CHECKING:
    from klineage.validator.trusted import RemoteCandidate, TimeLimit



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


# How the performance gate measures (recorded with evaluation results; not in the cache key, so that the
# committed walk caches, measured one job at a time where method 1 and 2 agree, stay replayable).
# 2: the baseline timed in its own process, suspect cases timed again (perf.py, baseline_timer.py).
TIMING_METHOD = 2


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


def _device_string(device: DeviceInfo, visible_devices: str | None) -> str:
    """Where the trusted side makes inputs and runs the reference: the job's GPU, or the CPU."""
    if not device.cuda:
        return "cpu"
    first = (visible_devices or "0").split(",")[0].strip()
    return f"cuda:{int(first)}" if first.isdigit() else "cuda:0"


def _lost_outcome(gate: str, lost: WorkerLost, limit: TimeLimit, started: bool) -> GateOutcome:
    if lost.timed_out:
        why = f"time limit of {limit.seconds:g} s exceeded; the job was killed"
    elif lost.signal_name:
        why = f"the worker died ({lost.signal_name})"
    elif lost.returncode is not None:
        why = f"the worker exited with code {lost.returncode}"
    else:
        why = lost.why
    last = [line for line in lost.stderr_tail.strip().splitlines() if line.strip()]
    detail = f": {last[-1][:300]}" if last and not lost.timed_out else ""
    where = f" during {gate}" if started else " before the gate started"
    if gate == "compile":
        where += " (which runs the candidate's host code to find its launches)"
    return GateOutcome(gate, "fail", f"{why}{where}{detail}",
                       {"timed_out": lost.timed_out, "signal": lost.signal_name, "returncode": lost.returncode,
                        **limit.metrics()})


ENDED = "the job ended before this gate ran"


def assemble_gates(outcomes: Mapping[str, GateOutcome], gates: Sequence[str],
                   ended: str = ENDED) -> tuple[tuple[GateOutcome, ...], bool]:
    """Every gate in canonical order from the ``outcomes`` of the gates that ran, and whether the job ran
    to its end. After a failure the later requested gates are ``skipped``; a gate not requested says so;
    a requested gate that did not run while nothing failed before it *fails* with ``ended`` (never a
    pass), and then the result says something about the run, not the candidate: not complete."""
    failed: str | None = None
    complete = True
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
        else:  # requested, not run, nothing failed before it: never a pass
            final.append(GateOutcome(gate, "fail", ended))
            failed = gate
            complete = False
    return tuple(final), complete


def validate_job(source: str, workload: WorkloadRef, gates: Sequence[str], shapes: Sequence[Mapping] | None,
                 device: DeviceInfo, timeout_s: float | None = None, seeds: int = 5,
                 ceilings: Mapping[str, Any] | None = None, visible_devices: str | None = None,
                 keep_workdir: bool = False, timing: Mapping[str, Any] | None = None,
                 pool: WorkerPool | None = None, max_timeout_s: float | None = None) -> JobOutput:
    """Run every requested gate on ``source`` and return the gate result document.

    This process is the *trusted side*: it parses the candidate (static), makes every input with the
    workload's ``make_inputs``, runs the reference, compares, times the baseline and decides each gate.
    The candidate runs only in a warm worker of ``pool`` (default: the process-wide pool), which answers
    outputs and findings over a channel (``trusted.RemoteCandidate``). A gate that was requested and did
    not run is a ``fail`` (never a pass); after a crash or a time-out the result is not cacheable. A job that
    ran out of GPU memory (``out_of_memory``) runs once more holding the GPU alone (``DeviceLock.alone``;
    ``notes["out_of_memory_retry"]`` says why) and is not cached if it runs out again (its reason then
    begins with ``SHORT_ALONE``: ``crowded_out`` no longer counts it as the crowd's failure).

    ``gates`` come from ``normalize_gates``; ``device`` from ``probe_device``. On a CPU device the worker
    runs under ``TRITON_INTERPRET=1`` (the compile gate in a compile-mode worker). ``timeout_s``
    overrides the derived time limit (``trusted.job_time_limit``); ``max_timeout_s`` caps either.
    ``timing``: performance-gate options
    (``rep_ms``, ``baseline``, ``host_lead_us``).
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
    remaining = [g for g in gates if g != "static"]
    start = time.monotonic()
    if report.ok and remaining:
        static = dict(outcomes)

        def run_gates() -> str | None:
            return _run_gates(source, workload, remaining, shapes, device, timeout_s, seeds, ceilings,
                              visible_devices, timing, pool, report.uses_dot, outcomes, notes, max_timeout_s,
                              report.host_kernels)

        lost_gate = run_gates()
        crowded = device.cuda and out_of_memory(outcomes.values())
        if crowded:
            # Other jobs' tensors filled the GPU: that says nothing about the candidate. Once more, alone.
            notes["out_of_memory_retry"] = crowded
            outcomes.clear()
            outcomes.update(static)
            with device_lock(_device_string(device, visible_devices)).alone():
                _release_trusted_memory(keep_bytes=0)
                notes["idle_workers_retired"] = (pool or default_pool()).retire_idle(gpu_only=True)
                lost_gate = run_gates()
        if crowded and out_of_memory(outcomes.values()):
            cacheable = False
            _mark_short_alone(outcomes)
        if lost_gate:
            cacheable = False
        _say_why_runs_differ(outcomes, report.ordered_atomics)
    final, complete = assemble_gates(outcomes, gates)
    cacheable = cacheable and complete
    if keep_workdir:
        notes.setdefault("workdir", None)
    result = GateResult(kernel_sha=sha, gpu=gpu, versions=versions, gates=final, workload=workload.name, date=_now())
    return JobOutput(result=result, cacheable=cacheable, wall_s=time.monotonic() - start, notes=notes)


_OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation")


#: Begins the reason of a gate that ran out of GPU memory in the lone retry too (``validate_job``).
SHORT_ALONE = "out of GPU memory with the GPU to itself too: "


def crowded_out(result: GateResult) -> bool:
    """Whether ``result`` failed only because the GPU ran out of memory beside other jobs (the crowd's
    failure, not the candidate's: ``out_of_memory``), so that a caller may ask again later. A job that ran out
    in its lone retry too (``SHORT_ALONE``) is not: it needs more memory than other jobs leave it even when
    none of them runs. Neither kind is cached."""
    if result.verdict == "pass":
        return False
    reason = out_of_memory(result.gates)
    return reason is not None and not reason.startswith(SHORT_ALONE)


def _mark_short_alone(outcomes: dict[str, GateOutcome]) -> None:
    """Prefix ``SHORT_ALONE`` to the reason of the gate that ran out of memory in the lone retry."""
    for gate, outcome in outcomes.items():
        if outcome.status == "fail" and _OUT_OF_MEMORY.search(outcome.reason):
            outcomes[gate] = dataclasses.replace(outcome, reason=SHORT_ALONE + outcome.reason)
            return


def out_of_memory(outcomes: Iterable[GateOutcome]) -> str | None:
    """The reason of the first failed gate that ran out of GPU memory, or None. With several jobs on one GPU
    such a failure is the crowd's, not the candidate's: ``validate_job`` runs the job again with the GPU to
    itself, and a job that runs out of memory even then is not cached (it may be the crowd's still: other
    processes' memory stays allocated)."""
    for outcome in outcomes:
        if outcome.status == "fail" and _OUT_OF_MEMORY.search(outcome.reason):
            return outcome.reason[:300]
    return None


def _release_trusted_memory(keep_bytes: int = IDLE_KEEP_BYTES) -> None:
    """Give the trusted side's unused cached GPU blocks beyond ``keep_bytes`` back to the driver (after each
    checked case, so that other jobs' workers can use them; all of them for a job retried alone)."""
    import torch

    release_idle_memory(torch, keep_bytes)


def _run_gates(source: str, workload: WorkloadRef, remaining: list[str], shapes: Sequence[Mapping] | None,
               device: DeviceInfo, timeout_s: float | None, seeds: int, ceilings: Mapping[str, Any] | None,
               visible_devices: str | None, timing: Mapping[str, Any] | None, pool: WorkerPool | None,
               uses_dot: bool, outcomes: dict[str, GateOutcome], notes: dict[str, Any],
               max_timeout_s: float | None = None, host_kernels: Sequence[str] = ()) -> str | None:
    """Run the worker gates in order, filling ``outcomes``; the gate during which the worker was lost.
    ``host_kernels``: the kernels host code names (the static gate's), to say which never ran."""
    from klineage.validator.checks import Findings
    from klineage.validator.compile_gate import with_portability
    from klineage.validator.trusted import TimeLimit, TrustedReference, job_time_limit, load_trusted_reference

    manifest = workload.manifest
    on_gpu = device.cuda
    where = _device_string(device, visible_devices)
    # the workload's code, its make_inputs checked for every caller: a broken workload raises WorkloadError
    reference = TrustedReference(load_trusted_reference(manifest.reference_path))
    grid = [dict(s) for s in (shapes or (manifest.shapes if on_gpu else manifest.cpu_shapes))]
    timing = dict(timing or {})
    rep_ms = float(timing.get("rep_ms", 100.0))
    if timeout_s:
        limit = TimeLimit(float(timeout_s), "given by the caller")
    else:
        limit = job_time_limit(reference, manifest.dtypes, grid, remaining, on_gpu, seeds, ceilings, rep_ms)
    if max_timeout_s and limit.seconds > max_timeout_s:
        limit = TimeLimit(float(max_timeout_s), f"{limit.basis}; capped at {max_timeout_s:g} s")
    deadline = time.monotonic() + limit.seconds
    pool = pool or default_pool()
    # Triton binds its own @jit helpers to one mode at import: without a GPU the compile gate runs in a
    # compile-mode worker and the rest in an interpreter-mode one; with a GPU one worker runs every gate.
    if on_gpu:
        phases = [(remaining, WorkerMode(interpret=False, visible_devices=visible_devices))]
    else:
        phases = [(p, m) for p, m in ((["compile"] if "compile" in remaining else [],
                                       WorkerMode(interpret=False, cpu_only=True)),
                                      ([g for g in remaining if g != "compile"], WorkerMode(interpret=True)))
                  if p]
    findings = Findings()
    cpu_seconds = int(limit.seconds) + 30
    compile_cases: list[tuple[str, Any]] = []
    side: _PortabilityReport | None = None
    if "compile" in remaining:
        with _checking(where, on_gpu):  # the inputs are made one case at a time and only their layouts kept
            compile_cases = [(f"{d} {dict(s)}", shells(tuple(reference.make_inputs(dict(s), d, 0, device=where))))
                             for s in grid for d in manifest.dtypes]
        if on_gpu:  # on a GPU host the CPU cores are free to cross-compile beside; on CPU the compile phase is them
            side = _PortabilityReport(pool, source, compile_cases, deadline, cpu_seconds)
    try:
        lost = _run_phases(source, phases, pool, deadline, where, cpu_seconds, reference, manifest, grid, on_gpu,
                           uses_dot, findings, seeds, ceilings, timing, rep_ms, limit, outcomes, notes,
                           compile_cases, portability=side is None)
        _say_what_never_ran(outcomes, host_kernels, findings.kernels, len(grid))
        return lost
    finally:
        if side is not None and "compile" in outcomes:
            variants, error = side.result(max(1.0, deadline - time.monotonic()))
            merged = with_portability(outcomes["compile"].to_dict(), variants, error)
            merged["metrics"]["sm_80"]["wall_s"] = round(side.wall_s, 3)
            outcomes["compile"] = GateOutcome("compile", merged["status"], merged["reason"], merged["metrics"])


def _say_why_runs_differ(outcomes: dict[str, GateOutcome], ordered_atomics: Sequence[str]) -> None:
    """An integrity failure for runs that differ, of a candidate whose kernels call atomics whose result
    depends on the order programs run in, says so: a float ``tl.atomic_add`` reduction is no cheat, but
    its sum comes out in a different order on each run, and this validator requires bitwise-reproducible
    output (a memoized or drifting output is told apart from a correct one that way). The verdict stays."""
    outcome = outcomes.get("integrity")
    if outcome is None or outcome.status != "fail" or not ordered_atomics:
        return
    from klineage.validator.checks import NONDETERMINISTIC

    if NONDETERMINISTIC not in outcome.reason:
        return
    outcomes["integrity"] = dataclasses.replace(
        outcome, reason=f"{outcome.reason}: the kernels call {', '.join(ordered_atomics)}, whose result depends on "
                        "the order programs run in (float sums round differently in each order); output must be "
                        "bitwise reproducible here: write per-program partial results and reduce them in a second "
                        "kernel (or a fixed loop) instead")


def _say_what_never_ran(outcomes: dict[str, GateOutcome], host_kernels: Sequence[str],
                        launched: Mapping[str, int], shapes: int) -> None:
    """A passed correctness gate names the kernels of the candidate that no checked call launched (a branch of
    ``run`` that these shapes never take, such as a looped kernel behind a row-length threshold on the small
    CPU shapes): their code passed nothing, so the verdict does not vouch for it. The verdict itself stays: the
    workload's shapes are what is judged."""
    outcome = outcomes.get("correctness")
    never = sorted(set(host_kernels) - {name for name, n in launched.items() if n > 0})
    if outcome is None or outcome.status != "pass" or not never:
        return
    outcomes["correctness"] = dataclasses.replace(
        outcome, reason=f"{outcome.reason}; unchecked: kernel(s) {', '.join(never)} never launched on these "
                        f"{shapes} shape(s), their code is not verified by this result",
        metrics={**outcome.metrics, "kernels_never_launched": never})


def _run_phases(source: str, phases: list[tuple[list[str], WorkerMode]], pool: WorkerPool, deadline: float,
                where: str, cpu_seconds: int, reference: Any, manifest: Any, grid: list[dict], on_gpu: bool,
                uses_dot: bool, findings: Any, seeds: int, ceilings: Mapping[str, Any] | None,
                timing: Mapping[str, Any], rep_ms: float, limit: TimeLimit, outcomes: dict[str, GateOutcome],
                notes: dict[str, Any], compile_cases: list[tuple[str, Any]], portability: bool) -> str | None:
    """The worker gates, phase by phase (one worker each), filling ``outcomes``; the gate during which the
    worker was lost."""
    from klineage.validator.checks import CandidateError
    from klineage.validator.trusted import RemoteCandidate

    for phase_gates, mode in phases:
        current = phase_gates[0]
        started = False
        try:
            with pool.worker(mode) as worker, _job_folder(worker, source) as job_dir:
                candidate = RemoteCandidate(worker, job_dir, deadline, where)
                needs_module = any(g != "compile" for g in phase_gates)
                try:
                    with _checking(where, on_gpu):
                        candidate.load(compile_only=not needs_module, cpu_seconds=cpu_seconds,
                                       autotune_rep_ms=timing.get("autotune_rep_ms"))
                    load_error = None
                except CandidateError as exc:
                    load_error = str(exc)
                try:
                    for gate in phase_gates:
                        current, started = gate, True
                        gate_start, waited, alone = time.monotonic(), waited_s(), held_alone_s()
                        trips, busy = candidate.round_trip_s, candidate.worker_busy_s
                        if gate == "compile":
                            outcome = _compile_gate(candidate, compile_cases, portability)
                        else:
                            outcome = _one_gate(gate, candidate, load_error, reference, manifest, grid, where,
                                                on_gpu, uses_dot, findings, seeds, ceilings, timing, rep_ms)
                        metrics = {**outcome.get("metrics", {}), **limit.metrics(),
                                   "gate_wall_s": round(time.monotonic() - gate_start, 3),
                                   "lock_wait_s": round(waited_s() - waited, 3),
                                   "held_alone_s": round(held_alone_s() - alone, 3),
                                   "worker_round_trip_s": round(candidate.round_trip_s - trips, 3),
                                   "worker_busy_s": round(candidate.worker_busy_s - busy, 3)}
                        outcomes[gate] = GateOutcome(gate, outcome["status"], outcome.get("reason", ""), metrics)
                        if outcome["status"] == "fail":
                            break
                except WorkloadError:  # the workload's fault, no verdict: end the job in the worker, then say so
                    try:
                        candidate.unload()
                    except Exception:
                        worker.kill()
                    raise
                cuda_error = candidate.unload()
                if cuda_error:
                    notes["cuda_error"] = cuda_error
                    worker.kill()  # a sticky CUDA error: this worker's context is unusable
        except WorkerLost as lost:
            outcomes[current] = _lost_outcome(current, lost, limit, started)
            return current
        if any(o.status == "fail" for o in outcomes.values()):
            break
    return None


@contextlib.contextmanager
def _job_folder(worker: Any, source: str) -> Iterator[Path]:
    """A fresh folder of one job under the worker's own, holding the candidate; removed afterwards."""
    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=worker.dir))
    try:
        (job_dir / "candidate.py").write_text(source, encoding="utf-8")
        yield job_dir
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _compile_gate(candidate: RemoteCandidate, cases: list[tuple[str, Any]], portability: bool) -> dict[str, Any]:
    """The compile gate in the job's worker (sm_80 too when ``portability``, else reported beside)."""
    from klineage.validator.checks import CandidateError

    try:
        return candidate.compile(cases, portability=portability)
    except CandidateError as exc:
        return {"status": "fail", "reason": f"compile could not complete: {exc}", "metrics": {}}


class _PortabilityReport:
    """The compile gate's sm_80 report (A100, compile-only, never failing), cross-compiled in a CPU
    compile-mode worker of its own while the job's worker runs the gates: the two compiles overlap instead
    of following each other. ``result`` waits for it; a report that could not be made says why."""

    def __init__(self, pool: WorkerPool, source: str, cases: list[tuple[str, Any]], deadline: float,
                 cpu_seconds: int) -> None:
        self._variants: list[dict[str, Any]] = []
        self._error: str | None = "not finished"
        self.wall_s = 0.0  # how long the report took, worker wait included
        self._thread = threading.Thread(target=self._run, args=(pool, source, cases, deadline, cpu_seconds),
                                        name="klineage-sm80-report", daemon=True)
        self._thread.start()

    def _run(self, pool: WorkerPool, source: str, cases: list[tuple[str, Any]], deadline: float,
             cpu_seconds: int) -> None:
        from klineage.validator.compile_gate import PORTABILITY_ARCH
        from klineage.validator.harness import one_line
        from klineage.validator.trusted import RemoteCandidate

        began = time.monotonic()
        try:
            with pool.worker(WorkerMode(interpret=False, cpu_only=True)) as worker, \
                    _job_folder(worker, source) as job_dir:
                candidate = RemoteCandidate(worker, job_dir, deadline, "cpu")
                candidate.load(compile_only=True, cpu_seconds=cpu_seconds)
                self._variants = candidate.cross_compile(cases, PORTABILITY_ARCH)
                self._error = None
                candidate.unload()
        except Exception as exc:  # a report, never a verdict: say why it is missing
            self._error = one_line(exc)[:300]
        finally:
            self.wall_s = time.monotonic() - began

    def result(self, timeout_s: float) -> tuple[list[dict[str, Any]], str | None]:
        """(the sm_80 variants, why there are none or None), waiting at most ``timeout_s``."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            return [], "still compiling when the job ended"
        return self._variants, self._error


def _checking(where: str, on_gpu: bool) -> contextlib.AbstractContextManager[None]:
    """The GPU shared with other checking gates (never with a timing run); nothing on CPU."""
    return _hold_for(where, on_gpu)(False)


def _hold_for(where: str, on_gpu: bool) -> Callable[[bool], contextlib.AbstractContextManager[None]]:
    """``hold(exclusive)`` for the checking gates: the device lock of ``where`` on a GPU, nothing on CPU.

    Checks hold the GPU shared, call by call; the performance gate holds it alone, case by case
    (``perf.py``), so several jobs' checks run together and no check runs while a case is timed.
    """
    if not on_gpu:
        return lambda exclusive: contextlib.nullcontext()
    from klineage.validator.checks import spent

    lock = device_lock(where)

    @contextlib.contextmanager
    def hold(exclusive: bool) -> Iterator[None]:
        try:
            with lock.exclusive() if exclusive else lock.shared():
                yield
        finally:  # a case's reference tensors are freed by now: other jobs' processes may need the memory
            with spent("release"):
                _release_trusted_memory()

    return hold


def _one_gate(gate: str, candidate: RemoteCandidate, load_error: str | None, reference: Any, manifest: Any,
              grid: list[dict], where: str, on_gpu: bool, uses_dot: bool, findings: Any, seeds: int,
              ceilings: Mapping[str, Any] | None, timing: Mapping[str, Any], rep_ms: float) -> dict[str, Any]:
    """One worker gate, decided here; WorkerLost propagates."""
    from klineage.validator.checks import run_correctness, run_integrity
    from klineage.validator.harness import one_line

    try:
        if gate == "performance" and not on_gpu:
            return {"status": "skipped", "reason": "no GPU: interpreter mode, nothing to time", "metrics": {}}
        if load_error is not None:
            return {"status": "fail", "reason": f"candidate failed to import: {load_error}", "metrics": {}}
        if gate == "correctness":
            # held case by case: a timing run waits for one case, not a whole gate (held gate-wide, every
            # timed case of the other jobs queued behind whole correctness gates); the lock's phase-fairness
            # keeps the gate from starving (under writer preference alone, call by call, it waited a median
            # 70 s with 8 jobs)
            return run_correctness(candidate, reference, manifest, grid, where, not on_gpu, uses_dot,
                                   findings, seeds=seeds, hold=_hold_for(where, on_gpu))
        if gate == "integrity":
            return run_integrity(candidate, reference, manifest, grid, where, findings, interpret=not on_gpu,
                                 uses_dot=uses_dot, hold=_hold_for(where, on_gpu))
        if gate == "performance":
            from klineage.validator.perf import run_performance

            outcome = run_performance(candidate, reference, manifest, grid, dict(ceilings) if ceilings else None,
                                      rep_ms=rep_ms, time_baseline=bool(timing.get("baseline", True)),
                                      host_lead_us=float(timing.get("host_lead_us", 0.0)), device=where)
            if not ceilings:
                outcome["metrics"]["ceilings_note"] = "no device ceilings given: no roofline"
            return outcome
        return {"status": "fail", "reason": f"unknown gate {gate!r}", "metrics": {}}
    except (WorkerLost, WorkloadError):  # WorkloadError: the workload is broken, no verdict (a request error)
        raise
    except Exception as exc:  # a gate that could not check fails; it never passes
        return {"status": "fail", "reason": f"{gate} could not complete: {one_line(exc)}", "metrics": {}}


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
