"""The Ray backend on a multi-GPU machine (issue 17): jobs per minute against the number of GPUs, and the
experts' speedups through Ray against the local pool's.

    ray start --head                                  # or nothing: a one-host cluster is started here
    python bench/ray_scaling.py [--address auto] [--gpus 1,2,4,8] [--jobs-per-gpu 6] [--out FILE]
    python bench/ray_scaling.py --cpu --gpus 1,2 --jobs-per-gpu 2     # a dry run without GPUs (interpreter)

* **Throughput**: for each GPU count k, a ``RayValidator`` with k actors (one GPU each) runs
  ``k x --jobs-per-gpu`` jobs, every gate, no result cache, all submitted at once (k threads: one job per
  GPU at a time), after one unmeasured warm-up job per actor (worker start, device ceilings). Each job is
  one of the experts of ``workloads/`` (in turn) with a comment that makes it a new kernel. Reported:
  jobs per minute, and the efficiency ``(jobs/min at k) / (k x jobs/min at the smallest k)``.
* **Speedups unchanged**: every expert of ``--workloads`` gated once on GPU 0 by ``LocalValidator`` in this
  process (nothing else running), then all of them at once through Ray on every GPU of ``--gpus``' largest
  k. Per workload: the geometric mean over its cases of (speedup over the vendor through Ray) / (the same
  locally), which should be 1 within the timer's noise (the GPU test holds one GPU to 2 %).

Prints both tables; ``--out`` writes the figures as JSON with the GPUs, versions and date.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from klineage.validator import LocalValidator  # noqa: E402
from klineage.validator.ray_backend import RayValidator, connect, shutdown_ray_validators  # noqa: E402

WORKLOADS = REPO / "workloads"


def experts(names: str | None) -> list[tuple[Path, str]]:
    """(workload folder, expert source) of ``workloads/`` (all, or the comma-separated ``names``)."""
    from klineage.schema.manifest import load_manifest

    folders = sorted(p for p in WORKLOADS.iterdir() if (p / "manifest.toml").is_file())
    if names:
        wanted = set(names.split(","))
        folders = [p for p in folders if p.name in wanted]
    return [(p, load_manifest(p).kernel_path.read_text(encoding="utf-8")) for p in folders]


def _speedups(result: Any) -> dict[str, float]:
    gate = result.gate("performance")
    if gate is None or gate.status != "pass":
        return {}
    return {f"{row['shape']} {row['dtype']}": float(row["speedup"]) for row in gate.metrics.get("rows", ())
            if row.get("speedup")}


def throughput(address: str | None, k: int, per_gpu: int, jobs: list[tuple[Path, str]], device: str) -> dict[str, Any]:
    """Jobs per minute of ``k`` actors over ``k x per_gpu`` new jobs (after a warm-up job per actor)."""
    validator = RayValidator(address, cache=None, device=device, actors=k)
    try:
        def one(i: int, tag: str) -> tuple[str, float, int]:
            folder, source = jobs[i % len(jobs)]
            start = time.monotonic()
            result = validator.validate(f"{source}\n# ray_scaling {tag} {i} {time.time_ns()}\n", folder)
            where = validator.last_where or {}
            return result.verdict, time.monotonic() - start, int(where.get("pid", 0))

        with ThreadPoolExecutor(max_workers=k) as pool:
            warm = list(pool.map(lambda i: one(i, "warm-up"), range(k)))
        count = k * per_gpu
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=k) as pool:
            done = list(pool.map(lambda i: one(i, "timed"), range(count)))
        wall = time.monotonic() - start
        return {"gpus": k, "jobs": count, "wall_s": round(wall, 2), "jobs_per_minute": round(60 * count / wall, 2),
                "passed": sum(v == "pass" for v, _, _ in done), "actors_used": len({p for _, _, p in done}),
                "job_wall_s_median": round(statistics.median(w for _, w, _ in done), 2),
                "warm_up_wall_s": [round(w, 1) for _, w, _ in warm], "where": validator.where()}
    finally:
        validator.close()


def speedups(address: str | None, k: int, jobs: list[tuple[Path, str]], device: str) -> list[dict[str, Any]]:
    """Each expert's speedups locally (one GPU, alone) and through Ray on ``k`` GPUs (all at once)."""
    local = LocalValidator(cache=None, device=device)
    alone = {folder.name: _speedups(local.validate(source, folder)) for folder, source in jobs}
    validator = RayValidator(address, cache=None, device=device, actors=k)
    try:
        with ThreadPoolExecutor(max_workers=k) as pool:
            spread = dict(zip([f.name for f, _ in jobs],
                              pool.map(lambda job: _speedups(validator.validate(job[1], job[0])), jobs), strict=True))
    finally:
        validator.close()
    rows = []
    for name, cases in alone.items():
        ratios = [spread[name][c] / s for c, s in cases.items() if c in spread[name] and s > 0]
        rows.append({"workload": name, "cases": len(ratios),
                     "local_geomean": statistics.geometric_mean(cases.values()) if cases else None,
                     "ray_geomean": statistics.geometric_mean(spread[name].values()) if spread[name] else None,
                     "ray_over_local": statistics.geometric_mean(ratios) if ratios else None,
                     "worst_case_ratio": max(ratios, key=lambda r: abs(r - 1.0)) if ratios else None})
    return rows


