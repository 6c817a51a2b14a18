"""On the GPU: timing is stable and agrees with triton.testing.do_bench; the device ceilings are measured.

Skipped without CUDA. With ``KLINEAGE_GPU_OUT`` set the figures are written there (gpu_report.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from validator import gpu_report  # noqa: E402

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"


def _kernel_module():
    spec = importlib.util.spec_from_file_location("rowsum_kernel_for_timing", ROWSUM / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_timing_is_stable_and_matches_do_bench() -> None:
    import triton.testing

    from klineage.validator.perf import time_cuda

    kernel = _kernel_module()
    results = {}
    for rows, cols, dtype in ((16384, 16384, torch.float32), (16384, 16384, torch.float16)):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        ref = x.double().sum(-1)
        out = kernel.run(x)
        assert float((out.double() - ref).norm() / ref.norm()) < 2e-3
        first, _ = time_cuda(lambda x=x: kernel.run(x))
        second, _ = time_cuda(lambda x=x: kernel.run(x))
        bench = triton.testing.do_bench(lambda x=x: kernel.run(x), return_mode="median")
        vendor, _ = time_cuda(lambda x=x: x.sum(-1))
        key = f"{rows}x{cols} {str(dtype).replace('torch.', '')}"
        results[key] = {"first": first, "second": second, "do_bench_median_ms": bench,
                        "vendor_sum": vendor,
                        "repeat_diff_pct": 100 * abs(first["median_ms"] - second["median_ms"]) / first["median_ms"],
                        "vs_do_bench_pct": 100 * abs(first["median_ms"] - bench) / bench,
                        "bytes_per_s": x.numel() * x.element_size() / (first["median_ms"] * 1e-3)}
    gpu_report.write("timing", {"results": results, "criteria": "repeat within 2 %, do_bench within 3 %"})
    for key, row in results.items():
        assert row["repeat_diff_pct"] < 2.0, (key, row)
        assert row["vs_do_bench_pct"] < 3.0, (key, row)
        assert row["first"]["runs"] >= 20


def test_host_lead_keeps_a_slow_host_path_out_of_the_time() -> None:
    """A tiny kernel behind 150 us of host work per call: without a lead the medians take in the host
    path (the flush hides only part of it); with ``host_lead_us=400`` they are the GPU's time again."""
    import time as host_time

    from klineage.validator.perf import time_cuda

    kernel = _kernel_module()
    x = torch.randn(64, 1024, device="cuda", dtype=torch.float32)

    def slow_host() -> torch.Tensor:
        t0 = host_time.perf_counter()
        while host_time.perf_counter() - t0 < 150e-6:
            pass
        return kernel.run(x)

    fast, _ = time_cuda(lambda: kernel.run(x), host_lead_us=400)
    slow, _ = time_cuda(slow_host)
    hidden, _ = time_cuda(slow_host, host_lead_us=400)
    gpu_report.write("host_lead", {"fast": fast, "slow_no_lead": slow, "slow_with_lead": hidden})
    assert slow["median_ms"] > 2 * fast["median_ms"], (slow, fast)
    assert hidden["median_ms"] < 1.5 * fast["median_ms"], (hidden, fast)


def test_device_ceilings_are_measured() -> None:
    from klineage.validator.runner import measure_device_ceilings

    ceilings = measure_device_ceilings()
    gpu_report.write("ceilings", {"ceilings": ceilings})
    assert 1e12 < ceilings["copy_bytes_per_s"] < 2e13
    assert 1e14 < ceilings["bf16_gemm_flops_per_s"] < 3e15


def test_baseline_process_is_not_slowed_by_busy_threads_of_the_trusted_process() -> None:
    """Threads of the trusted process that hold the GIL stall in-process launches between the timing
    marks (the vendor of a 50 us bmm was once timed at 15.7 ms so); the baseline process is not touched."""
    import threading

    from klineage.validator.baseline_timer import time_baseline
    from klineage.validator.perf import time_cuda
    from klineage.validator.trusted import load_trusted_reference

    reference_path = ROWSUM / "reference.py"
    shape, dtype = {"rows": 1024, "cols": 1024}, "fp32"
    quiet = time_baseline(reference_path, shape, dtype, rep_ms=25)
    reference = load_trusted_reference(reference_path)
    baseline = getattr(reference, "vendor", None) or reference.reference
    inputs = reference.make_inputs(dict(shape), dtype, 0, device="cuda")
    stop = threading.Event()

    def hold_the_gil() -> None:
        while not stop.is_set():
            sum(i * i for i in range(200_000))  # pure Python: keeps the GIL between switch intervals

    hogs = [threading.Thread(target=hold_the_gil, daemon=True) for _ in range(3)]
    for hog in hogs:
        hog.start()
    try:
        stalled, _ = time_cuda(lambda: baseline(*inputs), rep_ms=25)
        separate = time_baseline(reference_path, shape, dtype, rep_ms=25)
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
    gpu_report.write("baseline_process", {"quiet_ms": quiet["median_ms"], "in_process_busy_ms": stalled["median_ms"],
                                          "baseline_process_busy_ms": separate["median_ms"]})
    assert separate["median_ms"] < 1.3 * quiet["median_ms"], (quiet, separate)


