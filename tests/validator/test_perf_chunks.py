"""How the performance gate holds the device: the cases whose inputs fit are timed back to back in one
exclusive hold (each hold first waits for the running checks to drain), a suspect case once more on its own.
A scripted candidate and baseline stand in for the timing (the timing itself runs on the GPU: test_gpu.py);
what is tested here is the gate's bookkeeping, on the CPU device."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klineage.schema.manifest import load_manifest
from klineage.validator import perf
from klineage.validator.checks import CallResult
from klineage.validator.device_lock import DeviceLock
from klineage.validator.trusted import load_trusted_reference

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"


def _stats(median: float, spread: float = 1.05) -> dict[str, Any]:
    return {"median_ms": median, "p10_ms": median / spread, "p90_ms": median * spread, "min_ms": median / 1.1,
            "mean_ms": median, "runs": 50}


class CountingLock(DeviceLock):
    """A device lock that logs each hold it gives."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with super().exclusive():
            self.log.append("exclusive")
            yield

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with super().shared():
            self.log.append("shared")
            yield


class ScriptedRunner:
    """Times nothing: answers the statistics it is given per call, and the right output."""

    def __init__(self, reference: Any, lock: CountingLock, medians: list[float]) -> None:
        self.reference, self.lock, self.medians = reference, lock, list(medians)
        self.calls = 0

    def time(self, gate: str, inputs: Any, rep_ms: float, host_lead_us: float) -> tuple[dict, Any]:
        assert self.lock.state()[1], "a case was timed without the device held alone"
        self.lock.log.append("time")
        self.calls += 1
        out = self.reference.reference(*inputs)
        return _stats(self.medians.pop(0)), CallResult(out, (out.device.type,), launches=1)


@pytest.fixture()
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, CountingLock]:
    lock = CountingLock()
    monkeypatch.setattr(perf, "device_lock", lambda device: lock)
    monkeypatch.setattr(perf.baseline_timer, "time_baseline", lambda *args, **kwargs: _stats(2.0))
    manifest = load_manifest(ROWSUM)
    return load_trusted_reference(manifest.reference_path), manifest, lock


SHAPES = [{"rows": 4, "cols": 33}, {"rows": 3, "cols": 64}]  # × fp32, fp16: four cases


def test_cases_that_fit_are_timed_in_one_hold(setup: tuple[Any, Any, CountingLock]) -> None:
    reference, manifest, lock = setup
    runner = ScriptedRunner(reference, lock, [1.0, 1.0, 1.0, 1.0])
    out = perf.run_performance(runner, reference, manifest, SHAPES, None, device="cpu")
    assert out["status"] == "pass", out["reason"]
    assert lock.log == ["shared", "exclusive", "time", "time", "time", "time"]
    assert [r["speedup"] for r in out["metrics"]["rows"]] == [2.0, 2.0, 2.0, 2.0]
    assert out["metrics"]["geomean_speedup"] == pytest.approx(2.0)


def test_a_chunk_holds_what_fits_and_the_rest_follows(setup: tuple[Any, Any, CountingLock]) -> None:
    reference, manifest, lock = setup
    runner = ScriptedRunner(reference, lock, [1.0] * 4)
    out = perf.run_performance(runner, reference, manifest, SHAPES, None, device="cpu", chunk_bytes=1)
    assert out["status"] == "pass"
    assert lock.log == ["shared", "exclusive", "time"] * 4  # each case alone: one made, one timed
    assert len(out["metrics"]["rows"]) == 4


def test_a_suspect_case_is_timed_again_alone_and_the_second_timing_stands(
        setup: tuple[Any, Any, CountingLock]) -> None:
    reference, manifest, lock = setup
    runner = ScriptedRunner(reference, lock, [1.0, 0.1, 1.0, 1.0, 0.5])  # the second case: 20x, suspect
    out = perf.run_performance(runner, reference, manifest, SHAPES, None, device="cpu")
    assert out["status"] == "pass"
    assert lock.log == ["shared", "exclusive", "time", "time", "time", "time", "shared", "exclusive", "time"]
    rows = out["metrics"]["rows"]
    assert rows[1]["first_timing"]["candidate_median_ms"] == 0.1 and rows[1]["speedup"] == pytest.approx(4.0)
    assert "first_timing" not in rows[0]


def test_a_wrong_output_while_timed_fails_the_gate_naming_the_case(setup: tuple[Any, Any, CountingLock]) -> None:
    reference, manifest, lock = setup

    class Wrong(ScriptedRunner):
        def time(self, gate: str, inputs: Any, rep_ms: float, host_lead_us: float) -> tuple[dict, Any]:
            stats, last = super().time(gate, inputs, rep_ms, host_lead_us)
            if self.calls == 3:
                last = CallResult(last.out + 1, last.out_devices, launches=1)
            return stats, last

    out = perf.run_performance(Wrong(reference, lock, [1.0] * 4), reference, manifest, SHAPES, None, device="cpu")
    assert out["status"] == "fail" and "output of the last timed run is wrong on" in out["reason"]
    assert "'rows': 3" in out["reason"] and len(out["metrics"]["rows"]) == 2


def test_inputs_that_cannot_be_made_fail_the_gate(setup: tuple[Any, Any, CountingLock],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    reference, manifest, lock = setup
    monkeypatch.setattr(reference, "make_inputs", lambda *args, **kwargs: (_ for _ in ()).throw(MemoryError("full")))
    out = perf.run_performance(ScriptedRunner(reference, lock, []), reference, manifest, SHAPES, None, device="cpu")
    assert out["status"] == "fail" and "the workload's inputs or reference raised: MemoryError: full" in out["reason"]
