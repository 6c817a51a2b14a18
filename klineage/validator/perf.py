"""The performance gate and the device ceilings (worker side, GPU only).

Timing (``time_cuda``) follows ``triton.testing.do_bench`` step for step, with a floor of 20 runs:
one call to warm up (compilation, autotuning, handles), five flushed calls to estimate the time, warm-up
calls for ~25 ms, then ``n`` runs (100 ms worth, at least 20, at most 1000), each preceded by a write of
a 256 MB buffer that flushes the L2, each bracketed by CUDA events; the device is synchronized once
after the last end event before any elapsed time is read. Median, p10, p90, min, mean and ``n`` are
reported in milliseconds.

The gate times the candidate (in its worker, which sends back the statistics and the last output) and the
workload's ``vendor`` (or ``reference`` when the workload has no ``vendor``) in the trusted side's baseline
process (``baseline_timer.py``: never in a process whose other threads could stall its launches), on the same
GPU, holding the device lock alone while the cases whose inputs were made ahead (up to ``CHUNK_BYTES``) are
timed back to back; speedup = vendor median / candidate median. With ``flops``/``bytes_moved`` and the
ceilings measured on this device (``measure_ceilings``: device-to-device copy bandwidth, counting bytes read +
written, and the bf16 ``torch.matmul`` rate at 4096³ and 8192³, best of the two), the roofline floor is
max(flops / gemm rate, bytes / copy bandwidth) and % of roofline = floor / median. A case that looks wrong
(``suspect_case``: a speedup above 10×, a time under the roofline floor, or either side's p90 more than twice
its p10) is timed again, both sides, and the second timing stands (the first is kept in the row as
``first_timing``): on the H200, timings taken while another process used the GPU gave a vendor 294× slower
than itself, and one such case made a geomean. A case still above 10× or under the floor after the second
timing is flagged (reported in the reason and ``metrics.flags``). The output of the last timed call is
compared with the reference, so a kernel that behaves differently while being timed fails here.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from klineage.validator import baseline_timer
from klineage.validator.checks import CandidateError, CaseFailure, _flatten, case_label, expected_output, judge
from klineage.validator.device_lock import device_lock
from klineage.validator.errors import WorkloadError
from klineage.validator.harness import one_line

FLUSH_BYTES = 256 * 1024 * 1024
MIN_RUNS = 20
SPEEDUP_FLAG = 10.0
SPREAD_LIMIT = 2.0  # p90 / p10 of one side above this: the GPU was not ours alone while it was timed


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _sleep_cycles_per_us() -> float:
    """GPU clock cycles per microsecond of ``torch.cuda._sleep``, measured with events (its clock is
    the SM clock, which boosts: measure, never assume)."""
    cycles = 2_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # first call: module load
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / max(start.elapsed_time(end) * 1e3, 1e-3)


def time_cuda(fn: Callable[[], Any], warmup_ms: float = 25.0, rep_ms: float = 100.0,
              min_runs: int = MIN_RUNS, max_runs: int = 1000,
              host_lead_us: float = 0.0) -> tuple[dict[str, float], Any]:
    """Time ``fn`` on the current CUDA device; return (stats in ms, the last call's return value).

    ``host_lead_us`` > 0 keeps the GPU busy that long (a sleep kernel) after each flush, before the
    start event, so that a host launch path shorter than flush + lead stays out of the figure: the
    result is the GPU's time only. 0 (the gate's method so far) times whatever the GPU waits for
    after the start event, host launch path included when it is longer than the flush
    (lineages/README.md, "GEMM small shapes")."""
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    lead_cycles = int(host_lead_us * _sleep_cycles_per_us()) if host_lead_us > 0 else 0
    out = fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-4)
    n_warmup = max(1, int(warmup_ms / estimate))
    n_runs = min(max_runs, max(min_runs, int(rep_ms / estimate)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_runs)]
    for _ in range(n_warmup):
        fn()
    for i in range(n_runs):
        flush.zero_()
        if lead_cycles:
            torch.cuda._sleep(lead_cycles)
        starts[i].record()
        out = fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    stats = {"median_ms": statistics.median(times), "p10_ms": _percentile(times, 0.1),
             "p90_ms": _percentile(times, 0.9), "min_ms": min(times), "mean_ms": statistics.fmean(times),
             "runs": n_runs}
    del flush
    return stats, out


def measure_ceilings() -> dict[str, Any]:
    """Measure the device's copy bandwidth (bytes/s) and bf16 GEMM rate (FLOP/s) on random data."""
    n = 1 << 30  # 1 GiB each way: far beyond L2
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy, _ = time_cuda(functools.partial(dst.copy_, src), rep_ms=200)
    copy_bw = 2 * n / (copy["median_ms"] * 1e-3)
    del src, dst
    gemm: dict[str, float] = {}
    for size in (4096, 8192):
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        stats, _ = time_cuda(functools.partial(torch.matmul, a, b), rep_ms=200)
        gemm[str(size)] = 2.0 * size**3 / (stats["median_ms"] * 1e-3)
        del a, b
    torch.cuda.empty_cache()
    return {"copy_bytes_per_s": copy_bw, "copy_median_ms": copy["median_ms"],
            "bf16_gemm_flops_per_s": max(gemm.values()), "bf16_gemm_by_size": gemm,
            "method": "median of >=20 CUDA-event-timed runs after warm-up; copy counts bytes read + written "
                      "(1 GiB uint8 device-to-device); GEMM torch.matmul bf16 random N(0,1), best of 4096^3 and "
                      "8192^3"}