def test_idle_cached_memory_goes_back_to_the_driver_beyond_the_allowance() -> None:
    """What a worker or the trusted process does after each request (gpu_memory.py): after a 2 GiB case,
    at most the allowance stays cached, and allocated memory is never touched."""
    from klineage.validator.gpu_memory import release_idle_memory

    keep = torch.ones(1 << 20, device="cuda")  # 4 MiB that must survive
    big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    del big
    slack = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    assert slack >= 2 << 30  # the caching allocator kept the freed block
    released = release_idle_memory(torch, keep_bytes=1 << 30)
    assert released >= 2 << 30
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() <= 1 << 30
    assert release_idle_memory(torch, keep_bytes=1 << 30) == 0  # nothing due a second time
    assert float(keep.sum()) == float(1 << 20)


@pytest.mark.parametrize("socket_inputs", [False, True], ids=["ipc-inputs", "socket-inputs"])
def test_inputs_sent_back_through_either_transport_show_what_the_candidate_did(
        monkeypatch: pytest.MonkeyPatch, socket_inputs: bool) -> None:
    """The integrity gate's returned inputs come back through CUDA IPC (or, turned off, the socket): an
    input the candidate changed in place and an output memoized by address fail there, the honest kernel
    passes, whichever way they travel."""
    from hostile.table import CANDIDATES

    from klineage.validator import LocalValidator
    from klineage.validator.compile_gate import gpu_name

    if socket_inputs:
        monkeypatch.setenv("KLINEAGE_VALIDATOR_IPC_INPUTS", "0")
    validator = LocalValidator(cache=None)
    gates = ["static", "compile", "correctness", "integrity"]
    expected = {"input_mutation": "run modified its input 0", "memo_by_address": "output memoized by tensor address"}
    for name, why in expected.items():
        result = validator.validate((CANDIDATES / f"{name}.py").read_text(), ROWSUM, gates=gates)
        failed = result.failed_gate
        assert failed is not None, (name, result.to_dict())
        # input_mutation must fail integrity; memo_by_address may already fail correctness (hostile/table.py)
        assert failed.gate == "integrity" or (name == "memo_by_address" and failed.gate == "correctness"), name
        if failed.gate == "integrity":
            assert why in failed.reason, (name, failed.reason)
    honest = validator.validate((ROWSUM / "kernel.py").read_text(), ROWSUM, gates=gates)
    assert honest.verdict == "pass", honest.to_dict()
    # the compile gate names the card it compiled on (an H100 was once reported as an H200)
    card = gpu_name(torch.cuda.get_device_capability()[0] * 10, on_device=True)
    assert card in torch.cuda.get_device_name() and f"({card}, on device)" in honest.gate("compile").metrics["target"]


def test_a_workload_with_a_scalar_argument_leaves_no_input_lent_through_ipc() -> None:
    """group_norm's inputs end with an int (the group count). Sharing used to describe the tensors before it
    and then refuse the int: the described tensors stayed lent (PyTorch's IPC limbo) and were never freed,
    one input set per call, until the GPU ran out (H100, 2026-12-07). Judged again and again, the trusted
    process's allocated memory must not grow."""
    from klineage.validator import LocalValidator

    group_norm = Path(__file__).resolve().parents[2] / "heldout" / "group_norm"
    naive = (group_norm / "naive.py").read_text()
    validator = LocalValidator(cache=None)
    shapes = [{"B": 4, "D": 256, "S": 4096}]  # 8 MB of fp32 input: a leak of one set per call shows at once
    allocated = []
    for i in range(3):
        result = validator.validate(naive + f"\n# variant {i}\n", group_norm, gates=["static", "compile",
                                    "correctness", "integrity"], shapes=shapes)
        assert result.verdict == "pass", result.to_dict()
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
        allocated.append(torch.cuda.memory_allocated())
    grown = allocated[2] - allocated[1]
    gpu_report.write("ipc_scalar_inputs", {"allocated_bytes_after_each": allocated, "grown_bytes": grown})
    assert grown < 1 << 20, allocated
