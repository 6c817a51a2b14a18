"""The sandboxed worker: ``python -m klineage.validator.worker JOB.json`` runs one job's gates.

Runs in its own process (started by ``sandbox.run_worker``) with a clean environment, its own temporary
folder as working directory and Triton cache, and resource limits it sets on itself before the candidate
is loaded (address space on CPU, CPU time, no core files). It imports only the standard library, torch,
triton, numpy and ``klineage.schema``/``klineage.validator`` — so it runs on the GPU machine's plain
Python without the service's web stack.

Protocol: the job file (JSON) names the candidate file, the workload folder, the gates to run after
``static`` (which the parent has already passed), the shapes (or null for the manifest's grid: ``shapes``
on a GPU, ``cpu_shapes`` under the interpreter), seeds and ceilings. The worker appends JSON lines to the
job's progress file: ``{"event": "env", ...}`` first, then ``{"event": "start", "gate": g}`` and
``{"event": "outcome", "gate": g, "status", "reason", "metrics"}`` for each gate, ``{"event": "done"}``
last. It stops after the first failing gate. The parent reads the file even when the worker was killed
(time limit) or died (crash, illegal memory access), so the gate that was running is known.

Other modes: ``--probe`` prints the environment (GPU, versions) as JSON; ``--ceilings`` measures the
device's copy bandwidth and bf16 GEMM rate and prints them as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

VALIDATOR_VERSION = "1"


def _set_limits(job: dict[str, Any]) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = job.get("cpu_seconds")
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 5))
    memory = job.get("memory_bytes")
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))


def environment() -> dict[str, Any]:
    """The GPU (or its absence) and the versions every gate result carries."""
    import numpy
    import torch
    import triton

    cuda = torch.cuda.is_available()
    versions = {"torch": str(torch.__version__), "triton": str(triton.__version__),
                "numpy": str(numpy.__version__), "python": platform.python_version(),
                "cuda": str(torch.version.cuda or "none"), "validator": VALIDATOR_VERSION}
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        gpu = f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    else:
        gpu = "none (CPU: Triton interpreter, cross-compile only)"
    return {"gpu": gpu, "versions": versions, "cuda": cuda,
            "device_count": torch.cuda.device_count() if cuda else 0}


class _Progress:
    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8", buffering=1)

    def emit(self, **event: Any) -> None:
        self.file.write(json.dumps(event, default=str) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())


def run_job(job: dict[str, Any]) -> int:
    """Run the gates of ``job`` (see the module docstring); return the process exit code."""
    progress = _Progress(Path(job["progress"]))
    _set_limits(job)
    import torch
    from triton import knobs

    from klineage.schema.manifest import load_manifest
    from klineage.validator.checks import run_correctness, run_integrity
    from klineage.validator.compile_gate import run_compile_gate
    from klineage.validator.harness import LaunchWatch, load_candidate, load_reference, one_line
    from klineage.validator.static import check_source

    env = environment()
    progress.emit(event="env", **env)
    on_gpu = bool(env["cuda"])
    device = "cuda" if on_gpu else "cpu"
    interpret = not on_gpu and bool(job.get("interpret", True))
    knobs.runtime.interpret = interpret
    if interpret and "compile" in job["gates"]:
        raise RuntimeError("the compile gate cannot run in an interpreter-mode worker")
    candidate_path = Path(job["candidate"]).resolve()
    source = candidate_path.read_text(encoding="utf-8")
    facts = check_source(source)
    manifest = load_manifest(job["workload_dir"])
    reference = load_reference(manifest.reference_path)
    shapes = [dict(s) for s in job.get("shapes") or (manifest.shapes if on_gpu else manifest.cpu_shapes)]
    seeds = int(job.get("seeds", 5))
    watch: LaunchWatch | None = None
    candidate: Any = None
    audits: list[Any] = []

    def running_candidate() -> Any:
        nonlocal watch, candidate
        if candidate is None:
            watch = LaunchWatch().install(interpret=interpret)
            candidate = load_candidate(candidate_path, "klineage_candidate")
        return candidate

    for gate in job["gates"]:
        progress.emit(event="start", gate=gate)
        try:
            if gate == "compile":
                outcome = run_compile_gate(candidate_path, reference,
                                           [(s, d) for s in shapes for d in manifest.dtypes], device, on_gpu)
            elif gate == "performance" and not on_gpu:
                outcome = {"status": "skipped", "reason": "no GPU: interpreter mode, nothing to time",
                           "metrics": {}}
            else:
                try:
                    module = running_candidate()
                except Exception as exc:
                    outcome = {"status": "fail", "reason": f"candidate failed to import: {one_line(exc)}",
                               "metrics": {}}
                else:
                    assert watch is not None
                    if gate == "correctness":
                        outcome = run_correctness(module, reference, manifest, shapes, device, interpret,
                                                  facts.uses_dot, watch, audits, seeds=seeds)
                    elif gate == "integrity":
                        outcome = run_integrity(module, reference, manifest, shapes, device, watch, audits,
                                                interpret=interpret, uses_dot=facts.uses_dot)
                    elif gate == "performance":
                        from klineage.validator.perf import measure_ceilings, run_performance

                        ceilings = job.get("ceilings")
                        if not ceilings:
                            ceilings = measure_ceilings()
                            progress.emit(event="ceilings", ceilings=ceilings)
                        timing = job.get("timing") or {}
                        outcome = run_performance(module, reference, manifest, shapes, ceilings,
                                                  rep_ms=float(timing.get("rep_ms", 100.0)),
                                                  time_baseline=bool(timing.get("baseline", True)),
                                                  host_lead_us=float(timing.get("host_lead_us", 0.0)))
                    else:
                        outcome = {"status": "fail", "reason": f"unknown gate {gate!r}", "metrics": {}}
        except Exception as exc:  # a gate that could not check fails; it never passes
            outcome = {"status": "fail", "reason": f"{gate} could not complete: {one_line(exc)}",
                       "metrics": {}}
        if on_gpu and outcome["status"] == "fail":
            try:
                torch.cuda.synchronize()
            except Exception as exc:  # a sticky CUDA error (illegal address): say so
                outcome["metrics"] = {**outcome.get("metrics", {}), "cuda_error": one_line(exc)}
        progress.emit(event="outcome", gate=gate, **outcome)
        if outcome["status"] == "fail":
            break
    progress.emit(event="done")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``JOB.json``, ``--probe`` or ``--ceilings``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--probe"]:
        print(json.dumps(environment()))
        return 0
    if args == ["--ceilings"]:
        import torch

        from klineage.validator.perf import measure_ceilings

        if not torch.cuda.is_available():
            print(json.dumps({"error": "no GPU"}))
            return 1
        print(json.dumps({**environment(), "ceilings": measure_ceilings()}))
        return 0
    if len(args) != 1:
        print("usage: python -m klineage.validator.worker JOB.json | --probe | --ceilings", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    return run_job(job)


if __name__ == "__main__":
    sys.exit(main())