def _row(case: Any, cand: dict, base: dict | None, baseline_name: str, first: dict[str, Any] | None,
         flags: list[str]) -> dict[str, Any]:
    """The gate's row of one timed case (roofline figures when the case has a floor); flags what looks wrong."""
    row: dict[str, Any] = {"shape": dict(case.shape), "dtype": case.dtype, "candidate": cand, baseline_name: base,
                           "speedup": base["median_ms"] / cand["median_ms"] if base else None}
    if first is not None:
        row["first_timing"] = first
    if case.floor_ms is not None:
        row["roofline_floor_ms"] = case.floor_ms
        row["pct_roofline"] = 100.0 * case.floor_ms / cand["median_ms"]
        row["achieved_bytes_per_s"] = case.moved / (cand["median_ms"] * 1e-3) if case.moved else None
        row["achieved_flops_per_s"] = case.flops / (cand["median_ms"] * 1e-3) if case.flops else None
        if row["pct_roofline"] > 100.0:
            flags.append(f"{case.label}: {row['pct_roofline']:.0f}% of roofline (faster than the device "
                         "ceilings allow)")
    if row["speedup"] is not None and row["speedup"] > SPEEDUP_FLAG:
        flags.append(f"{case.label}: speedup {row['speedup']:.1f}x over {baseline_name} (> {SPEEDUP_FLAG:g}x)")
    return row


def plausible_stats(stats: Any) -> str | None:
    """Why the worker's timing statistics are not believable (None when they are)."""
    if not isinstance(stats, dict):
        return "no statistics"
    keys = ("median_ms", "p10_ms", "p90_ms", "min_ms", "mean_ms", "runs")
    if any(not isinstance(stats.get(k), int | float) or isinstance(stats.get(k), bool) for k in keys):
        return "statistics are missing or not numbers"
    values = [float(stats[k]) for k in keys[:5]]
    if any(v != v or v <= 0 or v == float("inf") for v in values):
        return "a time is not a positive finite number"
    if not stats["min_ms"] <= stats["p10_ms"] <= stats["median_ms"] <= stats["p90_ms"] or stats["runs"] < MIN_RUNS:
        return f"inconsistent statistics (min <= p10 <= median <= p90, >= {MIN_RUNS} runs): {stats}"
    return None


def suspect_case(candidate: dict[str, float], baseline: dict[str, float] | None,
                 roofline_floor_ms: float | None) -> str | None:
    """Why a timed case should be timed again (None when it looks sound).

    Pure: a speedup over the baseline above ``SPEEDUP_FLAG``, a candidate median under the roofline floor,
    or either side's p90 above ``SPREAD_LIMIT`` × its p10 (a time that moved while it was measured)."""
    if baseline is not None and baseline["median_ms"] / candidate["median_ms"] > SPEEDUP_FLAG:
        return f"speedup {baseline['median_ms'] / candidate['median_ms']:.1f}x (> {SPEEDUP_FLAG:g}x)"
    if roofline_floor_ms is not None and candidate["median_ms"] < roofline_floor_ms:
        return "faster than the roofline floor"
    for side, stats in (("candidate", candidate), ("baseline", baseline)):
        if stats is not None and stats["p90_ms"] > SPREAD_LIMIT * stats["p10_ms"]:
            return f"{side} p90 {stats['p90_ms'] / stats['p10_ms']:.1f}x its p10"
    return None


#: Bytes of inputs and reference outputs made ahead of one timing hold. The cases that fit are timed back to
#: back in one exclusive hold of the device: each hold first waits for the checks running to finish, and 8
#: cases held one by one made the performance gate queue a median 29 s on the H100 with 8 jobs side by side.
CHUNK_BYTES = 2 << 30


