#!/usr/bin/env python3
"""Why does the validator's performance gate time small GEMMs ~2x slower than bench/workloads.py?

On 2026-12-03 the gate timed the gemm expert at 0.027-0.030 ms at 1024³ and 777×1536×1000 where
bench/workloads.py timed 0.013-0.014 ms (cuBLAS ~0.010 ms in both). At these sizes the GPU time is
about the host's launch time, so anything the validator adds on the launch path shows up. This
script times the same kernel, same shapes, with the validator's own timer in five set-ups, one
change at a time:

1. ``plain``: expert.py imported normally (as bench/workloads.py does);
2. ``watched``: the same module with the validator's ``LaunchWatch`` installed (launch counting);
3. ``restricted``: loaded by the validator's ``load_candidate`` (restricted builtins) with the
   watch installed: what the gate times;
4. ``restricted-unwatched``: ``load_candidate`` without the watch;
5. ``restricted-host-hidden``: as 3, timed with ``time_cuda(host_lead_us=200)`` (a sleep kernel after
   each flush keeps the GPU busy while the host launches: the GPU's time only). Measured 2026-12-03:
   set-ups 1-4 show the host path (45-80 us per call) in the medians at 1024^3; 5 is the candidate
   remedy for the gate (lineages/README.md).

and reports the host time of one ``run`` call (no synchronisation, after warm-up), which bounds how
fast back-to-back launches can go. One GPU call, ~40 s:

    python3 bench/launch_overhead.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from klineage.validator.harness import LaunchWatch, load_candidate  # noqa: E402
from klineage.validator.perf import time_cuda  # noqa: E402
from workloads import load_module  # noqa: E402  (bench/workloads.py)

CASES = ({"M": 1024, "N": 1024, "K": 1024}, {"M": 777, "N": 1536, "K": 1000}, {"M": 4096, "N": 4096, "K": 4096})


def host_us(fn: Any, calls: int = 200) -> float:
    """Median host microseconds per call over ``calls`` back-to-back calls (no synchronisation)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main() -> int:
    """Time every set-up on every case; print a table; write ``launch_overhead.json`` under --out."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="gemm",
                        help="name under workloads/ whose expert.py is timed against its vendor (default: gemm)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder to write launch_overhead.json to (made if missing; default: print only)")
    args = parser.parse_args()
    folder = ROOT / "workloads" / args.workload
    reference = load_module(folder / "reference.py", "overhead_reference")
    rows = []
    for setup in ("plain", "watched", "restricted", "restricted-unwatched", "restricted-host-hidden"):
        watched = setup in ("watched", "restricted", "restricted-host-hidden")
        watch = LaunchWatch().install(interpret=False) if watched else None
        lead_us = 200.0 if setup.endswith("host-hidden") else 0.0
        try:
            if setup.startswith("restricted"):
                module = load_candidate(folder / "expert.py", f"overhead_{setup.replace('-', '_')}")
            else:
                module = load_module(folder / "expert.py", f"overhead_{setup}")
            for shape in CASES:
                inputs = reference.make_inputs(dict(shape), "bf16", 0, device="cuda")
                stats, _ = time_cuda(lambda module=module, inputs=inputs: module.run(*inputs), rep_ms=100,
                                     host_lead_us=lead_us)
                vendor, _ = time_cuda(lambda inputs=inputs: reference.vendor(*inputs), rep_ms=100,
                                      host_lead_us=lead_us)
                row = {"setup": setup, "shape": shape, "median_ms": stats["median_ms"], "p10_ms": stats["p10_ms"],
                       "vendor_ms": vendor["median_ms"],
                       "host_us": host_us(lambda module=module, inputs=inputs: module.run(*inputs))}
                rows.append(row)
                print(f"{setup:<21} {json.dumps(shape):<36} kernel {row['median_ms']:.4f} ms (p10 {row['p10_ms']:.4f})"
                      f"  vendor {row['vendor_ms']:.4f} ms  host {row['host_us']:.1f} us/call", flush=True)
        finally:
            if watch is not None:
                watch.uninstall()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (args.out / "launch_overhead.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
