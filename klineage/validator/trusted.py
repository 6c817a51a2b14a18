"""The trusted side's tools: the workload's reference in this process, a handle on a remote candidate,
and the time limit a job gets.

* ``load_trusted_reference`` imports a workload's ``reference.py`` here (trusted workload code: inputs,
  reference, vendor, flops, bytes), once per file content; ``TrustedReference`` wraps it for a job, so that
  a broken workload (its ``make_inputs`` raising or returning no tuple) is a request error, not a verdict.
* ``RemoteCandidate`` drives one job in a warm worker (``pool.CandidateWorker``): it sends inputs made
  here, and turns the worker's answers into ``checks.CallResult`` (outputs read with
  ``channel.unpack``, i.e. ``torch.load(weights_only=True)``) — checking that every answer has the
  expected form. A worker that dies or passes the job's deadline raises ``pool.WorkerLost``.
* ``job_time_limit`` derives a job's wall-clock limit from the work (see its docstring).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from klineage.validator import ipc
from klineage.validator.channel import pack, shells, unpack
from klineage.validator.checks import CallResult, CandidateError
from klineage.validator.errors import WorkloadError
from klineage.validator.harness import one_line
from klineage.validator.pool import CandidateWorker

_REFERENCES: dict[tuple[str, str], ModuleType] = {}
_REFERENCES_LOCK = threading.Lock()


def load_trusted_reference(path: Path) -> ModuleType:
    """Import the workload's ``reference.py`` in this (trusted) process; cached by path and content.

    A ``reference.py`` that does not import (syntax error, missing module, an error at import) or lacks
    ``make_inputs`` or ``reference`` raises ``errors.WorkloadError`` (a request error naming the file)."""
    data = Path(path).read_bytes()
    key = (str(Path(path).resolve()), hashlib.sha256(data).hexdigest())
    with _REFERENCES_LOCK:
        if key in _REFERENCES:
            return _REFERENCES[key]
        spec = importlib.util.spec_from_file_location(f"klineage_trusted_reference_{key[1][:16]}", path)
        if spec is None or spec.loader is None:  # pragma: no cover
            raise WorkloadError(f"{path}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise WorkloadError(f"{path}: line {exc.lineno}: {type(exc).__name__}: {exc.msg}") from exc
        except Exception as exc:
            raise WorkloadError(f"{path}: import failed: {one_line(exc)}") from exc
        for name in ("make_inputs", "reference"):
            if not callable(getattr(module, name, None)):
                raise WorkloadError(f"{path} defines no {name}() (a workload's reference.py must define "
                                    "make_inputs and reference, and may define vendor, flops and bytes_moved)")
        _REFERENCES[key] = module
        return module


# A failure of make_inputs that says something about the device (memory, a CUDA error), not the workload: it
# stays what it was (the gate fails with it; ``runner.validate_job`` retries a job that ran out of memory alone).
_DEVICE_TROUBLE = re.compile(r"OutOfMemoryError|out of memory|CUDA error|CUDA_ERROR|cudaError", re.IGNORECASE)


class TrustedReference:
    """A workload's reference module (``load_trusted_reference``) whose ``make_inputs`` is checked once for
    every caller (the compile cases, the correctness, integrity and performance gates): an exception from it
    (but one about the device's memory or a CUDA error) or a result that is not a tuple or list of inputs
    raises ``errors.WorkloadError`` naming the file, the case and what was expected. Every other attribute
    (``reference``, ``vendor``, ``flops``, ``bytes_moved``, ``__file__``) is the module's."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.path = str(getattr(module, "__file__", None) or "reference.py")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def make_inputs(self, shape: Mapping[str, Any], dtype: str, seed: int, device: str | None = None) -> Any:
        """The module's ``make_inputs(shape, dtype, seed, device=device)``, checked (see the class)."""
        call = f"make_inputs({dict(shape)!r}, {dtype!r}, seed {seed})"
        try:
            if device is None:
                made = self.module.make_inputs(shape, dtype, seed)
            else:
                made = self.module.make_inputs(shape, dtype, seed, device=device)
        except MemoryError:
            raise
        except Exception as exc:
            if _DEVICE_TROUBLE.search(f"{type(exc).__name__}: {exc}"):
                raise
            if isinstance(exc, KeyError):
                raise WorkloadError(f"{self.path}: {call} raised KeyError {exc} (the manifest's shapes must "
                                    "use the keys make_inputs reads)") from exc
            raise WorkloadError(f"{self.path}: {call} raised {one_line(exc)}") from exc
        if not isinstance(made, tuple | list):
            raise WorkloadError(f"{self.path}: make_inputs returned a {type(made).__name__}; expected a tuple of "
                                f"the inputs run() takes (on {call})")
        return made


class RemoteCandidate:
    """One job's candidate, loaded in a worker; every call bounded by the job's ``deadline``."""

    def __init__(self, worker: CandidateWorker, job_dir: Path, deadline: float, device: str) -> None:
        self.worker = worker
        self.job_dir = job_dir
        self.deadline = deadline
        self.device = device
        self.configs = 1
        # CUDA IPC instead of the socket for tensors on the GPU (``ipc``); off for the rest of the job after
        # the first failure, which falls back to the socket for that message.
        self.ipc = device.startswith("cuda") and ipc.enabled()
        # Where the job's time went (gate metrics, diagnostic only): waiting on the worker's answers, and
        # the part of that the worker says it spent working (the rest is transfer and scheduling).
        self.round_trip_s = 0.0
        self.worker_busy_s = 0.0

    def _ask(self, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        began = time.monotonic()
        reply, blob = self.worker.request(header, payload, self.deadline)
        took = time.monotonic() - began
        self.round_trip_s += took
        busy = reply.get("busy_s")
        if isinstance(busy, int | float) and math.isfinite(busy):
            self.worker_busy_s += min(max(float(busy), 0.0), took)  # the worker's word, bounded by what we saw
        if reply.get("ok") is not True:
            raise CandidateError(str(reply.get("error", "the worker answered without ok"))[:600])
        return reply, blob

    def load(self, compile_only: bool, cpu_seconds: int, autotune_rep_ms: float | None = None) -> None:
        """Start the job in the worker (and import the candidate unless ``compile_only``); ``autotune_rep_ms``:
        how long the candidate's autotuners time each config (None: Triton's default)."""
        header: dict[str, Any] = {"op": "load", "job_dir": str(self.job_dir), "compile_only": compile_only,
                                  "cpu_seconds": cpu_seconds}
        if autotune_rep_ms is not None:
            header["autotune_rep_ms"] = float(autotune_rep_ms)
        reply, _ = self._ask(header)
        configs = reply.get("configs", 1)
        self.configs = configs if isinstance(configs, int) and 1 <= configs <= 4096 else 1

    def compile(self, cases: Sequence[tuple[str, Any]], portability: bool = True) -> dict[str, Any]:
        """The compile gate, run in the worker on the layouts of inputs made here (``channel.shells``: the
        worker allocates tensors of the same dtype, shape and strides); its outcome, checked for form.
        ``portability`` False: the target only (the caller makes the sm_80 report beside)."""
        reply, _ = self._ask({"op": "compile", "shells": True, "portability": portability},
                             pack([[label, shells(tuple(inputs))] for label, inputs in cases]))
        outcome = reply.get("outcome")
        if (not isinstance(outcome, dict) or outcome.get("status") not in ("pass", "fail", "skipped")
                or not isinstance(outcome.get("reason", ""), str) or not isinstance(outcome.get("metrics", {}), dict)):
            raise CandidateError("the worker's compile outcome is malformed")
        if outcome["status"] == "pass" and not outcome.get("metrics", {}).get("variants"):
            raise CandidateError("the worker's compile outcome is a pass with no compiled variant")
        return {"status": outcome["status"], "reason": outcome.get("reason", ""),
                "metrics": outcome.get("metrics", {})}

    def cross_compile(self, cases: Sequence[tuple[str, Any]], arch: int) -> list[dict[str, Any]]:
        """Every variant the candidate launches on ``cases``, cross-compiled for ``sm_<arch>`` in the worker
        (compile-only): the variants' dicts, checked for form."""
        reply, _ = self._ask({"op": "cross_compile", "shells": True, "arch": int(arch)},
                             pack([[label, shells(tuple(inputs))] for label, inputs in cases]))
        report = reply.get("report")
        variants = report.get("variants") if isinstance(report, dict) else None
        if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
            raise CandidateError("the worker's cross-compile report is malformed")
        found = [v for v in variants if v.get("arch") == f"sm_{int(arch)}"][:256]
        errors = report.get("errors") if isinstance(report, dict) else None
        if not found:
            why = str(errors[0]) if isinstance(errors, list) and errors else "no kernel was launched"
            raise CandidateError(f"nothing cross-compiled for sm_{int(arch)}: {why}"[:600])
        return found

    def _send_inputs(self, header: dict[str, Any], inputs: Sequence[Any]) -> tuple[dict[str, Any], bytes]:
        """Send ``header`` with ``inputs`` (their CUDA tensors through IPC when it works, the rest and any
        fallback through the socket); the reply."""
        if self.ipc:
            shared = ipc.share_among(tuple(inputs))
            if shared is not None:
                fields, rest = shared
                try:
                    return self._ask({**header, "ipc_in": fields, "ipc_out": True}, pack(tuple(rest)))
                except CandidateError as exc:
                    if "ipc:" not in str(exc):
                        raise
                    self.ipc = False
        return self._ask({**header, "ipc_out": self.ipc}, pack(tuple(inputs)))

    def _body(self, reply: dict[str, Any], blob: bytes) -> Any:
        """The answer's body: its output mapped through CUDA IPC (asked again through the socket when the
        mapping fails), the rest read safely from the payload."""
        shared = reply.get("ipc_out")
        if shared is None:
            return unpack(blob)
        if not isinstance(shared, dict) or shared.get("form") not in ("tensor", "tuple", "list"):
            raise CandidateError("the worker's IPC answer is malformed")
        try:
            items = ipc.receive(shared.get("meta"), self.device)
            body = unpack(blob) if blob else {}
            if isinstance(body, dict) and shared.get("inputs") is not None:
                body["inputs"] = ipc.receive_among(shared["inputs"], body.get("inputs"), self.device)
        except ipc.IpcError:
            self.ipc = False
            _, again = self._ask({"op": "resend"})
            return unpack(again)
        out: Any = items[0] if shared["form"] == "tensor" else tuple(items) if shared["form"] == "tuple" \
            else list(items)
        if shared["form"] == "tensor" and len(items) != 1:
            raise CandidateError("the worker's IPC answer is malformed")
        if not isinstance(body, dict):
            raise CandidateError("the worker's answer is malformed")
        return {**body, "out": out}

    def _result(self, reply: dict[str, Any], blob: bytes) -> CallResult:
        try:
            body = self._body(reply, blob)
        except CandidateError:
            raise
        except Exception as exc:
            raise CandidateError(f"the outputs could not be read back safely: {type(exc).__name__}") from exc
        if not isinstance(body, dict) or "out" not in body:
            raise CandidateError("the worker's answer carries no output")
        launches = reply.get("launches", 0)
        devices = reply.get("out_devices", [])
        return CallResult(out=body["out"], inputs=body.get("inputs"),
                          out_devices=tuple(str(d) for d in devices) if isinstance(devices, list) else (),
                          launches=launches if isinstance(launches, int) else 0,
                          kernels=_counts(reply.get("kernels")), violations=_counts(reply.get("violations")),
                          poisoned=reply.get("poisoned", 0) if isinstance(reply.get("poisoned"), int) else 0)

    def call(self, slot: str, inputs: Sequence[Any] | None = None, config: int | None = None,
             return_inputs: bool = False) -> CallResult:
        """``run`` in the worker on ``inputs`` (None: the slot's tensors again); see CandidateRunner."""
        header = {"op": "call", "slot": slot, "config": config, "return_inputs": return_inputs,
                  "ipc_inputs": return_inputs and ipc.inputs_enabled()}
        if inputs is not None:
            reply, blob = self._send_inputs(header, inputs)
        else:
            reply, blob = self._ask({**header, "ipc_out": self.ipc})
        return self._result(reply, blob)

    def refill(self, slot: str, inputs: Sequence[Any]) -> None:
        """Copy new data into the slot's tensors in place, in the worker."""
        self._send_inputs({"op": "refill", "slot": slot}, inputs)

    def time(self, slot: str, inputs: Sequence[Any], rep_ms: float, host_lead_us: float) -> tuple[Any, CallResult]:
        """Time ``run`` in the worker; (its statistics, its last output)."""
        reply, blob = self._send_inputs({"op": "time", "slot": slot, "rep_ms": rep_ms, "host_lead_us": host_lead_us},
                                        inputs)
        result = self._result({**reply, "launches": 1}, blob)
        return reply.get("stats"), result

    def unload(self) -> str | None:
        """End the job in the worker; the CUDA error that makes the worker unusable, if any."""
        reply, _ = self.worker.request({"op": "unload"}, b"", time.monotonic() + 60.0)
        error = reply.get("cuda_error")
        return str(error) if error else None


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k)[:200]: int(v) for k, v in list(value.items())[:1000] if isinstance(v, int) and v > 0}


