"""The device lock: checking gates share the GPU, a timed case has it alone, and neither is starved."""

from __future__ import annotations

import threading
import time

import pytest

from klineage.validator.device_lock import DeviceLock, device_lock, held_alone_s, waited_s


def _wait_for(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.005)


def _start(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args)
    thread.start()
    return thread


def _logged_check(lock: DeviceLock, events: list[str], name: str) -> None:
    """A checking gate that only logs that it got the device."""
    with lock.shared():
        events.append(name)


def test_checking_gates_share_the_device() -> None:
    lock = DeviceLock()
    with lock.shared(), lock.shared():
        assert lock.state() == (2, False, 0)
    assert lock.state() == (0, False, 0)


def test_a_timed_case_waits_for_checks_and_excludes_new_ones() -> None:
    lock = DeviceLock()
    events: list[str] = []
    check_may_end = threading.Event()

    def check() -> None:
        with lock.shared():
            events.append("check start")
            check_may_end.wait(5)
            events.append("check end")

    def timing() -> None:
        with lock.exclusive():
            events.append("timing start")
            assert lock.state()[0] == 0
            events.append("timing end")

    first = threading.Thread(target=check)
    first.start()
    _wait_for(lambda: lock.state()[0] == 1)
    timer = threading.Thread(target=timing)
    timer.start()
    _wait_for(lambda: lock.state()[2] == 1)  # the timing run waits for the running check
    late = _start(_logged_check, lock, events, "late check")
    time.sleep(0.05)
    assert "late check" not in events  # no new check starts while a timing run waits
    check_may_end.set()
    for thread in (first, timer, late):
        thread.join(5)
    assert events == ["check start", "check end", "timing start", "timing end", "late check"]


def test_one_lock_per_device_name() -> None:
    assert device_lock("cuda:7") is device_lock("cuda:7")
    assert device_lock("cuda:7") is not device_lock("cuda:6")


def test_each_thread_accounts_the_time_it_waited_for_the_device() -> None:
    lock = DeviceLock()
    waited: dict[str, float] = {}
    held = threading.Event()
    release = threading.Event()

    def checker() -> None:
        with lock.shared():
            held.set()
            release.wait(5)

    def timer() -> None:
        before = waited_s()
        with lock.exclusive():
            pass
        waited["timer"] = waited_s() - before

    first = threading.Thread(target=checker)
    first.start()
    held.wait(5)
    second = threading.Thread(target=timer)
    second.start()
    _wait_for(lambda: lock.state()[2] == 1)
    time.sleep(0.2)
    release.set()
    for thread in (first, second):
        thread.join(5)
    assert 0.2 <= waited["timer"] < 5.0  # it queued behind the check for the 0.2 s the check held on
    before = waited_s()
    with lock.shared():
        pass
    assert waited_s() - before < 0.05  # an uncontended hold waits for nothing


def test_checks_are_not_starved_by_a_stream_of_timing_runs() -> None:
    """Phase-fair: a check waits for the timing run in progress (or queued) when it arrives, not for every
    timing run queued after it (writer preference alone kept an integrity gate waiting a minute)."""
    lock = DeviceLock()
    phases = [0]
    stop = threading.Event()

    def timer() -> None:
        while not stop.is_set():
            with lock.exclusive():
                phases[0] += 1
                time.sleep(0.01)

    waits: list[int] = []

    def checks() -> None:
        for _ in range(5):
            arrived = phases[0]
            with lock.shared():
                assert not lock.state()[1]  # never together with a timed case
                waits.append(phases[0] - arrived)

    timers = [threading.Thread(target=timer) for _ in range(3)]
    for thread in timers:
        thread.start()
    checker = threading.Thread(target=checks)
    try:
        _wait_for(lambda: phases[0] >= 5)
        checker.start()
        checker.join(5)  # 5 checks behind 10 ms timing runs: well under a second when they are not starved
        finished = not checker.is_alive()
    finally:
        stop.set()
        for thread in (*timers, checker):
            if thread.ident is not None:
                thread.join(5)
    assert finished, f"5 checks did not get the device in 5 s ({len(waits)} did) under a stream of timing runs"
    # at most the timing phase in progress or starting when it arrived: one run of each timer
    assert max(waits) <= len(timers), f"a check waited through {max(waits)} timing runs"


