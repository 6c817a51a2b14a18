"""The vendor/reference timed in a process of its own (trusted side, GPU only).

CUDA events time what the GPU does between two marks the host enqueues, so a host thread that stops
between the start mark and its kernel's launch adds its pause to the time. The trusted process runs
several jobs in threads (the service, the agent evaluation's ``--jobs``); while one of them timed the
vendor, the others held the GIL (unpacking outputs, comparing on the host, planning), and the vendor's
median grew with them: on the H200 a 50 µs batched matmul was timed at 15.7 ms, a "294× speedup" for the
candidate, which is timed in its own worker process and was never slowed so. The candidate and its
baseline must be timed under the same conditions, so the baseline gets a process too: one per device,
started on first use (spawned: CUDA cannot be forked), kept warm, fed one case at a time by the
performance gate while it holds the device alone.
"""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import threading
from pathlib import Path

_TIMERS: dict[str, concurrent.futures.ProcessPoolExecutor] = {}
_GUARD = threading.Lock()


def _time_in_child(reference_path: str, shape: dict[str, int], dtype: str, rep_ms: float,
                   host_lead_us: float, device: str) -> dict[str, float]:
    """Child side: the workload's vendor (or reference when it has none) timed on its seed-0 inputs."""
    import torch

    from klineage.validator.perf import time_cuda
    from klineage.validator.trusted import load_trusted_reference

    reference = load_trusted_reference(Path(reference_path))
    vendor = getattr(reference, "vendor", None)
    baseline = vendor if callable(vendor) else reference.reference
    with torch.cuda.device(torch.device(device)):
        inputs = reference.make_inputs(dict(shape), dtype, 0, device=device)
        stats, _ = time_cuda(functools.partial(baseline, *inputs), rep_ms=rep_ms, host_lead_us=host_lead_us)
    return stats


def _timer(device: str) -> concurrent.futures.ProcessPoolExecutor:
    with _GUARD:
        if device not in _TIMERS:
            _TIMERS[device] = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _TIMERS[device]


def _forget(device: str, timer: concurrent.futures.ProcessPoolExecutor) -> None:
    with _GUARD:
        if _TIMERS.get(device) is timer:
            del _TIMERS[device]
    timer.shutdown(wait=False, cancel_futures=True)


def time_baseline(reference_path: Path, shape: dict[str, int], dtype: str, rep_ms: float,
                  host_lead_us: float = 0.0, device: str = "cuda", timeout_s: float = 300.0) -> dict[str, float]:
    """``time_cuda``'s statistics of the workload's vendor (reference when none) on ``shape`` × ``dtype``,
    measured in the device's baseline process, never in this one.

    The caller holds the device alone (``device_lock(device).exclusive()``). A baseline process that died
    is replaced once; a second failure raises ``RuntimeError`` with the cause."""
    last: BaseException | None = None
    for _ in range(2):
        timer = _timer(device)
        try:
            return timer.submit(_time_in_child, str(reference_path), dict(shape), dtype, rep_ms, host_lead_us,
                                device).result(timeout=timeout_s)
        except concurrent.futures.process.BrokenProcessPool as exc:
            last = exc
            _forget(device, timer)
        except concurrent.futures.TimeoutError as exc:
            _forget(device, timer)
            raise RuntimeError(f"the baseline took more than {timeout_s:g} s to time") from exc
    raise RuntimeError(f"the baseline process died twice: {last}")


def shutdown_baseline_timers() -> None:
    """Stop every baseline process (the service and the evaluation call this when they end)."""
    with _GUARD:
        timers = list(_TIMERS.values())
        _TIMERS.clear()
    for timer in timers:
        timer.shutdown(wait=True, cancel_futures=True)