@dataclass(frozen=True)
class TimeLimit:
    """A job's wall-clock limit and how it was derived (reported in the gate metrics)."""

    seconds: float
    basis: str

    def metrics(self) -> dict[str, Any]:
        """``{"time_limit_s", "time_limit_basis"}`` for a gate outcome's metrics."""
        return {"time_limit_s": round(self.seconds, 1), "time_limit_basis": self.basis}


# Interpreter: seconds per element of work per call (numpy-backed block ops), generous; compile: ptxas
# for sm_90 and sm_80 for every autotune config.
CPU_COMPILE_ALLOWANCE_S = 180.0
GPU_COMPILE_ALLOWANCE_S = 240.0
CPU_S_PER_ELEMENT = 5e-5
CPU_S_PER_CALL = 1.5
GPU_S_PER_CALL = 1.0
CONFIG_ALLOWANCE = 8  # extra pinned calls per (shape, dtype) for an autotuned candidate
MARGIN = 3.0
MAX_DERIVED_S = 3600.0


def _elements(shape: Mapping[str, Any]) -> int:
    return math.prod(int(v) for v in shape.values() if isinstance(v, int) and not isinstance(v, bool))


def job_time_limit(reference: Any, dtypes: Sequence[str], shapes: Sequence[Mapping[str, Any]],
                   gates: Sequence[str], cuda: bool, seeds: int, ceilings: Mapping[str, Any] | None = None,
                   rep_ms: float = 100.0) -> TimeLimit:
    """The wall-clock limit of a job, from its work instead of a flat number.

    Per (shape, dtype) case the checking gates make ``seeds`` + 8 (pinned autotune configs) + 3
    (integrity) calls. Under the interpreter a call costs about 1.5 s + 5e-5 s per element of the
    shape's work (the product of its integer dimensions, or ``bytes_moved`` / 2 when larger), on a GPU
    1 s + the roofline time of the case (``flops``/``bytes_moved`` against the measured ceilings when
    known, else 1 ms); the performance gate adds, per case, the candidate's and the baseline's timed
    runs (at most 1000 each, at most 20× the roofline time of the case, plus ``rep_ms`` of warm-up and
    repetitions). Plus a compile allowance (180 s on CPU, 240 s on a GPU: every config for sm_90 and
    sm_80) and a margin of 3×; at most 3600 s.
    """
    cases = [(dict(s), d) for s in shapes for d in dtypes]
    checking = [g for g in gates if g in ("correctness", "integrity")]
    calls = (seeds + CONFIG_ALLOWANCE if "correctness" in checking else 0) + (3 if "integrity" in checking else 0)
    flops_fn = getattr(reference, "flops", None)
    bytes_fn = getattr(reference, "bytes_moved", None)
    work = 0.0
    for shape, dtype in cases:
        elements = float(_elements(shape))
        try:
            moved = float(bytes_fn(shape, dtype)) if callable(bytes_fn) else 0.0
            flops = float(flops_fn(shape)) if callable(flops_fn) else 0.0
        except Exception:
            moved, flops = 0.0, 0.0
        if cuda:
            if ceilings and (moved or flops):
                floor = max(flops / float(ceilings.get("bf16_gemm_flops_per_s") or 5e14),
                            moved / float(ceilings.get("copy_bytes_per_s") or 3e12))
            else:
                floor = max(flops / 5e14, moved / 3e12, 1e-3)
            work += calls * (GPU_S_PER_CALL + floor)
            if "performance" in gates:
                work += 2 * (1.0 + 2 * rep_ms / 1e3 + 1000 * (20 * floor + 1e-4))
        else:
            work += calls * (CPU_S_PER_CALL + CPU_S_PER_ELEMENT * max(elements, moved / 2))
    compile_s = (GPU_COMPILE_ALLOWANCE_S if cuda else CPU_COMPILE_ALLOWANCE_S) if "compile" in gates else 0.0
    seconds = min(MAX_DERIVED_S, compile_s + MARGIN * (30.0 + work))
    basis = (f"derived: {len(cases)} cases x {calls} checking calls, "
             f"{'GPU roofline' if cuda else 'interpreter per-element'} estimate"
             f"{', performance runs' if cuda and 'performance' in gates else ''}, compile allowance "
             f"{compile_s:g} s, margin {MARGIN:g}x")
    return TimeLimit(seconds, basis)
