"""Who may use a GPU at the same time: many checking gates together, a timing run alone.

Several jobs of one trusted process may be in flight at once (the agent evaluation runs instances side by
side; the service may too). Compile, correctness and integrity only need the GPU to compute the right
answer, so they share it; the performance gate measures time, so while one case is timed nothing else of
ours runs on that device. ``DeviceLock`` is a readers-writer lock with writer preference: once a timing
run waits, no new checking gate starts, so timing is never starved by a stream of checks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

_WAITED = threading.local()


def waited_s() -> float:
    """Seconds this thread has spent waiting for device locks so far (a gate's share of its wall time that
    went to queueing behind other jobs: the runner records the difference per gate as ``lock_wait_s``)."""
    return float(getattr(_WAITED, "seconds", 0.0))


def _add_wait(start: float) -> None:
    _WAITED.seconds = waited_s() + (time.monotonic() - start)


class DeviceLock:
    """Shared holders (checking gates) or one exclusive holder (a timed case), never both."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharers = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the device together with other checking gates (waits while a timing run holds or waits)."""
        start = time.monotonic()
        with self._cond:
            while self._exclusive or self._waiting_exclusive:
                self._cond.wait()
            self._sharers += 1
        _add_wait(start)
        try:
            yield
        finally:
            with self._cond:
                self._sharers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the device alone (waits for every current holder to finish)."""
        start = time.monotonic()
        with self._cond:
            self._waiting_exclusive += 1
            try:
                while self._exclusive or self._sharers:
                    self._cond.wait()
            finally:
                self._waiting_exclusive -= 1
            self._exclusive = True
        _add_wait(start)
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()

    def state(self) -> tuple[int, bool, int]:
        """(shared holders, held exclusively, exclusive waiters): for tests and progress lines."""
        with self._cond:
            return self._sharers, self._exclusive, self._waiting_exclusive


_LOCKS: dict[str, DeviceLock] = {}
_GUARD = threading.Lock()


def device_lock(device: str) -> DeviceLock:
    """The process-wide lock of ``device`` (``"cuda"``, ``"cuda:1"``, ...; one per name)."""
    with _GUARD:
        return _LOCKS.setdefault(device, DeviceLock())
