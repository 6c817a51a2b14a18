#!/usr/bin/env python3
"""Check and time the expert workloads (``workloads/<name>/``) against their references and vendors.

Self-contained: stdlib, torch and triton only (it must run on the GPU machine, where the ``klineage``
package is not installed). For each workload named on the command line (all by default), each shape
of the manifest's GPU grid and each dtype it:

1. checks correctness: ``‖out − ref‖ / ‖ref‖`` (float64) under the manifest's tolerance, NaN fails,
   shape and dtype must match, the output memory is poisoned (0xFF bytes, a NaN in every float
   format) in the caching allocator just before the run so unwritten elements show up as NaN;
2. times the kernel (``expert.py``'s ``run``) and the vendor (``reference.py``'s ``vendor``) in the same
   process the way METHOD.md says: warm-up, L2 flushed by a 256 MB buffer write before every run,
   CUDA events around each run, median / p10 / p90 of at least 20 runs;
3. prints one table and writes one JSON row per (shape, dtype) to ``<out>/<workload>/<gpu>.jsonl``
   (default: the workload's own ``measurements/<gpu>.jsonl``).

Ceilings are measured once at start: device-to-device copy bandwidth (bytes read + written) and the
bf16 GEMM rate of torch.matmul at 8192³ on random data. ``pct_roofline`` is the roofline time
``max(flops / gemm_peak, bytes / copy_bw)`` over the measured time.

``--cpu`` sets TRITON_INTERPRET=1 (before triton is imported) and only checks correctness on the
manifests' ``cpu_shapes``. bf16 kernels that use ``tl.dot`` are reported as skipped there: the
interpreter's bf16 dot returns garbage.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import math
import os
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

if "--cpu" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "workloads"
ALL = ("gemm", "softmax", "layernorm", "attention", "cross_entropy")
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
FLUSH_BYTES = 256 * 1024 * 1024


# --------------------------------------------------------------------------------------------- loading
def load_manifest(name: str) -> dict[str, Any]:
    """The ``[workload]`` table of ``workloads/<name>/manifest.toml``."""
    with open(WORKLOADS / name / "manifest.toml", "rb") as fh:
        return tomllib.load(fh)["workload"]


def load_module(path: Path, tag: str) -> ModuleType:
    """Import ``path`` as a fresh module named ``tag`` (no package import needed)."""
    spec = importlib.util.spec_from_file_location(tag, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[tag] = module
    spec.loader.exec_module(module)
    return module


def shape_label(shape: dict[str, Any]) -> str:
    """Compact label such as ``M=4096,N=4096,K=4096``."""
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in shape.items() if k != "dtype")


# --------------------------------------------------------------------------------------------- checking
def rel_error(out: Any, ref: Any) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere gives NaN; a shape or dtype mismatch gives inf."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        return math.inf
    o = out.detach().double()
    r = ref.detach().double()
    if torch.isnan(o).any():
        return math.nan
    denom = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    return num / denom if denom > 0 else num


def poison_allocator(ref: torch.Tensor) -> None:
    """Leave a 0xFF-filled block of the output's size in the caching allocator for run() to reuse."""
    if ref.device.type != "cuda":
        return
    block = torch.full((ref.numel() * ref.element_size(),), 255, dtype=torch.uint8, device=ref.device)
    del block


def check(kernel: ModuleType, refmod: ModuleType, shape: dict, dtype: str, seed: int, device: str,
          tol: float) -> tuple[bool, float]:
    """One seeded correctness check; returns (passed, relative error)."""
    inputs = refmod.make_inputs(dict(shape), dtype, seed, device=device)
    ref = refmod.reference(*inputs)
    poison_allocator(ref)
    out = kernel.run(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    err = rel_error(out, ref)
    return (not math.isnan(err)) and err <= tol, err


# --------------------------------------------------------------------------------------------- timing
_FLUSH: torch.Tensor | None = None


def time_cuda(fn, n_min: int = 20, n_max: int = 500, rep_ms: float = 150.0, warmup_ms: float = 30.0
              ) -> dict[str, float]:
    """Median / p10 / p90 milliseconds of ``fn()``: warm-up, L2 flushed before each run, CUDA events."""
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        _FLUSH.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / est))):
        fn()
    n = max(n_min, min(n_max, int(rep_ms / est)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        _FLUSH.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))

    def q(p: float) -> float:
        x = p * (len(times) - 1)
        lo = math.floor(x)
        hi = min(lo + 1, len(times) - 1)
        return times[lo] + (times[hi] - times[lo]) * (x - lo)

    return {"ms_median": q(0.5), "ms_p10": q(0.1), "ms_p90": q(0.9), "n_runs": n}


