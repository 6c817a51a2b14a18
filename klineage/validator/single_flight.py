"""One job per key at a time: a caller asking for a job that is already running waits for its answer.

Side-by-side agent runs often reach the same kernel (the three methods of one instance start from the same
naive kernel and often make the same first move). Without this, each run validated it on its own, and on
the H100 two concurrent timings of one kernel gave 0.94x and 0.76x vendor: one run kept the first answer
while the cache kept the second. With it, the kernel is validated once and every caller gets the same
answer, in less GPU time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Coalesces concurrent calls by key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Future[T]] = {}

    def do(self, key: str, work: Callable[[], T]) -> tuple[T, bool]:
        """Run ``work`` for ``key`` unless a call for the same key is running, in which case wait for that
        call instead. Returns ``(answer, shared)``: ``shared`` is True when another caller's ``work``
        produced the answer. An exception raised by ``work`` reaches every caller that waited on it; the
        next call for the key runs ``work`` again."""
        with self._lock:
            running = self._running.get(key)
            if running is None:
                mine: Future[T] = Future()
                self._running[key] = mine
        if running is not None:
            return running.result(), True
        try:
            answer = work()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._running.pop(key, None)
        mine.set_result(answer)
        return answer, False

    def running(self) -> int:
        """How many keys are being worked on now."""
        with self._lock:
            return len(self._running)