def main() -> int:
    """Parse the arguments, measure, print the tables (and write ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default=None, help="Ray address (default: $RAY_ADDRESS, this host's cluster, "
                                                         "or a new one-host cluster)")
    parser.add_argument("--gpus", default=None, help="GPU counts to measure, e.g. 1,2,4,8 (default: powers of "
                                                     "two up to the cluster's GPUs)")
    parser.add_argument("--jobs-per-gpu", type=int, default=6,
                        help="timed jobs per GPU of each throughput measurement (k GPUs run k x this many)")
    parser.add_argument("--workloads", default=None, help="comma-separated names under workloads/ (default: all)")
    parser.add_argument("--cpu", action="store_true", help="interpreter mode, one actor per CPU (a dry run)")
    parser.add_argument("--skip-speedups", action="store_true",
                        help="measure the throughput only, not the experts' speedups local vs Ray (skipped with "
                             "--cpu anyway)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file for the figures, with the GPUs, versions and date (default: print only)")
    args = parser.parse_args()
    device = "cpu" if args.cpu else "auto"
    ray, _ = connect(args.address)
    resources = ray.cluster_resources()
    most = int(resources.get("CPU" if args.cpu else "GPU", 0))
    if most < 1:
        raise SystemExit(f"the Ray cluster has no {'CPUs' if args.cpu else 'GPUs'}: {resources} (--cpu for a dry run)")
    counts = [int(c) for c in args.gpus.split(",")] if args.gpus else \
        sorted({min(most, 1 << i) for i in range(most.bit_length() + 1)})
    jobs = experts(args.workloads)
    figures: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
                               "resources": resources, "device": device, "throughput": [], "speedups": []}
    print(f"Ray cluster: {resources}")
    print("\n| GPUs | jobs | wall s | jobs/min | efficiency | actors used | passed |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for k in counts:
        row = throughput(args.address, k, args.jobs_per_gpu, jobs, device)
        figures["throughput"].append(row)
        base = base or row["jobs_per_minute"] / k
        efficiency = row["jobs_per_minute"] / (k * base)
        print(f"| {k} | {row['jobs']} | {row['wall_s']} | {row['jobs_per_minute']} | {efficiency:.2f} | "
              f"{row['actors_used']} | {row['passed']}/{row['jobs']} |", flush=True)
    if not args.skip_speedups and not args.cpu:
        rows = speedups(args.address, max(counts), jobs, device)
        figures["speedups"] = rows
        print(f"\nExpert speedups over the vendor: local pool (one GPU, alone) vs Ray ({max(counts)} GPUs at once)\n")
        print("| workload | cases | local geomean | Ray geomean | Ray / local | farthest case |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            def fmt(v: float | None) -> str:
                return "—" if v is None else f"{v:.3f}"
            print(f"| {r['workload']} | {r['cases']} | {fmt(r['local_geomean'])} | {fmt(r['ray_geomean'])} | "
                  f"{fmt(r['ray_over_local'])} | {fmt(r['worst_case_ratio'])} |")
    device_info = LocalValidator(device=device).device_info()
    figures.update({"gpu": device_info.gpu, "versions": device_info.versions})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1, default=str) + "\n")
        print(f"\nwrote {args.out}")
    shutdown_ray_validators()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