def measure_ceilings() -> dict[str, float]:
    """Device copy bandwidth (TB/s, read + write) and bf16 GEMM rate (TFLOP/s) at 8192³, random data."""
    n = 1 << 30
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = time_cuda(lambda src=src, dst=dst: dst.copy_(src), rep_ms=200)
    copy_tbps = 2 * n / (t["ms_median"] * 1e-3) / 1e12
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((8192, 8192), generator=g, device="cuda").to(torch.bfloat16)
    b = torch.randn((8192, 8192), generator=g, device="cuda").to(torch.bfloat16)
    t = time_cuda(lambda: torch.matmul(a, b), rep_ms=300)
    gemm_tflops = 2 * 8192**3 / (t["ms_median"] * 1e-3) / 1e12
    return {"copy_tbps": round(copy_tbps, 4), "gemm_bf16_tflops": round(gemm_tflops, 2)}


# --------------------------------------------------------------------------------------------- driver
def gpu_tag(name: str) -> str:
    """File-name tag of the GPU (``h200`` for an NVIDIA H200)."""
    for tag in ("H200", "H100", "A100", "B200"):
        if tag in name:
            return tag.lower()
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_") or "gpu"


def shapes_and_dtypes(manifest: dict, cpu: bool) -> list[tuple[dict, str]]:
    """Every (shape, dtype) pair to run: each shape in each manifest dtype (or its pinned dtype)."""
    pairs = []
    for shape in manifest["cpu_shapes" if cpu else "shapes"]:
        dims = {k: v for k, v in shape.items() if k != "dtype"}
        for dtype in ([shape["dtype"]] if "dtype" in shape else manifest["dtypes"]):
            pairs.append((dims, dtype))
    return pairs


def run_cpu(names: list[str], seeds: int) -> int:
    """Correctness only, under the Triton interpreter, on the manifests' cpu_shapes."""
    failures = 0
    print(f"{'workload':<14} {'shape':<34} {'dtype':<5} {'status':<8} rel_err / reason")
    for name in names:
        manifest = load_manifest(name)
        folder = WORKLOADS / name
        refmod = load_module(folder / manifest["reference"], f"ref_{name}")
        source = (folder / manifest["kernel"]).read_text()
        kernel = load_module(folder / manifest["kernel"], f"kernel_{name}")
        for shape, dtype in shapes_and_dtypes(manifest, cpu=True):
            label = shape_label(shape)
            if dtype == "bf16" and "tl.dot" in source:
                print(f"{name:<14} {label:<34} {dtype:<5} {'skipped':<8} interpreter: bf16 tl.dot is garbage")
                continue
            t0 = time.time()
            worst, ok = 0.0, True
            for seed in range(seeds):
                passed, err = check(kernel, refmod, shape, dtype, seed, "cpu", manifest["tolerance"][dtype])
                ok &= passed
                worst = err if (math.isnan(err) or err > worst) else worst
            failures += not ok
            status = "pass" if ok else "FAIL"
            print(f"{name:<14} {label:<34} {dtype:<5} {status:<8} {worst:.2e}  ({time.time() - t0:.1f}s)",
                  flush=True)
    return 1 if failures else 0


