"""SingleFlight: concurrent identical jobs run once; LocalValidator validates a kernel once when several
callers ask for it at the same time (the agent evaluation's side-by-side runs)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from klineage.validator import LocalValidator
from klineage.validator import client as client_module
from klineage.validator.single_flight import SingleFlight

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"


def test_callers_of_a_running_key_share_its_one_answer() -> None:
    flights: SingleFlight[int] = SingleFlight()
    started, release = threading.Event(), threading.Event()
    runs = []

    def work() -> int:
        runs.append(1)
        started.set()
        release.wait(5)
        return 42

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(flights.do, "k", work)
        assert started.wait(5)
        others = [pool.submit(flights.do, "k", work) for _ in range(3)]
        time.sleep(0.1)
        assert flights.running() == 1
        release.set()
        answers = [first.result(5), *(f.result(5) for f in others)]
    assert len(runs) == 1
    assert answers[0] == (42, False) and all(a == (42, True) for a in answers[1:])
    assert flights.running() == 0


def test_different_keys_run_side_by_side_and_a_finished_key_runs_again() -> None:
    flights: SingleFlight[str] = SingleFlight()
    barrier = threading.Barrier(2, timeout=5)

    def work(name: str) -> str:
        barrier.wait()  # both must be inside at once, or this times out
        return name

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(flights.do, "a", lambda: work("a")), pool.submit(flights.do, "b", lambda: work("b"))
        assert a.result(5) == ("a", False) and b.result(5) == ("b", False)
    assert flights.do("a", lambda: "again") == ("again", False)


def test_a_failure_reaches_every_waiter_and_is_not_remembered() -> None:
    flights: SingleFlight[int] = SingleFlight()
    started, release = threading.Event(), threading.Event()

    def broken() -> int:
        started.set()
        release.wait(5)
        raise RuntimeError("worker lost")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(flights.do, "k", broken)
        assert started.wait(5)
        waiter = pool.submit(flights.do, "k", lambda: 0)
        time.sleep(0.1)
        release.set()
        for future in (first, waiter):
            with pytest.raises(RuntimeError, match="worker lost"):
                future.result(5)
    assert flights.do("k", lambda: 7) == (7, False)


def test_local_validator_validates_a_kernel_once_for_concurrent_callers(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = []
    real = client_module.validate_job

    def counted(*args: Any, **kwargs: Any) -> Any:
        jobs.append(1)
        time.sleep(0.5)  # the others arrive while it runs
        return real(*args, **kwargs)

    monkeypatch.setattr(client_module, "validate_job", counted)
    validator = LocalValidator(cache=tmp_path / "results.sqlite", device="cpu")
    source = (ROWSUM / "kernel.py").read_text()
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: validator.validate(source, ROWSUM, gates=["correctness"]), range(3)))
    assert len(jobs) == 1
    docs = [r.to_dict() for r in results]
    assert docs[0]["verdict"] == "pass"
    assert all(d == docs[0] for d in docs)  # one validation: the very same document (dates included)
    assert validator.cache is not None
    assert validator.cache.get(validator.prepare(source, ROWSUM, ["correctness"], None)[-1]) is not None