@dataclass(frozen=True)
class _Case:
    """One shape × dtype of the gate, with its roofline floor when the ceilings are known."""

    shape: dict
    dtype: str
    label: str
    floor_ms: float | None
    flops: float
    moved: float


def _nbytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (nested tuples and lists, as inputs and outputs come)."""
    return sum(t.numel() * t.element_size() for t in _flatten(value) if isinstance(t, torch.Tensor))


def _on(device: str) -> contextlib.AbstractContextManager[Any]:
    """``device`` made current (a CUDA device; nothing to do for the CPU)."""
    where = torch.device(device)
    return torch.cuda.device(where) if where.type == "cuda" else contextlib.nullcontext()


def _cases(reference: Any, manifest: Any, shapes: Sequence[dict], ceilings: dict[str, Any] | None) -> list[_Case]:
    """Every shape × dtype of the gate in order, with its roofline floor when ``ceilings`` and the workload's
    ``flops``/``bytes_moved`` allow one."""
    flops_fn = getattr(reference, "flops", None)
    bytes_fn = getattr(reference, "bytes_moved", None)
    roofline = bool(ceilings and (flops_fn or bytes_fn))
    out = []
    for shape in shapes:
        flops = float(flops_fn(dict(shape))) if roofline and callable(flops_fn) else 0.0
        for dtype in manifest.dtypes:
            moved, floor_ms = 0.0, None
            if roofline and ceilings is not None:
                moved = float(bytes_fn(dict(shape), dtype)) if callable(bytes_fn) else 0.0
                floor_ms = 1e3 * max(flops / ceilings["bf16_gemm_flops_per_s"], moved / ceilings["copy_bytes_per_s"])
            out.append(_Case(dict(shape), dtype, case_label(shape, dtype), floor_ms, flops, moved))
    return out


def _make_chunk(reference: Any, cases: Sequence[_Case], device: str,
                limit: int) -> tuple[list[tuple[_Case, Any, Any]], dict[str, Any] | None]:
    """Inputs and reference outputs of the first cases of ``cases`` whose tensors fit in ``limit`` bytes (at
    least one), made while other jobs' checks may use the device too: (the cases made, a failing outcome)."""
    made: list[tuple[_Case, Any, Any]] = []
    size = 0
    with device_lock(device).shared(), _on(device):
        for case in cases:
            if made and size >= limit:
                break
            try:
                inputs = reference.make_inputs(dict(case.shape), case.dtype, 0, device=device)
                ref_out = expected_output(reference, inputs, device)
            except WorkloadError:  # make_inputs broken (trusted.TrustedReference): the workload's fault, no verdict
                raise
            except Exception as exc:
                return made, {"status": "fail", "reason": f"timing failed on {case.label}: the workload's inputs "
                                                          f"or reference raised: {one_line(exc)}"}
            made.append((case, inputs, ref_out))
            size += _nbytes(inputs) + _nbytes(ref_out)
    return made, None


def _time_chunk(runner: Any, reference: Any, made: Sequence[tuple[_Case, Any, Any]], rep_ms: float,
                time_baseline: bool, host_lead_us: float,
                device: str) -> tuple[list[tuple[dict, Any, dict | None]], dict[str, Any] | None]:
    """The candidate and the baseline timed on each case of ``made``, back to back in one exclusive hold of the
    device: ((candidate statistics, its last output, baseline statistics) per case, a failing outcome)."""
    timed: list[tuple[dict, Any, dict | None]] = []
    with device_lock(device).exclusive(), _on(device):
        for case, inputs, _ in made:
            try:
                cand, last = runner.time("performance", inputs, rep_ms=rep_ms, host_lead_us=host_lead_us)
                base = baseline_timer.time_baseline(Path(reference.__file__), dict(case.shape), case.dtype, rep_ms,
                                                    host_lead_us, device) if time_baseline else None
            except CandidateError as exc:
                return timed, {"status": "fail", "reason": f"timing failed on {case.label}: {exc}"}
            except Exception as exc:
                return timed, {"status": "fail", "reason": f"timing failed on {case.label}: {one_line(exc)}"}
            timed.append((cand, last, base))
    return timed, None


def _wrong_timing(case: _Case, cand: dict, last: Any, ref_out: Any, tolerance: float) -> str | None:
    """Why a timing cannot stand (implausible statistics, or a wrong output of the last timed run), or None."""
    why = plausible_stats(cand)
    if why:
        return f"the worker's timing of {case.label} is not plausible: {why}"
    try:
        judge(last, ref_out, tolerance)
    except CaseFailure as exc:
        return f"output of the last timed run is wrong on {case.label}: {exc}"
    return None