def run_gpu(names: list[str], out_dir: Path | None, seeds: int, shape_filter: str | None) -> int:
    """Correctness and timing on the GPU; prints the table and writes the jsonl rows."""
    props = torch.cuda.get_device_properties(0)
    gpu = props.name
    tag = gpu_tag(gpu)
    print(f"# {gpu}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
          f"triton {triton.__version__}", flush=True)
    ceilings = measure_ceilings()
    print(f"# ceilings: copy {ceilings['copy_tbps']:.3f} TB/s, bf16 GEMM {ceilings['gemm_bf16_tflops']:.1f} "
          "TFLOP/s", flush=True)
    date = datetime.date.today().isoformat()
    header = (f"{'workload':<14} {'shape':<34} {'dtype':<5} {'ok':<4} {'rel_err':>8} {'ms':>9} "
              f"{'vendor_ms':>9} {'rate':>14} {'%roof':>6} {'x vendor':>8}")
    lines = [header]
    print(header, flush=True)
    failures = 0
    for name in names:
        manifest = load_manifest(name)
        folder = WORKLOADS / name
        refmod = load_module(folder / manifest["reference"], f"ref_{name}")
        kernel_path = folder / manifest["kernel"]
        sha = hashlib.sha256(kernel_path.read_bytes()).hexdigest()
        kernel = load_module(kernel_path, f"kernel_{name}")
        target = (out_dir / name if out_dir else folder / "measurements") / f"{tag}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        for shape, dtype in shapes_and_dtypes(manifest, cpu=False):
            label = shape_label(shape)
            if shape_filter and shape_filter not in label:
                continue
            t0 = time.time()
            ok, worst = True, 0.0
            for seed in range(seeds):
                passed, err = check(kernel, refmod, shape, dtype, seed, "cuda", manifest["tolerance"][dtype])
                ok &= passed
                worst = err if (math.isnan(err) or err > worst) else worst
            failures += not ok
            inputs = refmod.make_inputs(dict(shape), dtype, 1234, device="cuda")
            k = time_cuda(lambda inputs=inputs, fn=kernel.run: fn(*inputs))
            vendor_fn = getattr(refmod, "vendor", refmod.reference)
            v = time_cuda(lambda inputs=inputs, fn=vendor_fn: fn(*inputs))
            del inputs
            fl = float(refmod.flops(shape)) if hasattr(refmod, "flops") else 0.0
            by = float(refmod.bytes_moved(shape, dtype)) if hasattr(refmod, "bytes_moved") else 0.0
            sec = k["ms_median"] * 1e-3
            t_compute = fl / (ceilings["gemm_bf16_tflops"] * 1e12)
            t_memory = by / (ceilings["copy_tbps"] * 1e12)
            compute_bound = t_compute >= t_memory
            row = {
                "workload": name, "shape": shape, "dtype": dtype, "kernel_sha": sha, "gpu": gpu,
                "torch": torch.__version__, "triton": triton.__version__, "date": date,
                "ms_median": round(k["ms_median"], 5), "ms_p10": round(k["ms_p10"], 5),
                "ms_p90": round(k["ms_p90"], 5), "n_runs": k["n_runs"],
                "vendor_ms_median": round(v["ms_median"], 5),
                "speedup_vs_vendor": round(v["ms_median"] / k["ms_median"], 4),
            }
            if compute_bound:
                row["tflops"] = round(fl / sec / 1e12, 2)
                rate = f"{row['tflops']:.1f} TFLOP/s"
            else:
                row["tbps"] = round(by / sec / 1e12, 4)
                rate = f"{row['tbps']:.3f} TB/s"
            row["pct_roofline"] = round(100 * max(t_compute, t_memory) / sec, 2)
            row["ceilings"] = dict(ceilings)
            row["correct"] = bool(ok)
            row["rel_err"] = None if math.isnan(worst) else worst
            rows.append(row)
            line = (f"{name:<14} {label:<34} {dtype:<5} {'yes' if ok else 'NO':<4} {worst:8.1e} "
                    f"{k['ms_median']:9.4f} {v['ms_median']:9.4f} {rate:>14} {row['pct_roofline']:6.1f} "
                    f"{row['speedup_vs_vendor']:8.3f}")
            lines.append(line)
            print(line + f"   ({time.time() - t0:.1f}s)", flush=True)
            with open(target, "w") as fh:
                for r in rows:
                    fh.write(json.dumps(r) + "\n")
            torch.cuda.empty_cache()
    print("\n" + "\n".join(lines))
    if out_dir:
        (out_dir / "summary.txt").write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", help=f"workload names (default: {' '.join(ALL)})")
    parser.add_argument("--cpu", action="store_true", help="correctness only, interpreter, cpu_shapes")
    parser.add_argument("--out", type=Path, default=None, help="write <out>/<workload>/<gpu>.jsonl")
    parser.add_argument("--seeds", type=int, default=None, help="correctness seeds per shape (1 GPU, 2 CPU)")
    parser.add_argument("--shape", default=None, help="only shapes whose label contains this text")
    args = parser.parse_args(argv)
    names = args.workloads or list(ALL)
    for name in names:
        if not (WORKLOADS / name / "manifest.toml").is_file():
            parser.error(f"no workload {name!r} under {WORKLOADS}")
    if args.cpu:
        return run_cpu(names, args.seeds or 2)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: use --cpu for the interpreter check")
    return run_gpu(names, args.out, args.seeds or 1, args.shape)


if __name__ == "__main__":
    sys.exit(main())
