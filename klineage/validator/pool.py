"""Warm candidate workers (parent side): start, hand out, recycle and kill them with every descendant.

A ``CandidateWorker`` is one ``python -m klineage.validator.worker --serve FD`` process with torch and
triton already imported, talking to this process over a socketpair (``channel.py``). It serves several
jobs; the pool retires it after ``max_jobs`` jobs (default 20), after a crash, a time-out, a protocol
error or a CUDA error. Workers are kept per *mode* (``WorkerMode``: interpreter or not, which GPUs):
Triton binds its own ``@jit`` helpers to one mode at import, so compile-mode and interpreter-mode
workers are different processes.

Containment, strongest first (``containment()`` says which one holds here):

* ``pid-namespace``: the worker runs under ``unshare --pid --fork --kill-child`` (root, or user
  namespaces): it is PID 1 of its own PID namespace, so when it dies the kernel kills every process in
  that namespace, including a grandchild that called ``setsid`` or double-forked;
* ``subreaper``: the worker marks itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so an
  orphaned descendant is re-parented to the worker instead of init and stays in its process tree.

Either way, after every job and at every kill the pool walks ``/proc`` for all descendants of the worker
and SIGKILLs them (``kill_descendants``), then, on retirement, the worker's own process group. Each
worker runs in a new session with an environment built from scratch (``sandbox.clean_env``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klineage.validator.channel import ChannelClosed, ChannelError, ChannelTimeout, recv_message, send_message
from klineage.validator.sandbox import clean_env

DEFAULT_MAX_JOBS = 20
START_TIMEOUT_S = 180.0
CPU_MEMORY_BYTES = 12 * 1024**3


class WorkerLost(Exception):
    """The worker died, hung past its deadline or broke the protocol; ``why`` says which."""

    def __init__(self, why: str, timed_out: bool = False, signal_name: str | None = None,
                 returncode: int | None = None, stderr_tail: str = "") -> None:
        super().__init__(why)
        self.why = why
        self.timed_out = timed_out
        self.signal_name = signal_name
        self.returncode = returncode
        self.stderr_tail = stderr_tail


@dataclass(frozen=True)
class WorkerMode:
    """What kind of worker a job needs: interpreter or not, and the GPUs it may see."""

    interpret: bool
    visible_devices: str | None = None
    cpu_only: bool = False  # hide every GPU (the compile-mode worker of a CPU validator)


_UNSHARE: list[bool] = []


def containment() -> str:
    """``pid-namespace`` when ``unshare --pid --fork --kill-child`` works here, else ``subreaper``."""
    if not _UNSHARE:
        ok = False
        path = shutil.which("unshare")
        if path and sys.platform.startswith("linux"):
            try:
                ok = subprocess.run([path, "--pid", "--fork", "--kill-child", "true"], capture_output=True,
                                    timeout=20).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _UNSHARE.append(ok)
    return "pid-namespace" if _UNSHARE[0] else "subreaper"


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, ()))
    return out


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                out.append(int(entry))
    return out


def kill_descendants(pid: int, keep: frozenset[int] = frozenset()) -> int:
    """SIGKILL every descendant of ``pid`` except those in ``keep``; returns how many were signalled.
    Repeats until none is left (a fork racing the scan is caught on the next pass)."""
    killed = 0
    for _ in range(5):
        found = [p for p in descendants(pid) if p not in keep]
        if not found:
            break
        for child in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)
    return killed


class CandidateWorker:
    """One warm worker process and its end of the channel."""

    def __init__(self, mode: WorkerMode, root: Path, python: str | None = None) -> None:
        self.mode = mode
        self.dir = Path(tempfile.mkdtemp(prefix="worker-", dir=root))
        self.jobs = 0
        self.retired = False
        self.info: dict[str, Any] = {}
        parent, child = socket.socketpair()
        self.sock = parent
        env = clean_env(self.dir, interpret=mode.interpret or mode.cpu_only, visible_devices=mode.visible_devices)
        if not mode.interpret:
            env.pop("TRITON_INTERPRET", None)
        if env.get("CUDA_VISIBLE_DEVICES") == "":
            env["KLINEAGE_WORKER_MEMORY_BYTES"] = str(CPU_MEMORY_BYTES)
        command = [python or sys.executable, "-m", "klineage.validator.worker", "--serve", str(child.fileno())]
        # A GPU worker stays in the host's PID namespace: on the H200 (2026-12-04) a worker started under
        # `unshare --pid` saw no CUDA driver ("0 active drivers"); its descendants are still found and
        # killed through the subreaper and /proc after every job.
        self.containment = containment() if env.get("CUDA_VISIBLE_DEVICES") == "" else "subreaper"
        if self.containment == "pid-namespace":
            command = [shutil.which("unshare") or "unshare", "--pid", "--fork", "--kill-child", *command]
        self.stderr_path = self.dir / "worker.stderr"
        with open(self.dir / "worker.stdout", "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(command, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, start_new_session=True, pass_fds=(child.fileno(),))
        child.close()
        self.started = time.monotonic()
        try:
            header = self._recv(time.monotonic() + START_TIMEOUT_S, "start")
        except WorkerLost:
            self.kill()
            raise
        self.info = header
        # The worker's pid as this process sees it (inside its own PID namespace it is 1).
        self.host_pid = self.proc.pid
        if self.containment == "pid-namespace":
            children = _children(self.proc.pid)
            if len(children) != 1:
                self.kill()
                raise WorkerLost(f"expected one worker under unshare, found {len(children)}")
            self.host_pid = children[0]

    # -- talking -----------------------------------------------------------------------------------
    def _stderr_tail(self, limit: int = 2000) -> str:
        try:
            return self.stderr_path.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _lost(self, why: str, timed_out: bool = False) -> WorkerLost:
        self.kill()
        code = self.proc.returncode
        # Under unshare the worker is unshare's child: its signal comes back as exit code 128 + n.
        signal_name = None
        if code is not None and code < 0:
            signal_name = _signal_name(-code)
        elif code is not None and code > 128 and self.containment == "pid-namespace":
            signal_name = _signal_name(code - 128)
        return WorkerLost(why, timed_out=timed_out, signal_name=signal_name, returncode=code,
                          stderr_tail=self._stderr_tail())

    def _recv(self, deadline: float, what: str) -> dict[str, Any]:
        header, _ = self._recv_full(deadline, what)
        return header

    def _recv_full(self, deadline: float, what: str) -> tuple[dict[str, Any], bytes]:
        try:
            return recv_message(self.sock, deadline)
        except ChannelTimeout as exc:
            raise self._lost(f"no answer to {what} before the deadline", timed_out=True) from exc
        except ChannelClosed as exc:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            raise self._lost(f"the worker died during {what}") from exc
        except ChannelError as exc:
            raise self._lost(f"the worker broke the protocol during {what}: {exc}") from exc

    def request(self, header: dict[str, Any], payload: bytes = b"", deadline: float | None = None
                ) -> tuple[dict[str, Any], bytes]:
        """Send one request and wait for its answer until ``deadline`` (monotonic); WorkerLost otherwise."""
        if self.retired:
            raise WorkerLost("the worker was already retired")
        what = str(header.get("op", "a request"))
        try:
            send_message(self.sock, header, payload)
        except (ChannelError, OSError) as exc:
            raise self._lost(f"the worker died before {what}") from exc
        return self._recv_full(deadline if deadline is not None else time.monotonic() + 3600.0, what)

    # -- ending ------------------------------------------------------------------------------------
    def clean_after_job(self) -> int:
        """Kill whatever the last job left running (a process it started, setsid or not)."""
        if self.retired:
            return 0
        return kill_descendants(self.host_pid)

    def kill(self) -> None:
        """Kill the worker, every descendant and its process group; idempotent."""
        if self.retired and self.proc.returncode is not None:
            return
        self.retired = True
        with contextlib.suppress(OSError):
            self.sock.close()
        kill_descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        kill_descendants(self.proc.pid)
        shutil.rmtree(self.dir, ignore_errors=True)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class WorkerPool:
    """Warm workers per mode: at most ``max_workers`` per mode busy at once, each reused ``max_jobs`` times."""

    def __init__(self, max_jobs: int = DEFAULT_MAX_JOBS, max_workers: int | None = None,
                 python: str | None = None) -> None:
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.max_jobs = max_jobs
        self.max_workers = max_workers or max(1, os.cpu_count() or 1)
        self.python = python
        self.root = Path(tempfile.mkdtemp(prefix="klineage-pool-"))
        self._idle: dict[WorkerMode, list[CandidateWorker]] = {}
        self._busy: dict[WorkerMode, int] = {}
        self._all: set[CandidateWorker] = set()
        self._cond = threading.Condition()
        self.started = 0
        self.retired = 0

    @contextlib.contextmanager
    def worker(self, mode: WorkerMode) -> Iterator[CandidateWorker]:
        """A warm worker of ``mode`` for one job; returned to the pool afterwards unless it was lost."""
        worker = self._acquire(mode)
        try:
            yield worker
        finally:
            self._release(worker)

    def _acquire(self, mode: WorkerMode) -> CandidateWorker:
        with self._cond:
            while True:
                idle = self._idle.setdefault(mode, [])
                while idle:
                    worker = idle.pop()
                    if worker.proc.poll() is None and not worker.retired:
                        self._busy[mode] = self._busy.get(mode, 0) + 1
                        return worker
                    self._forget(worker)
                if self._busy.get(mode, 0) < self.max_workers:
                    self._busy[mode] = self._busy.get(mode, 0) + 1
                    break
                self._cond.wait()
        try:
            worker = CandidateWorker(mode, self.root, self.python)
        except BaseException:
            with self._cond:
                self._busy[mode] -= 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._all.add(worker)
            self.started += 1
        return worker

    def _forget(self, worker: CandidateWorker) -> None:
        worker.kill()
        self._all.discard(worker)
        self.retired += 1

    def _release(self, worker: CandidateWorker) -> None:
        worker.clean_after_job()
        worker.jobs += 1
        keep = not worker.retired and worker.proc.poll() is None and worker.jobs < self.max_jobs
        with self._cond:
            self._busy[worker.mode] -= 1
            if keep:
                self._idle.setdefault(worker.mode, []).append(worker)
            else:
                self._forget(worker)
            self._cond.notify_all()

    def retire_idle(self, gpu_only: bool = True) -> int:
        """Kill the idle workers (only those that may hold a GPU context with ``gpu_only``) and return how
        many: their CUDA contexts and cached blocks go back to the driver (for a job that ran out of device
        memory beside others, ``runner.validate_job``). Busy workers are left alone."""
        with self._cond:
            gone = [w for mode, idle in self._idle.items() if not (gpu_only and (mode.interpret or mode.cpu_only))
                    for w in idle]
            for mode in list(self._idle):
                self._idle[mode] = [w for w in self._idle[mode] if w not in gone]
            for worker in gone:
                self._forget(worker)
        return len(gone)

    def shutdown(self) -> None:
        """Kill every worker (idle or busy) and remove the pool's folder."""
        with self._cond:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def stats(self) -> dict[str, Any]:
        """Workers started and retired so far, and the live ones."""
        with self._cond:
            return {"started": self.started, "retired": self.retired, "live": len(self._all),
                    "max_jobs": self.max_jobs, "max_workers": self.max_workers, "containment": containment()}


_DEFAULT: list[WorkerPool] = []
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide pool (``KLINEAGE_WORKER_MAX_JOBS`` jobs per worker, default 20)."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            max_jobs = int(os.environ.get("KLINEAGE_WORKER_MAX_JOBS", DEFAULT_MAX_JOBS))
            _DEFAULT.append(WorkerPool(max_jobs=max_jobs))
        return _DEFAULT[0]


def shutdown_default_pool() -> None:
    """Kill the process-wide pool's workers (service shutdown, interpreter exit)."""
    with _DEFAULT_LOCK:
        pools = list(_DEFAULT)
        _DEFAULT.clear()
    for pool in pools:
        pool.shutdown()


atexit.register(shutdown_default_pool)