def test_checks_queued_behind_a_timing_run_go_before_the_next_one() -> None:
    lock = DeviceLock()
    events: list[str] = []
    first_may_end = threading.Event()

    def timing(name: str, hold: threading.Event | None = None) -> None:
        with lock.exclusive():
            events.append(f"{name} start")
            if hold is not None:
                hold.wait(5)
            events.append(f"{name} end")

    first = _start(timing, "timing 1", first_may_end)
    _wait_for(lambda: lock.state()[1])
    queued_check = _start(_logged_check, lock, events, "check")
    time.sleep(0.05)
    second = _start(timing, "timing 2")
    _wait_for(lambda: lock.state()[2] == 1)
    first_may_end.set()
    for thread in (first, queued_check, second):
        thread.join(5)
    assert events == ["timing 1 start", "timing 1 end", "check", "timing 2 start", "timing 2 end"]


@pytest.mark.parametrize("batch", [True, False])
def test_timing_runs_waiting_together_go_back_to_back_in_one_phase(batch: bool) -> None:
    """The checks drain from the GPU once per timing phase: runs that waited together do not let the checks
    queued meanwhile in between them; a run that came after the phase started waits for those checks.
    (``batch_timing=False``, the comparison's baseline: one run per phase, the queued check goes second.)"""
    lock = DeviceLock(batch_timing=batch)
    events: list[str] = []
    check_may_end = threading.Event()

    def running_check() -> None:
        with lock.shared():
            events.append("check 1")
            check_may_end.wait(5)

    def timing(name: str) -> None:
        with lock.exclusive():
            events.append(name)
            time.sleep(0.02)

    holder = _start(running_check)
    _wait_for(lambda: lock.state()[0] == 1)
    threads = []
    for i in (1, 2, 3):
        threads.append(_start(timing, f"timing {i}"))
        _wait_for(lambda i=i: lock.state()[2] == i)
    queued = _start(_logged_check, lock, events, "check 2")
    time.sleep(0.05)
    check_may_end.set()  # the phase starts: timings 1-3 were waiting
    _wait_for(lambda: lock.state()[1])
    late = _start(timing, "timing 4")
    for thread in (holder, *threads, queued, late):
        thread.join(5)
    assert events[0] == "check 1"
    if not batch:
        assert events[2] == "check 2" and sorted(events[1:2] + events[3:]) == [f"timing {i}" for i in (1, 2, 3, 4)]
        return
    assert sorted(events[1:4]) == ["timing 1", "timing 2", "timing 3"]  # back to back, in any order
    assert events[4:] == ["check 2", "timing 4"]  # the late run waits for the check queued behind the phase
    assert lock.state() == (0, False, 0)


def test_a_job_run_alone_passes_its_own_holds_and_keeps_everyone_else_out() -> None:
    lock = DeviceLock()
    events: list[str] = []
    inside = threading.Event()
    may_leave = threading.Event()

    def retried_job() -> None:
        with lock.alone():
            with lock.shared(), lock.exclusive(), lock.alone():  # its own gates' holds: no self-deadlock
                events.append("job gates")
            assert lock.state() == (0, True, 0)
            inside.set()
            may_leave.wait(5)
        events.append("job done")

    job = _start(retried_job)
    assert inside.wait(5)
    other = _start(_logged_check, lock, events, "other check")
    time.sleep(0.05)
    assert "other check" not in events  # another job's check waits while the retried job has the GPU
    may_leave.set()
    for thread in (job, other):
        thread.join(5)
    assert events == ["job gates", "job done", "other check"]
    assert lock.state() == (0, False, 0)


def test_each_thread_accounts_the_time_it_held_the_device_alone() -> None:
    lock = DeviceLock()
    before = held_alone_s()
    with lock.shared():
        time.sleep(0.05)
    assert held_alone_s() == before  # a shared hold is not alone
    with lock.exclusive():
        time.sleep(0.1)
    with lock.alone():
        time.sleep(0.1)
    assert 0.2 <= held_alone_s() - before < 2.0
    other: list[float] = []
    thread = threading.Thread(target=lambda: other.append(held_alone_s()))
    thread.start()
    thread.join(5)
    assert other == [0.0]  # per thread: another thread held nothing
