"""The candidate worker: ``python -m klineage.validator.worker --serve FD`` runs candidates, nothing else.

This is the *candidate side* of the validator's trust model (DESIGN.md, "Round 2 — design notes"). A
warm worker imports torch and triton once, then serves several jobs over the socket ``FD`` (framed
messages, ``channel.py``); the trusted side (``runner.py``, ``trusted.py``) owns the workload's reference,
the inputs, the comparison, the timing bookkeeping and the verdict. The worker only

* ``load``: executes a candidate module (fresh namespace, restricted builtins, a fresh module name, its
  own job folder as working directory, ``TMPDIR`` and Triton cache, a CPU-time allowance);
* ``compile``: the compile gate on the inputs it is sent (``compile_gate.py``; a compile-mode worker);
* ``call``: ``run(*inputs)`` on the inputs it is sent (kept in a named slot so that integrity can call
  again on the same tensors), under the host-code audit, each autotuned kernel pinned to one config when
  asked; answers the outputs (``channel.pack``), the launch count and the audit's findings;
* ``refill``: copies new data into a slot's tensors in place; ``time``: times ``run`` with CUDA events
  (GPU only) and answers the statistics and the last output;
* ``unload``: drops the module and its slots, frees CUDA memory, reports whether the CUDA context is
  still usable (after an illegal address it is not: the pool retires the worker).

Whatever the worker answers is a claim, never a verdict: the trusted side checks it. Its exit code,
stdout, stderr and files are never evidence.

Other modes: ``--probe`` prints the environment (GPU, versions) as JSON; ``--ceilings`` measures the
device's copy bandwidth and bf16 GEMM rate and prints them as JSON; ``--census REQUEST OUT`` counts the
programs candidates launch per shape, launching nothing (``launch_census.py``).
"""

from __future__ import annotations

import gc
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

VALIDATOR_VERSION = "1"  # part of every cache key (runner.cache_key via versions): change only on purpose
PR_SET_CHILD_SUBREAPER = 36


def environment() -> dict[str, Any]:
    """The GPU (or its absence) and the versions every gate result carries."""
    import numpy
    import torch
    import triton

    from klineage.schema.gate_result import NO_GPU

    cuda = torch.cuda.is_available()
    versions = {"torch": str(torch.__version__), "triton": str(triton.__version__),
                "numpy": str(numpy.__version__), "python": platform.python_version(),
                "cuda": str(torch.version.cuda or "none"), "validator": VALIDATOR_VERSION}
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        gpu = f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    else:
        gpu = NO_GPU
    return {"gpu": gpu, "versions": versions, "cuda": cuda,
            "device_count": torch.cuda.device_count() if cuda else 0}


