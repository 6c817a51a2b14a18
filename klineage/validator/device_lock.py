"""Who may use a GPU at the same time: many checking gates together, a timing run alone.

Several jobs of one trusted process may be in flight at once (the agent evaluation runs instances side by
side; the service may too). Compile, correctness and integrity only need the GPU to compute the right
answer, so they share it; the performance gate measures time, so while one case is timed nothing else of
ours runs on that device.

``DeviceLock`` is a *phase-fair* readers-writer lock. A timing run that waits stops new checks from
starting, so timing is never starved by a stream of checks; a timing phase takes every timing run waiting
when it starts, one after another (the checks drain from the GPU once per phase, not once per timed case);
and when a timing phase ends, every check that queued behind it starts before the next timing phase, so
checks are never starved by a stream of timing runs either. (With plain writer preference, measured on the
H200 with 8 evaluation runs side by side, an integrity gate that takes the device case by case waited behind
every queued timed case: median 64 s per gate, against 12 s for the gates that held it exclusively.) A check
waits for at most the timing phase in progress or about to start when it arrived; a timing run waits for the
checks running when it arrived, for the checks that were queued behind the previous timing phase, and for
the runs of its own phase before it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator

# per thread: .seconds waited, .alone_seconds held alone, .lock the DeviceLock held with ``alone`` (if any)
_THREAD = threading.local()


def waited_s() -> float:
    """Seconds this thread has spent waiting for device locks so far (a gate's share of its wall time that
    went to queueing behind other jobs: the runner records the difference per gate as ``lock_wait_s``)."""
    return float(getattr(_THREAD, "seconds", 0.0))


def _add_wait(start: float) -> None:
    _THREAD.seconds = waited_s() + (time.monotonic() - start)


def held_alone_s() -> float:
    """Seconds this thread has held a device exclusively so far: the part of a gate every other job of the
    process waited through (the runner records the difference per gate as ``held_alone_s``; summed over a
    candidate's gates it is the GPU time the candidate cannot share, what bounds candidates per minute)."""
    return float(getattr(_THREAD, "alone_seconds", 0.0))


def _add_alone(start: float) -> None:
    _THREAD.alone_seconds = held_alone_s() + (time.monotonic() - start)


class DeviceLock:
    """Shared holders (checking gates) or one exclusive holder (a timed case), never both; phase-fair."""

    def __init__(self, batch_timing: bool = True) -> None:
        self.batch_timing = batch_timing  # False: one timing run per phase (as before; for a same-run comparison)
        self._cond = threading.Condition()
        self._sharers = 0
        self._exclusive = False
        self._tickets = 0  # numbers the timing runs as they arrive
        self._waiting: set[int] = set()  # tickets of the timing runs waiting
        self._batch: set[int] = set()  # tickets of the timing phase in progress not yet finished
        # Incremented each time a timing phase ends: a check queued under an older phase has seen its
        # timing runs end and goes before any further timing run.
        self._phase = 0
        self._queued_checks: Counter[int] = Counter()  # phase at arrival -> checks waiting

    def _checks_due(self) -> int:
        """Checks that queued behind a timing run that has since ended (they go next)."""
        return sum(n for phase, n in self._queued_checks.items() if phase != self._phase)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the device together with other checking gates (waits for a timing run that holds the device
        or waits for it when this check arrives, and for no later one)."""
        if self._held_alone():
            yield
            return
        start = time.monotonic()
        with self._cond:
            if self._exclusive or self._waiting:
                arrived = self._phase
                self._queued_checks[arrived] += 1
                try:
                    while self._exclusive or (self._phase == arrived and self._waiting):
                        self._cond.wait()
                finally:
                    self._queued_checks[arrived] -= 1
                    if not self._queued_checks[arrived]:
                        del self._queued_checks[arrived]
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
        """Hold the device alone (waits for every current holder, and for the checks that queued behind the
        previous timing run)."""
        if self._held_alone():
            yield
            return
        start = time.monotonic()
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._waiting.add(ticket)
            acquired = False
            try:
                while not self._may_time(ticket):
                    self._cond.wait()
                self._exclusive = acquired = True
            finally:
                self._waiting.discard(ticket)
                if not acquired:
                    self._finish(ticket)
                self._cond.notify_all()  # a check may have waited only on this waiter
        _add_wait(start)
        began = time.monotonic()
        try:
            yield
        finally:
            _add_alone(began)
            with self._cond:
                self._exclusive = False
                self._finish(ticket)
                self._cond.notify_all()

    def _may_time(self, ticket: int) -> bool:
        """Whether timing run ``ticket`` may take the device now (called under the condition). A timing phase
        starts when the device is free and no queued check is due; it takes every timing run waiting at that
        moment, which then go one after another: the checks drain from the GPU once per phase, not once per
        timed case (8 evaluation runs side by side queue several timed cases at a time)."""
        if self._exclusive or self._sharers:
            return False
        if self._batch:
            return ticket in self._batch
        if self._checks_due():
            return False
        self._batch = set(self._waiting) if self.batch_timing else {ticket}
        return True

    def _finish(self, ticket: int) -> None:
        """Timing run ``ticket`` is done (or gave up waiting); the last of its phase ends the phase."""
        if ticket in self._batch:
            self._batch.discard(ticket)
            if not self._batch:
                self._phase += 1

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the device alone for everything this thread does inside: its own ``shared`` and ``exclusive``
        holds pass straight through meanwhile, every other thread's wait. For a job that ran out of device
        memory beside other jobs and is run once more with the GPU to itself (``runner.validate_job``).
        Re-entrant in one thread."""
        if self._held_alone():
            yield
            return
        with self.exclusive():
            _THREAD.lock = self
            try:
                yield
            finally:
                _THREAD.lock = None

    def _held_alone(self) -> bool:
        return getattr(_THREAD, "lock", None) is self

    def state(self) -> tuple[int, bool, int]:
        """(shared holders, held exclusively, exclusive waiters): for tests and progress lines."""
        with self._cond:
            return self._sharers, self._exclusive, len(self._waiting)


_LOCKS: dict[str, DeviceLock] = {}
_GUARD = threading.Lock()


_batch_timing = True  # what new process-wide locks start with (``set_timing_batches``)


def device_lock(device: str) -> DeviceLock:
    """The process-wide lock of ``device`` (``"cuda"``, ``"cuda:1"``, ...; one per name)."""
    with _GUARD:
        return _LOCKS.setdefault(device, DeviceLock(_batch_timing))


def set_timing_batches(on: bool) -> None:
    """Whether a timing phase takes every timing run waiting when it starts (default) or one run only, for
    every process-wide lock now and later: ``bench/validator.py --concurrent`` measures both in one run."""
    global _batch_timing
    with _GUARD:
        _batch_timing = on
        for lock in _LOCKS.values():
            lock.batch_timing = on
