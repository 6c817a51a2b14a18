"""Kernel-source analysis for search, off the event loop, bounded in size and time.

``klineage.transforms.facts.kernel_facts`` is pure Python and superlinear in the source size (a
1.5 MB source took minutes). The server must never run it on its event loop, nor let one request hold
a CPU forever. ``KernelAnalyzer``:

* refuses sources over ``max_bytes`` (UTF-8) at once;
* runs each analysis in one of ``workers`` long-lived worker processes
  (``python -m klineage.graphql.analysis_worker``: the analysis is imported once, nothing is forked
  per request, and no ``__main__`` is re-imported);
* kills a worker whose analysis runs past ``timeout_s`` (a thread could not be stopped) and starts a
  fresh one in its place;
* remembers the outcome of the last ``cache_size`` distinct sources (the analysis is a pure function
  of the source), so repeated searches with one kernel cost one analysis.

Errors are ``KernelAnalysisError`` (a ValueError) with a message meant for the client.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from klineage.graphql.analysis_worker import HEADER

MAX_KERNEL_SOURCE_BYTES = 100_000
ANALYSIS_TIMEOUT_S = 10.0
ANALYSIS_WORKERS = 2
CACHE_SIZE = 256


class KernelAnalysisError(ValueError):
    """A kernel source that cannot be analysed: too large, not Python, too slow or crashing the analysis."""


class _Worker:
    """One analysis worker process and its pipes."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the klineage this process runs, not another install
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen([sys.executable, "-m", "klineage.graphql.analysis_worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={**os.environ, "PYTHONPATH": path})

    def analyse(self, source: bytes, timeout_s: float) -> dict[str, Any] | None:
        """The worker's answer for ``source``, or None when it did not answer within ``timeout_s``
        (the worker is then dead or must be killed). Raises OSError/EOFError when the worker died."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(HEADER.pack(len(source)) + source)
        self.process.stdin.flush()
        out = self.process.stdout
        ready, _, _ = select.select([out], [], [], timeout_s)
        if not ready:
            return None
        head = out.read(HEADER.size)
        if len(head) < HEADER.size:
            raise EOFError("the analysis worker exited")
        (size,) = HEADER.unpack(head)
        body = out.read(size)
        if len(body) < size:
            raise EOFError("the analysis worker exited")
        answer: dict[str, Any] = json.loads(body)
        return answer

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class KernelAnalyzer:
    """Derives ``KnowledgeBase.search`` keyword arguments from a kernel source within size and time limits."""

    def __init__(self, max_bytes: int = MAX_KERNEL_SOURCE_BYTES, timeout_s: float = ANALYSIS_TIMEOUT_S,
                 workers: int = ANALYSIS_WORKERS, cache_size: int = CACHE_SIZE) -> None:
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.workers = workers
        self.cache_size = cache_size
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-analysis")
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(workers):
            self._idle.put(None)  # a slot whose worker starts on first use
        self._cache: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Start every worker now (each imports the analysis once), so the first requests do not wait."""
        slots = [self._idle.get() for _ in range(self.workers)]
        for slot in slots:
            self._idle.put(slot if slot is not None else _Worker())

    def close(self) -> None:
        """Stop the workers; later analyses start fresh ones."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            if worker is not None:
                worker.kill()

    def check_size(self, source: str) -> None:
        """Raise KernelAnalysisError when ``source`` is over ``max_bytes`` (UTF-8)."""
        size = len(source.encode("utf-8", errors="surrogatepass"))
        if size > self.max_bytes:
            raise KernelAnalysisError(f"kernelSource: {size} bytes, over the limit of {self.max_bytes} bytes; "
                                      "send the kernel's module alone")

    async def search_kwargs(self, source: str) -> dict[str, Any]:
        """``kernel_facts(source).search_kwargs()`` computed in a worker process; KernelAnalysisError when the
        source is too large, does not parse, or its analysis runs past ``timeout_s`` (the worker is killed)."""
        self.check_size(source)
        data = source.encode("utf-8", errors="replace")
        key = hashlib.sha256(data).hexdigest()
        outcome = self._cached(key)
        if outcome is None:
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(self._pool, self._run, data)
            if outcome[0] != "timeout":
                self._remember(key, outcome)
        kind, value = outcome
        if kind != "ok":
            raise KernelAnalysisError(value)
        return copy.deepcopy(value)

    def _cached(self, key: str) -> tuple[str, Any] | None:
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
            return found

    def _remember(self, key: str, outcome: tuple[str, Any]) -> None:
        with self._lock:
            self._cache[key] = outcome
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _run(self, source: bytes) -> tuple[str, Any]:
        """Analyse ``source`` on an idle worker, waiting at most ``timeout_s`` (blocking; in a thread)."""
        worker = self._idle.get()
        try:
            if worker is None:
                worker = _Worker()
            try:
                answer = worker.analyse(source, self.timeout_s)
            except (OSError, EOFError, ValueError):
                worker.kill()
                worker = None
                return ("error", "kernelSource: the analysis crashed on this source")
            if answer is None:
                worker.kill()
                worker = None
                return ("timeout", f"kernelSource: the analysis ran past its time limit of {self.timeout_s:g} "
                                   "seconds and was stopped; send a smaller kernel")
            if "ok" in answer:
                return ("ok", answer["ok"])
            return ("error", str(answer.get("error", "kernelSource: the analysis failed")))
        finally:
            self._idle.put(worker)  # None: a fresh worker starts on the next use
