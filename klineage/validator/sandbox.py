"""The workers' environment (``clean_env``, used by ``pool.py`` for the warm candidate workers) and
one-shot worker runs (``run_worker``: ``--probe`` and ``--ceilings``, with a wall-clock deadline).

A worker starts in a new session (its own process group), with:

* an environment built from scratch: ``PATH``, ``HOME``, ``LANG``/``LC_*``, ``CUDA_*``/``NVIDIA_*``/
  ``NCCL_*``/``NVSHMEM_*``/``TORCH_SYMM_MEM_*``, ``TRITON_*`` (except the ones the sandbox sets or that
  would override kernels) and ``LD_LIBRARY_PATH`` are kept; ``PYTHONPATH`` points
  at this checkout's ``klineage``; ``TRITON_CACHE_DIR``/``TRITON_HOME``/``TMPDIR`` point into the job's
  own temporary folder (also its working directory); ``TRITON_INTERPRET=1`` without a GPU;
* limits the worker sets on itself before loading the candidate: CPU time, address space (CPU mode
  only: CUDA reserves far more virtual memory than it uses), no core files;
* a wall-clock deadline: past it the whole process group is killed (SIGKILL), which also ends any
  ``ptxas`` it started and any hung kernel's context.

A crash, a hang or an illegal memory access therefore ends that job only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import klineage

_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
         "TRITON_PTXAS_PATH", "SYSTEMROOT")
_KEEP_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_", "TRITON_")
# Set by the sandbox itself, never inherited:
_OVERRIDDEN = ("TRITON_INTERPRET", "TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR",
               "TRITON_KERNEL_OVERRIDE", "TRITON_ALWAYS_COMPILE", "TRITON_DEBUG")
PACKAGE_ROOT = Path(klineage.__file__).resolve().parent.parent
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def kill_live_workers() -> int:
    """Kill the process group of every worker still running (service shutdown, interpreter exit)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return len(procs)


atexit.register(kill_live_workers)


@dataclass
class WorkerRun:
    """How a worker process ended."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    stdout_tail: str
    stderr_tail: str

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the worker (SIGSEGV, SIGKILL, ...), if any."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def clean_env(workdir: Path, interpret: bool, visible_devices: str | None = None,
              extra: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment (see the module docstring)."""
    env = {k: v for k, v in os.environ.items()
           if (k in _KEEP or k.startswith(_KEEP_PREFIXES)) and k not in _OVERRIDDEN}
    env.setdefault("PATH", "/usr/bin:/bin")
    env["PYTHONPATH"] = str(PACKAGE_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["TRITON_CACHE_DIR"] = str(workdir / "triton-cache")
    env["TRITON_HOME"] = str(workdir)
    env["TMPDIR"] = str(workdir)
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    env["NCCL_NVLS_ENABLE"] = "0"
    env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    env["NVSHMEM_DISABLE_NVLS"] = "1"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    env.update(extra or {})
    return env


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def run_worker(args: list[str], workdir: Path, env: dict[str, str], timeout_s: float,
               python: str | None = None) -> WorkerRun:
    """Run ``python -m klineage.validator.worker *args`` in ``workdir``; kill its group past ``timeout_s``."""
    out_path, err_path = workdir / "worker.stdout", workdir / "worker.stderr"
    start = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen([python or sys.executable, "-m", "klineage.validator.worker", *args],
                                cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, close_fds=True)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it left behind
            proc.wait()
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    return WorkerRun(returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                     wall_s=time.monotonic() - start, stdout_tail=_tail(out_path), stderr_tail=_tail(err_path))
