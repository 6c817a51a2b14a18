"""Validator throughput and cached-result latency, measured in one run on this machine.

* jobs per minute on CPU: ``--cpu-jobs N`` honest jobs of the ``rowsum`` test workload (each source
  differs by a comment, so nothing comes from the cache), all gates, interpreter mode, one after the
  other (the service runs one worker on CPU);
* jobs per minute on the GPU (when there is one): ``--gpu-jobs N`` of the same, performance gate
  included;
* latency of a cached result over HTTP: a ``klineage validator serve`` subprocess, one job to fill
  the cache, then ``--http-requests`` identical ``POST /v1/validate`` calls: p50 / p90 / p99 (target:
  p50 < 50 ms).

Prints a table and, with ``--out``, writes the figures as JSON with the machine, versions and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ROWSUM = REPO / "tests" / "validator" / "workloads" / "rowsum"


def _jobs(count: int, device: str) -> dict[str, Any]:
    from klineage.validator import LocalValidator

    validator = LocalValidator(cache=None, device=device)
    info = validator.device_info()
    source = (ROWSUM / "kernel.py").read_text()
    if info.cuda:
        validator.ceilings()  # measured once per worker; not part of the job figures
    walls, verdicts = [], []
    start_all = time.monotonic()
    for i in range(count):
        start = time.monotonic()
        result = validator.validate(f"{source}\n# bench job {i} {time.time_ns()}\n", ROWSUM)
        walls.append(time.monotonic() - start)
        verdicts.append(result.verdict)
    total = time.monotonic() - start_all
    return {"device": info.gpu, "versions": info.versions, "jobs": count, "wall_s": total,
            "jobs_per_minute": 60.0 * count / total, "job_p50_s": statistics.median(walls),
            "job_max_s": max(walls), "verdicts": verdicts}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(requests: int) -> dict[str, Any]:
    import httpx

    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="klineage-bench-"))
    env = {**os.environ, "KLINEAGE_VALIDATOR_CACHE": str(tmp / "cache.sqlite"),
           "KLINEAGE_WORKLOADS": str(ROWSUM.parent)}
    server = subprocess.Popen([sys.executable, "-m", "klineage.cli.main", "validator", "serve", "--port", str(port),
                               "--cpu"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("service did not start")
                time.sleep(0.2)
            body = {"candidate": (ROWSUM / "kernel.py").read_text(), "workload": "rowsum"}
            start = time.monotonic()
            first = client.post("/v1/validate", json=body)
            first_s = time.monotonic() - start
            assert first.status_code == 200, first.text
            latencies = []
            for _ in range(requests):
                start = time.perf_counter()
                response = client.post("/v1/validate", json=body)
                latencies.append(1e3 * (time.perf_counter() - start))
                assert response.headers.get("X-Klineage-Cached") == "1"
    finally:
        server.terminate()
        server.wait(timeout=30)
    latencies.sort()
    return {"first_job_s": first_s, "requests": requests, "p50_ms": statistics.median(latencies),
            "p90_ms": latencies[int(0.9 * (len(latencies) - 1))], "p99_ms": latencies[int(0.99 * (len(latencies) - 1))],
            "target_p50_ms": 50.0}


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-jobs", type=int, default=4)
    parser.add_argument("--gpu-jobs", type=int, default=0)
    parser.add_argument("--http-requests", type=int, default=200)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": f"{platform.node()} ({os.cpu_count()} CPUs)",
                              "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if args.cpu_jobs:
        report["cpu"] = _jobs(args.cpu_jobs, "cpu")
    if args.gpu_jobs:
        from klineage.validator import LocalValidator

        if LocalValidator().device_info().cuda:
            report["gpu"] = _jobs(args.gpu_jobs, "auto")
        else:
            report["gpu"] = {"skipped": "no GPU"}
    if not args.no_http:
        report["http_cached"] = _http(args.http_requests)
    print(f"{'measure':<34} {'value':>12}")
    for key in ("cpu", "gpu"):
        part = report.get(key)
        if part and "jobs_per_minute" in part:
            print(f"{key} jobs/minute ({part['jobs']} jobs){'':<8} {part['jobs_per_minute']:>12.2f}")
            print(f"{key} job wall p50 (s){'':<17} {part['job_p50_s']:>12.2f}")
    if "http_cached" in report:
        h = report["http_cached"]
        print(f"cached result over HTTP p50 (ms){'':<2} {h['p50_ms']:>12.2f}")
        print(f"cached result over HTTP p99 (ms){'':<2} {h['p99_ms']:>12.2f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
