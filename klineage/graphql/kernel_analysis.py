"""Kernel-source analysis for search, off the event loop, bounded in size and time.

``klineage.transforms.facts.kernel_facts`` is pure Python and superlinear in the source size (a
1.5 MB source took minutes). The server must never run it on its event loop, nor let one request hold
a CPU forever. ``KernelAnalyzer``:

* refuses sources over ``max_bytes`` (UTF-8) at once;
* runs each analysis in a child process forked from a forkserver that has the analysis modules
  preloaded (a few milliseconds to start), at most ``workers`` at a time;
* kills the child when it runs past ``timeout_s`` (a thread could not be stopped);
* remembers the outcome of the last ``cache_size`` distinct sources (the analysis is a pure function
  of the source), so repeated searches with one kernel cost one analysis.

Errors are ``KernelAnalysisError`` (a ValueError) with a message meant for the client.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import multiprocessing
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

MAX_KERNEL_SOURCE_BYTES = 100_000
ANALYSIS_TIMEOUT_S = 10.0
ANALYSIS_WORKERS = 2
CACHE_SIZE = 256
_PRELOAD = ["klineage.transforms.facts"]


class KernelAnalysisError(ValueError):
    """A kernel source that cannot be analysed: too large, not Python, too slow or crashing the analysis."""


def _child(conn: Connection, source: str) -> None:
    """Runs in the child process: analyse ``source`` and send ("ok", kwargs) or ("error", message)."""
    try:
        from klineage.transforms.facts import kernel_facts

        try:
            outcome: tuple[str, Any] = ("ok", kernel_facts(source).search_kwargs())
        except SyntaxError as exc:
            outcome = ("error", f"kernelSource: expected Python source that parses ({exc.msg}, line {exc.lineno})")
        except (RecursionError, MemoryError) as exc:
            outcome = ("error", f"kernelSource: too deeply nested or too large to analyse ({type(exc).__name__})")
        conn.send(outcome)
    finally:
        conn.close()


class KernelAnalyzer:
    """Derives ``KnowledgeBase.search`` keyword arguments from a kernel source within size and time limits."""

    def __init__(self, max_bytes: int = MAX_KERNEL_SOURCE_BYTES, timeout_s: float = ANALYSIS_TIMEOUT_S,
                 workers: int = ANALYSIS_WORKERS, cache_size: int = CACHE_SIZE) -> None:
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(_PRELOAD)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-analysis")
        self._cache: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the forkserver now (it imports the analysis once), so the first request does not wait."""
        from multiprocessing import forkserver

        forkserver.ensure_running()

    def close(self) -> None:
        """Stop the waiting threads (children still running are killed at their time limit)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def check_size(self, source: str) -> None:
        """Raise KernelAnalysisError when ``source`` is over ``max_bytes`` (UTF-8)."""
        size = len(source.encode("utf-8", errors="surrogatepass"))
        if size > self.max_bytes:
            raise KernelAnalysisError(f"kernelSource: {size} bytes, over the limit of {self.max_bytes} bytes; "
                                      "send the kernel's module alone")

    async def search_kwargs(self, source: str) -> dict[str, Any]:
        """``kernel_facts(source).search_kwargs()`` computed in a child process; KernelAnalysisError when the
        source is too large, does not parse, or its analysis runs past ``timeout_s`` (the child is killed)."""
        self.check_size(source)
        key = hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()
        outcome = self._cached(key)
        if outcome is None:
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(self._pool, self._run, source)
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

    def _run(self, source: str) -> tuple[str, Any]:
        """Fork a child for ``source`` and wait at most ``timeout_s`` for its answer (blocking; in a thread)."""
        receiver, sender = self._context.Pipe(duplex=False)
        child = self._context.Process(target=_child, args=(sender, source), daemon=True)
        try:
            child.start()
            sender.close()
            if not receiver.poll(self.timeout_s):
                return ("timeout", f"kernelSource: the analysis ran past its time limit of {self.timeout_s:g} "
                                   "seconds and was stopped; send a smaller kernel")
            try:
                return receiver.recv()
            except (EOFError, OSError):
                return ("error", "kernelSource: the analysis crashed on this source")
        finally:
            if child.is_alive():
                child.kill()
            child.join(5)
            receiver.close()
            if child.exitcode is not None:
                child.close()