def _become_subreaper() -> bool:
    """Make orphaned descendants (a grandchild whose parent exited, setsid or not) children of this
    process, so that the pool finds and kills them. Linux only; False when unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap() -> None:
    """Collect exited children (zombies of killed descendants); never blocks."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Server:
    """One warm worker's state: the current job's module, its slots, and the gates' helpers."""

    def __init__(self, sock: socket.socket) -> None:
        import torch
        from triton import knobs

        from klineage.validator.harness import LaunchWatch

        self.sock = sock
        self.torch = torch
        self.on_gpu = bool(torch.cuda.is_available())
        self.interpret = bool(knobs.runtime.interpret)
        self.device = "cuda" if self.on_gpu else "cpu"
        self.watch = LaunchWatch().install(interpret=self.interpret)
        self.module: Any = None
        self.module_name = ""
        self.job_dir: Path | None = None
        self.slots: dict[str, Any] = {}
        self.held: dict[str, Any] | None = None  # an answer's body whose output went through CUDA IPC
        self.jobs = 0
        self.env = environment()
        self._warm_up()

    def _warm_up(self) -> None:
        """Run a few host ops under the audit before any candidate, so that torch's lazy imports (which
        would otherwise happen inside the candidate's frame, under its restricted builtins) are done."""
        from klineage.validator.harness import CandidateAudit

        torch = self.torch
        with CandidateAudit(self.watch):
            x = torch.empty((4, 4), device=self.device)
            y = torch.zeros_like(x).contiguous().view(-1)
            z = torch.empty_like(y, dtype=torch.float16)
            z.copy_(y)
            _ = (x + 1, y.to(torch.float32), torch.full((2,), 1.0, device=self.device))

    # -- protocol ----------------------------------------------------------------------------------
    def serve(self) -> int:
        from klineage.validator.channel import ChannelClosed, recv_message, send_message
        from klineage.validator.gpu_memory import release_idle_memory
        from klineage.validator.harness import one_line

        send_message(self.sock, {"ok": True, "op": "ready", "pid": os.getpid(), **self.env,
                                 "interpret": self.interpret})
        while True:
            try:
                header, payload = recv_message(self.sock)
            except ChannelClosed:
                return 0
            op = str(header.get("op", ""))
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                send_message(self.sock, {"ok": False, "error": f"unknown op {op!r}"})
                continue
            began = time.perf_counter()
            try:
                reply, blob = handler(header, payload)
            except Exception as exc:  # the candidate's failure (or the worker's): reported, never a pass
                reply, blob = {"ok": False, "error": one_line(exc), "error_type": type(exc).__name__}, b""
            # where a job's time goes (diagnostic only: the trusted side never decides on it)
            reply["busy_s"] = round(time.perf_counter() - began, 6)
            if self.on_gpu:  # before the reply, so inside the trusted side's hold of the device: other jobs'
                release_idle_memory(self.torch)  # processes may need what this one has cached
            send_message(self.sock, reply, blob)
            if op == "quit":
                return 0

    def op_quit(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        return {"ok": True}, b""

    def op_env(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        return {"ok": True, **self.env}, b""

    # -- a job -------------------------------------------------------------------------------------
    def op_load(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """Start a job: its folder, limits, and (unless ``compile_only``) the candidate module."""
        import resource

        from klineage.validator.harness import autotune_config_count, load_candidate, set_autotune_rep

        self._drop()
        self.jobs += 1
        self.job_dir = Path(header["job_dir"]).resolve()
        os.chdir(self.job_dir)
        os.environ["TMPDIR"] = str(self.job_dir)
        os.environ["TRITON_CACHE_DIR"] = str(self.job_dir / "triton-cache")
        import tempfile

        tempfile.tempdir = str(self.job_dir)
        cpu = header.get("cpu_seconds")
        if cpu:
            used = resource.getrusage(resource.RUSAGE_SELF)
            spent = int(used.ru_utime + used.ru_stime) + 1
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            soft = spent + int(cpu)
            if hard != resource.RLIM_INFINITY and soft > hard:
                soft = hard
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        self.module_name = f"klineage_candidate_{os.getpid()}_{self.jobs}"
        self.watch.pin = None
        self.watch.pruned_pins.clear()
        if header.get("compile_only"):
            return {"ok": True, "configs": 1}, b""
        self.module = load_candidate(self.job_dir / "candidate.py", self.module_name)
        rep = header.get("autotune_rep_ms")
        if isinstance(rep, int | float) and 0 < rep <= 1000:
            set_autotune_rep(self.module, float(rep))
        return {"ok": True, "configs": autotune_config_count(self.module)}, b""

    def op_compile(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        from klineage.validator.compile_gate import run_compile_gate

        if self.interpret:
            raise RuntimeError("the compile gate cannot run in an interpreter-mode worker")
        assert self.job_dir is not None
        outcome = run_compile_gate(self.job_dir / "candidate.py", self._compile_cases(header, payload), self.on_gpu,
                                   module_name=f"{self.module_name}_compile",
                                   portability=header.get("portability", True) is not False)
        return {"ok": True, "outcome": outcome}, b""

    def op_cross_compile(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """The sm_80 report of the compile gate (compile-only), made beside the job's other gates."""
        from klineage.validator.compile_gate import run_cross_compile

        if self.interpret:
            raise RuntimeError("cross-compiling cannot run in an interpreter-mode worker")
        assert self.job_dir is not None
        report = run_cross_compile(self.job_dir / "candidate.py", self._compile_cases(header, payload),
                                   int(header.get("arch", 80)), module_name=f"{self.module_name}_cross")
        return {"ok": True, "report": report}, b""

    def _compile_cases(self, header: dict[str, Any], payload: bytes) -> Any:
        """The (label, inputs) cases of a compile request: layouts (``shells``) allocated one case at a
        time when its turn comes, or tensors sent by value."""
        from klineage.validator.channel import from_shells, unpack

        if header.get("shells"):
            return ((str(label), tuple(from_shells(inputs, self.device))) for label, inputs in unpack(payload))
        return [(str(label), tuple(inputs)) for label, inputs in unpack(payload, self.device)]

    def _inputs(self, header: dict[str, Any], payload: bytes) -> tuple[Any, ...]:
        """The inputs a message carries: the socket payload's, with the CUDA tensors among them mapped
        through IPC into their places (``ipc_in``, ``ipc.share_among``)."""
        from klineage.validator.channel import unpack

        rest = tuple(unpack(payload, self.device)) if payload else ()
        if header.get("ipc_in") is not None:
            from klineage.validator.ipc import receive_among

            return tuple(receive_among(header["ipc_in"], rest, self.device))
        return rest

    def _answer(self, header: dict[str, Any], body: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The reply fields and payload that carry ``body`` (``out`` and maybe ``inputs``) back: the output
        through CUDA IPC when the trusted side accepts it and it is one tensor or a flat tuple/list of
        them (held here until the next request), and so are the tensors among returned inputs (their
        places left None in the payload); everything else through the socket."""
        from klineage.validator.channel import pack

        self.held = None
        out = body["out"]
        if header.get("ipc_out") and self.on_gpu:
            from klineage.validator.ipc import IpcError, share, share_among

            form = "tensor" if isinstance(out, self.torch.Tensor) else type(out).__name__
            items = [out] if form == "tensor" else list(out) if form in ("tuple", "list") else None
            if items is not None:
                try:
                    meta = share(items)
                except IpcError:
                    meta = None
                if meta is not None:
                    self.held = body
                    rest = {k: v for k, v in body.items() if k != "out"}
                    fields: dict[str, Any] = {"form": form, "meta": meta}
                    if "inputs" in rest and header.get("ipc_inputs") and isinstance(rest["inputs"], list | tuple):
                        shared_inputs = share_among(rest["inputs"])
                        if shared_inputs is not None:
                            fields["inputs"], rest["inputs"] = shared_inputs
                    return {"ipc_out": fields}, pack(rest) if rest else b""
        return {}, pack(body)


    def op_resend(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """The last answer's body again, through the socket (after an IPC mapping failed on the trusted side)."""
        from klineage.validator.channel import pack

        if self.held is None:
            raise RuntimeError("nothing to resend")
        body, self.held = self.held, None
        return {"ok": True}, pack(body)

    def _sync(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def op_call(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """``run(*slot)``; a payload replaces the slot's inputs first. Answers outputs and findings."""
        from klineage.validator.harness import CandidateAudit

        if self.module is None:
            raise RuntimeError("no candidate loaded")
        slot = str(header.get("slot", "main"))
        if payload or header.get("ipc_in") is not None:
            self.slots[slot] = self._inputs(header, payload)
        inputs = self.slots[slot]
        pin = header.get("config")
        self.watch.pin = int(pin) if pin is not None else None
        audit = CandidateAudit(self.watch)
        before = self.watch.launches
        kernels_before = dict(self.watch.kernels)
        try:
            with audit:
                out = self.module.run(*inputs)
            self._sync()
        finally:
            self.watch.pin = None
        launched = self.watch.launches - before
        kernels = {k: v - kernels_before.get(k, 0) for k, v in self.watch.kernels.items()
                   if v - kernels_before.get(k, 0)}
        body: dict[str, Any] = {"out": out}
        if header.get("return_inputs"):
            body["inputs"] = inputs
        try:
            fields, blob = self._answer(header, body)
        except (MemoryError, self.torch.cuda.OutOfMemoryError):
            raise  # the machine ran short while sending the outputs back: not the candidate's answer
        except Exception as exc:
            raise TypeError(f"run returned something that is not tensors, numbers or tuples of them: "
                            f"{type(out).__name__} ({exc})") from exc
        return {"ok": True, "launches": launched, "kernels": kernels, "violations": dict(audit.violations),
                "poisoned": audit.poisoned, "pruned_pins": sorted(self.watch.pruned_pins),
                "out_devices": _devices(out), **fields}, blob

    def op_refill(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """Copy new data into the slot's tensors in place (same addresses, other values)."""
        slot = str(header.get("slot", "main"))
        new = self._inputs(header, payload)
        for now, value in zip(self.slots[slot], new, strict=True):
            if isinstance(now, self.torch.Tensor) and isinstance(value, self.torch.Tensor):
                now.copy_(value)
        self._sync()
        return {"ok": True}, b""

    def op_time(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """Time ``run(*slot)`` with CUDA events (``perf.time_cuda``); answers stats and the last output."""
        from klineage.validator.perf import time_cuda

        if not self.on_gpu:
            raise RuntimeError("no GPU: nothing to time")
        slot = str(header.get("slot", "main"))
        if payload or header.get("ipc_in") is not None:
            self.slots[slot] = self._inputs(header, payload)
        inputs = self.slots[slot]
        module = self.module
        stats, last = time_cuda(lambda: module.run(*inputs), rep_ms=float(header.get("rep_ms", 100.0)),
                                host_lead_us=float(header.get("host_lead_us", 0.0)))
        fields, blob = self._answer(header, {"out": last})
        return {"ok": True, "stats": stats, "out_devices": _devices(last), **fields}, blob

    def op_unload(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        """End the job: drop its module and tensors; report whether the device is still usable."""
        from klineage.validator.harness import one_line

        cuda_error = None
        if self.on_gpu:
            try:
                self.torch.cuda.synchronize()
            except Exception as exc:  # a sticky CUDA error: this worker must be retired
                cuda_error = one_line(exc)
        self._drop()
        if self.on_gpu and cuda_error is None:
            from klineage.validator.gpu_memory import release_idle_memory

            release_idle_memory(self.torch, keep_bytes=0)
        _reap()
        return {"ok": True, "cuda_error": cuda_error, "jobs": self.jobs}, b""

    def _drop(self) -> None:
        self.module = None
        self.held = None
        self.slots.clear()
        for name in [n for n in sys.modules if n.startswith("klineage_candidate_")]:
            sys.modules.pop(name, None)
        gc.collect()


def _devices(value: Any) -> list[str]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.device.type]
    if isinstance(value, tuple | list):
        return [d for v in value for d in _devices(v)]
    return []


def serve(fd: int) -> int:
    """Serve jobs over the inherited socket ``fd`` until it closes (see the module docstring)."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    memory = os.environ.get("KLINEAGE_WORKER_MEMORY_BYTES")
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
    if os.getpid() != 1:  # PID 1 of its own namespace reaps and takes every orphan already
        _become_subreaper()
    sock = socket.socket(fileno=fd)
    return Server(sock).serve()


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--serve FD``, ``--probe``, ``--ceilings`` or ``--census REQUEST OUT``."""
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
    if len(args) == 2 and args[0] == "--serve" and args[1].isdigit():
        return serve(int(args[1]))
    if len(args) == 3 and args[0] == "--census":
        from klineage.validator.launch_census import serve_census

        return serve_census(Path(args[1]), Path(args[2]))
    print("usage: python -m klineage.validator.worker --serve FD | --probe | --ceilings | --census REQUEST OUT",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