def run_performance(runner: Any, reference: Any, manifest: Any, shapes: Sequence[dict],
                    ceilings: dict[str, Any] | None, rep_ms: float = 100.0,
                    time_baseline: bool = True, host_lead_us: float = 0.0, device: str = "cuda",
                    chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """The performance gate over ``shapes`` × dtypes on the GPU (trusted side); returns an outcome dict.

    The candidate is timed in its worker (``runner.time``: CUDA events, the statistics and the last
    output come back and are checked here); the vendor/reference is timed in the baseline process
    (``baseline_timer.time_baseline``) on the same device, this thread holding ``device_lock(device)``
    exclusively, so that no other gate of ours runs on the GPU meanwhile. The inputs and reference outputs
    of as many cases as fit in ``chunk_bytes`` are made first (the device shared), then those cases are timed
    back to back in one exclusive hold; a suspect case is timed again on its own, with fresh inputs.
    ``rep_ms``: timed milliseconds per case (at least ``MIN_RUNS`` runs either way). ``time_baseline``
    False skips timing the vendor/reference (the backward walker compares kernel versions with each
    other; the expert's own job times the vendor): rows then carry no speedup. ``host_lead_us``:
    ``time_cuda``'s GPU lead after each flush (0: the launch path may show in the time).
    """
    vendor = getattr(reference, "vendor", None)
    baseline_name = "vendor" if callable(vendor) else "reference"
    rows: list[dict[str, Any]] = []
    flags: list[str] = []
    cases = _cases(reference, manifest, shapes, ceilings)
    done = 0
    while done < len(cases):
        made, failed = _make_chunk(reference, cases[done:], device, chunk_bytes)
        if failed is None:
            timed, failed = _time_chunk(runner, reference, made, rep_ms, time_baseline, host_lead_us, device)
        if failed is not None:
            return {**failed, "metrics": {"rows": rows}}
        done += len(made)
        for (case, _, ref_out), (cand, last, base) in zip(made, timed, strict=True):
            tolerance = float(manifest.tolerance[case.dtype])
            why = _wrong_timing(case, cand, last, ref_out, tolerance)
            first: dict[str, Any] | None = None
            suspect = suspect_case(cand, base, case.floor_ms) if why is None else None
            if suspect:  # once more, on its own, with fresh inputs; the second timing stands
                first = {"why": suspect, "candidate_median_ms": cand["median_ms"],
                         baseline_name + "_median_ms": base["median_ms"] if base else None}
                again, failed = _make_chunk(reference, [case], device, chunk_bytes)
                if failed is None:
                    retimed, failed = _time_chunk(runner, reference, again, rep_ms, time_baseline, host_lead_us,
                                                  device)
                if failed is not None:
                    return {**failed, "metrics": {"rows": rows}}
                (cand, last, base), ref_out = retimed[0], again[0][2]
                why = _wrong_timing(case, cand, last, ref_out, tolerance)
            if why is not None:
                return {"status": "fail", "metrics": {"rows": rows}, "reason": why}
            rows.append(_row(case, cand, base, baseline_name, first, flags))
        del made
    speedups = [r["speedup"] for r in rows if r["speedup"] is not None]
    gm = statistics.geometric_mean(speedups) if speedups else None
    metrics = {"rows": rows, "baseline": baseline_name, "geomean_speedup": gm, "flags": flags,
               "ceilings": ceilings, "rep_ms": rep_ms,
               "timing": "CUDA events, L2 flushed (256 MB) before every run, median of >=20 runs after warm-up"
                         + (f", GPU kept busy {host_lead_us:g} us after each flush (host launch path hidden)"
                            if host_lead_us > 0 else "")}
    if host_lead_us > 0:
        metrics["host_lead_us"] = host_lead_us
    pct = [r["pct_roofline"] for r in rows if "pct_roofline" in r]
    pct_note = f", {min(pct):.0f}-{max(pct):.0f}% of roofline" if pct else ", roofline: no flops/bytes_moved"
    flag_note = f"; FLAGGED: {flags[0]}" + (f" (+{len(flags) - 1} more)" if len(flags) > 1 else "") if flags else ""
    versus = (f"speedup over {baseline_name} geomean {gm:.2f}x (min {min(speedups):.2f}x, max {max(speedups):.2f}x)"
              if gm is not None else f"{baseline_name} not timed")
    return {"status": "pass", "metrics": metrics, "reason": f"{len(rows)} cases timed; {versus}{pct_note}{flag_note}"}
