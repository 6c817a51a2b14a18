"""Validator throughput and cached-result latency, measured in one run on this machine.

* jobs per minute on CPU: ``--cpu-jobs N`` honest jobs of the ``rowsum`` test workload (each source
  differs by a comment, so nothing comes from the cache), all gates, interpreter mode, one after the
  other (the service runs one worker on CPU);
* jobs per minute on the GPU (when there is one): ``--gpu-jobs N`` of the same, performance gate
  included;
* seconds per candidate, cold vs warm, split by gate (``--cold-warm N``): *cold* jobs each start a
  fresh worker pool (worker start, torch/triton import, first compile included); *warm* jobs reuse
  one pool's workers (after one unmeasured job); per gate the median ``gate_wall_s`` the validator
  records in each gate's metrics, plus the job's total wall time. ``--cpu`` runs these jobs in
  interpreter mode even on a GPU machine;
* latency of a cached result over HTTP: a ``klineage validator serve`` subprocess, one job to fill
  the cache, then ``--http-requests`` identical ``POST /v1/validate`` calls: p50 / p90 / p99 (target:
  p50 < 50 ms).

* candidates per minute with several jobs side by side, as the agent evaluation runs them
  (``--concurrent N``): held-out naive kernels and operator rewrites of them (``--workloads``, 4 shapes each,
  nothing cached), all gates, ``N`` at a time through one ``LocalValidator``, once per device-lock mode of
  ``--lock-modes`` (``batched``: a timing phase takes every timing run waiting; ``per-run``: one run per
  phase, as before), each mode on a fresh warm pool: the before and after of the lock in one run, on the GPU.

* the figures before and after a change (``--compare BEFORE.json AFTER.json``: two ``--concurrent`` reports of
  the same candidates, e.g. ``device_call.sh``'s ``SOLO_BEFORE``): seconds per candidate and per gate, and how
  far each candidate's speedup over the vendor moved. Nothing is run.

* what the validator cost in a past evaluation (``--from-cache FILE``, an evaluation's result cache such as
  ``bench/results/agent-h200-cache.sqlite``): candidates of the held-out workloads judged there, seconds
  per candidate and per gate (median, p90), the part of it spent queueing for the device lock (recorded
  since ``lock_wait_s`` exists), and candidates per minute over the span the results were written in.
  Nothing is run: it reads the gate results as they were recorded.

Prints a table and, with ``--out``, writes the figures as JSON with the machine, versions and date.
"""

from __future__ import annotations

import argparse
import cProfile
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


def _cold_vs_warm(count: int, device: str) -> dict[str, Any]:
    from klineage.validator import LocalValidator
    from klineage.validator.pool import WorkerPool

    source = (ROWSUM / "kernel.py").read_text()

    def one(validator: Any, tag: str) -> dict[str, Any]:
        start = time.monotonic()
        result = validator.validate(f"{source}\n# bench {tag} {time.time_ns()}\n", ROWSUM)
        gates = {g.gate: g.metrics.get("gate_wall_s") for g in result.gates if "gate_wall_s" in g.metrics}
        return {"wall_s": time.monotonic() - start, "gates": gates, "verdict": result.verdict}

    cold = []
    for i in range(count):
        pool = WorkerPool()
        try:
            validator = LocalValidator(cache=None, device=device, pool=pool)
            if validator.device_info().cuda:
                validator.ceilings()  # not part of the job figures
            cold.append(one(validator, f"cold {i}"))
        finally:
            pool.shutdown()
    pool = WorkerPool()
    try:
        validator = LocalValidator(cache=None, device=device, pool=pool)
        if validator.device_info().cuda:
            validator.ceilings()
        one(validator, "warm-up")
        warm = [one(validator, f"warm {i}") for i in range(count)]
        pool_stats = pool.stats()
    finally:
        pool.shutdown()

    def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
        gates = sorted({g for r in rows for g in r["gates"]})
        return {"jobs": len(rows), "wall_p50_s": statistics.median(r["wall_s"] for r in rows),
                "wall_max_s": max(r["wall_s"] for r in rows), "verdicts": [r["verdict"] for r in rows],
                "gate_p50_s": {g: statistics.median(r["gates"][g] for r in rows if r["gates"].get(g) is not None)
                               for g in gates}}

    return {"device": device, "cold": summary(cold), "warm": summary(warm), "warm_pool": pool_stats}


CONCURRENT_WORKLOADS = "rmsnorm,bmm,log_softmax,gelu_mul,column_sum,matmul_nt"
CONCURRENT_OPERATORS = ("num-warps", "int64-offsets", "autotune")  # an autotuned rewrite: the sweep is timed too


def _concurrent_candidates(workloads: list[str]) -> list[tuple[str, str, Path, list[dict[str, Any]] | None]]:
    """(label, source, workload folder, shapes): each held-out naive kernel and its rewrites by
    ``CONCURRENT_OPERATORS`` (those that apply with their defaults)."""
    from evaluate_agent import spread  # the evaluation's --max-shapes choice (this script's folder is on the path)

    from klineage.schema.manifest import load_manifest
    from klineage.transforms.registry import get_operator

    out = []
    for name in workloads:
        folder = REPO / "heldout" / name
        if not (folder / "naive.py").is_file():
            raise SystemExit(f"--workloads: {folder / 'naive.py'} does not exist (expected a held-out workload name)")
        source = (folder / "naive.py").read_text()
        shapes = spread(load_manifest(folder).shapes, 4)  # None: the whole grid
        out.append((f"{name}:naive", source, folder, shapes))
        for op in CONCURRENT_OPERATORS:
            made = get_operator(op).apply(source)
            if made is not None:
                out.append((f"{name}:{op}", made.source, folder, shapes))
    return out


def _concurrent(jobs: int, workloads: list[str], modes: list[str], profile: Path | None = None) -> dict[str, Any]:
    """Candidates per minute, ``jobs`` side by side, for each device-lock mode (see the module docstring)."""
    from klineage.validator.device_lock import set_timing_batches

    candidates = _concurrent_candidates(workloads)
    out: dict[str, Any] = {"jobs": jobs, "candidates": [c[0] for c in candidates], "modes": {}}
    for mode in modes:
        if mode not in ("batched", "per-run"):
            raise SystemExit(f"--lock-modes: {mode!r} is not a mode (expected batched or per-run)")
        set_timing_batches(mode == "batched")
        try:
            rows, span, info = _concurrent_run(jobs, candidates, mode, profile)
        finally:
            set_timing_batches(True)
        out.update(device=info.gpu, versions=info.versions)
        walls = [r["wall_s"] for r in rows]
        gate_walls: dict[str, list[float]] = {}
        for row in rows:
            for gate, m in row["gates"].items():
                gate_walls.setdefault(gate, []).append(float(m["gate_wall_s"]))
        out["modes"][mode] = {"span_s": span, "candidates_per_minute": 60.0 * len(rows) / span,
                              "candidate_p50_s": statistics.median(walls), "candidate_p90_s": _quantile(walls, 0.9),
                              "gate_p50_s": {g: statistics.median(v) for g, v in gate_walls.items()},
                              "held_alone_share": sum(r["held_alone_s"] for r in rows) / span, "rows": rows}
    return out


def _concurrent_run(jobs: int, candidates: list[tuple[str, str, Path, list[dict[str, Any]] | None]],
                    tag: str, profile: Path | None = None) -> tuple[list[dict[str, Any]], float, Any]:
    """Every candidate through one ``LocalValidator`` on a fresh warm pool, ``jobs`` at a time: (one row per
    candidate with its gates' wall time and split, seconds for all of them, the device). With ``jobs`` 1 and
    ``profile``, the trusted side's work is profiled (cProfile) into that file."""
    from concurrent.futures import ThreadPoolExecutor

    from klineage.validator import LocalValidator
    from klineage.validator.pool import WorkerPool

    pool = WorkerPool()
    try:
        validator = LocalValidator(cache=None, pool=pool, timing={"rep_ms": 25.0})
        info = validator.device_info()
        if info.cuda:
            validator.ceilings()  # measured once; not part of the figures

        def one(c: tuple[str, str, Path, list[dict[str, Any]] | None]) -> dict[str, Any]:
            start = time.monotonic()
            shapes = c[3] if info.cuda else None  # on CPU: the manifests' CPU shapes
            result = validator.validate(f"{c[1]}\n# {tag} {time.time_ns()}\n", c[2], shapes=shapes)
            perf = result.gate("performance")
            return {"label": c[0], "verdict": result.verdict, "wall_s": time.monotonic() - start,
                    "held_alone_s": sum(float(g.metrics.get("held_alone_s") or 0.0) for g in result.gates),
                    "speedup": perf.metrics.get("geomean_speedup") if perf else None,
                    "gates": {g.gate: {k: g.metrics[k] for k in ("gate_wall_s", *SPLIT) if k in g.metrics}
                              for g in result.gates if "gate_wall_s" in g.metrics}}

        one(candidates[0])  # warm-up: workers started, imports done
        began = time.monotonic()
        if jobs == 1:  # one at a time in this thread, so that --profile sees the trusted side's work
            profiler = cProfile.Profile() if profile else None
            if profiler:
                profiler.enable()
            rows = [one(c) for c in candidates]
            if profiler:
                profiler.disable()
                profiler.dump_stats(str(profile))
        else:
            with ThreadPoolExecutor(jobs) as executor:
                rows = list(executor.map(one, candidates))
        return rows, time.monotonic() - began, info
    finally:
        pool.shutdown()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# where a gate's wall time went (runner metrics), and its part that held the GPU alone
SPLIT = ("lock_wait_s", "worker_round_trip_s", "worker_busy_s", "held_alone_s", "trusted_inputs_s",
         "trusted_reference_wait_s", "trusted_reference_s", "trusted_compare_s", "trusted_release_s")
SPLIT_LABELS = ("queued for the device", "waiting on the worker", "worker working", "GPU held alone",
                "making inputs", "waiting for the reference turn", "reference", "comparing",
                "giving cached memory back")


def _one_per_job(rows: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    """One cache entry per validator job: a job that ran the checks and the performance gate is also stored
    as the answer without performance (``LocalValidator._store_checks_of``: same kernel, workload and date,
    performance "not requested"); that copy is not another candidate. The entry with more gates run stays."""
    best: dict[tuple[str, str, str], tuple[int, tuple[str, str, dict[str, Any]]]] = {}
    for row in rows:
        workload, created, doc = row
        ran = sum(1 for g in doc.get("gates", []) if g.get("status") != "skipped")
        job = (workload, str(doc.get("kernel_sha")), str(doc.get("date") or created))
        if job not in best or ran > best[job][0]:
            best[job] = (ran, row)
    return sorted((row for _, row in best.values()), key=lambda r: r[1])


def _utc_time(text: str) -> datetime:
    """An ISO time from the command line; one without an offset is UTC, as the cache writes its times."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time such as 2026-12-06T00:00") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def from_cache(path: Path, since: datetime | None = None, until: datetime | None = None) -> dict[str, Any]:
    """Seconds per candidate and per gate as an evaluation's result cache recorded them (see the docstring),
    of the results written in [``since``, ``until``) when given (before/after a change, on one card)."""
    import sqlite3

    if not path.is_file():
        raise SystemExit(f"--from-cache {path}: no such file (an evaluation's validator result cache)")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT workload, created, doc FROM results").fetchall()
    rows = [(w, c, json.loads(d)) for w, c, d in rows if (since is None or datetime.fromisoformat(c) >= since)
            and (until is None or datetime.fromisoformat(c) < until)]
    if not rows:
        raise SystemExit(f"--from-cache {path}: no results in it" + (" in that period" if since or until else ""))
    rows = _one_per_job(rows)
    per_gate: dict[str, list[float]] = {}
    split: dict[str, dict[str, list[float]]] = {key: {} for key in SPLIT}
    totals: list[float] = []
    alone: list[float] = []  # per candidate (results that recorded held_alone_s)
    gpus: set[str] = set()
    for _workload, _created, result in rows:
        gpus.add(str(result.get("gpu", "")))
        total = 0.0
        for gate in result.get("gates", []):
            metrics = gate.get("metrics") or {}
            if gate.get("status") == "skipped" or metrics.get("gate_wall_s") is None:
                continue
            per_gate.setdefault(gate["gate"], []).append(float(metrics["gate_wall_s"]))
            total += float(metrics["gate_wall_s"])
            for key in SPLIT:
                if metrics.get(key) is not None:
                    split[key].setdefault(gate["gate"], []).append(float(metrics[key]))
        totals.append(total)
        held = [float((g.get("metrics") or {})["held_alone_s"]) for g in result.get("gates", [])
                if (g.get("metrics") or {}).get("held_alone_s") is not None]
        if held:
            alone.append(sum(held))
    created = sorted(datetime.fromisoformat(r[1]) for r in rows)
    span_s = max((created[-1] - created[0]).total_seconds(), 1.0)
    return {"cache": str(path), "gpus": sorted(gpus), "candidates": len(rows),
            "workloads": len({r[0] for r in rows}), "span_s": span_s,
            "candidates_per_minute": 60.0 * len(rows) / span_s,
            "candidate_p50_s": statistics.median(totals), "candidate_p90_s": _quantile(totals, 0.9),
            "gate_p50_s": {g: statistics.median(v) for g, v in per_gate.items()},
            "gate_p90_s": {g: _quantile(v, 0.9) for g, v in per_gate.items()},
            # the GPU time a candidate cannot share: its sum over the span bounds candidates per minute
            "alone_per_candidate_p50_s": statistics.median(alone) if alone else None,
            "alone_share_of_span": sum(alone) / span_s if alone else None,
            **{f"{key[:-2]}_p50_s": {g: statistics.median(v) for g, v in split[key].items()} for key in SPLIT}}


def _speedups_moved(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, float]:
    """Per candidate label timed on both sides: how far its speedup over the vendor moved, in percent."""
    speed = {r["label"]: r.get("speedup") for r in before}
    return {r["label"]: 100 * abs(r["speedup"] / speed[r["label"]] - 1) for r in after
            if r.get("speedup") and speed.get(r["label"])}


def _write_out(found: dict[str, Any], out: Path | None) -> int:
    """Write ``found`` as JSON to ``out`` when given; the exit status."""
    if out:
        out.write_text(json.dumps(found, indent=2, default=str))
    return 0


def compare_solo(before: Path, after: Path) -> dict[str, Any]:
    """Two ``--concurrent`` reports of the same candidates (a change off, then on, in one device call): per
    mode, seconds per candidate and per gate before and after, and how far each candidate's speedup over
    the vendor moved (the timing method must not: within 2 %)."""
    docs = []
    for path in (before, after):
        if not path.is_file():
            raise SystemExit(f"--compare {path}: no such file (a bench/validator.py --concurrent --out report)")
        docs.append(json.loads(path.read_text()))
    out: dict[str, Any] = {"before": str(before), "after": str(after), "modes": {}}
    for mode in sorted(set(docs[0].get("modes", {})) & set(docs[1].get("modes", {}))):
        a, b = docs[0]["modes"][mode], docs[1]["modes"][mode]
        moved = _speedups_moved(a["rows"], b["rows"])
        out["modes"][mode] = {
            "candidate_p50_s": [a["candidate_p50_s"], b["candidate_p50_s"]],
            "candidate_p90_s": [a["candidate_p90_s"], b["candidate_p90_s"]],
            "gate_p50_s": {g: [a.get("gate_p50_s", {}).get(g), b.get("gate_p50_s", {}).get(g)]
                           for g in {**a.get("gate_p50_s", {}), **b.get("gate_p50_s", {})}},
            "speedup_moved_pct": moved, "speedup_moved_max_pct": max(moved.values(), default=None)}
    return out


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
    parser.add_argument("--cpu-jobs", type=int, default=4,
                        help="honest rowsum jobs, all gates, interpreter mode: jobs per minute on CPU (0: none)")
    parser.add_argument("--gpu-jobs", type=int, default=0,
                        help="the same on the GPU, performance gate included (needs CUDA)")
    parser.add_argument("--http-requests", type=int, default=200,
                        help="identical POST /v1/validate calls answered from the cache: p50/p90/p99 latency")
    parser.add_argument("--no-http", action="store_true", help="skip the cached-answer latency over HTTP")
    parser.add_argument("--cold-warm", type=int, default=0, help="jobs cold and warm, seconds split by gate")
    parser.add_argument("--cpu", action="store_true", help="interpreter mode for the job figures, even on a GPU")
    parser.add_argument("--from-cache", type=Path, help="an evaluation's result cache: what the validator cost there "
                        "(reads only; nothing else is measured)")
    parser.add_argument("--since", type=_utc_time, help="with --from-cache: results written at or after this ISO "
                        "time only (e.g. 2026-12-06T00:00; UTC unless it names its offset)")
    parser.add_argument("--until", type=_utc_time, help="with --from-cache: results written before this ISO time "
                        "only (UTC unless it names its offset)")
    parser.add_argument("--concurrent", type=int, default=0, help="jobs side by side: candidates per minute of "
                        "held-out kernels and their rewrites, per device-lock mode (see --lock-modes)")
    parser.add_argument("--workloads", default=CONCURRENT_WORKLOADS, help="with --concurrent: held-out workloads")
    parser.add_argument("--lock-modes", default="per-run,batched", help="with --concurrent: batched, per-run")
    parser.add_argument("--profile", type=Path, help="with --concurrent 1: cProfile the trusted side into this file "
                        "(read it with python -m pstats)")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"), help="two --concurrent "
                        "reports of the same candidates: seconds per candidate and gate before/after, and how far "
                        "each speedup moved (reads only)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON (machine, versions, date)")
    args = parser.parse_args()
    if args.compare:
        found = compare_solo(*args.compare)
        for mode, m in found["modes"].items():
            print(f"{mode}: seconds per candidate p50 {m['candidate_p50_s'][0]:.2f} -> {m['candidate_p50_s'][1]:.2f}, "
                  f"p90 {m['candidate_p90_s'][0]:.2f} -> {m['candidate_p90_s'][1]:.2f}")
            print("  gate p50 s: " + ", ".join(f"{g} {x if x is None else round(x, 2)} -> "
                                               f"{y if y is None else round(y, 2)}"
                                               for g, (x, y) in sorted(m["gate_p50_s"].items())))
            if m["speedup_moved_max_pct"] is not None:
                print(f"  speedups over vendor moved at most {m['speedup_moved_max_pct']:.1f} % "
                      f"({len(m['speedup_moved_pct'])} candidates; the timing method's bound: 2 %)")
        return _write_out(found, args.out)
    if args.concurrent:
        if args.profile and args.concurrent != 1:
            raise SystemExit("--profile: only with --concurrent 1 (the jobs must run in the profiled thread)")
        found = _concurrent(args.concurrent, args.workloads.split(","), args.lock_modes.split(","), args.profile)
        print(f"{len(found['candidates'])} candidates, {found['jobs']} at a time, on {found.get('device')}")
        for mode, m in found["modes"].items():
            verdicts = [r["verdict"] for r in m["rows"]]
            print(f"  {mode:<8} {m['candidates_per_minute']:6.1f} candidates/minute, p50 {m['candidate_p50_s']:.1f} s, "
                  f"p90 {m['candidate_p90_s']:.1f} s, GPU held alone {100 * m['held_alone_share']:.0f} % of "
                  f"{m['span_s']:.0f} s, {verdicts.count('pass')}/{len(verdicts)} pass")
            print("    gate p50 s: " + ", ".join(f"{g} {v:.2f}" for g, v in m["gate_p50_s"].items()))
        if len(found["modes"]) == 2:
            a, b = (found["modes"][m] for m in ("per-run", "batched"))
            moved = _speedups_moved(a["rows"], b["rows"])
            print(f"  batched / per-run: {b['candidates_per_minute'] / a['candidates_per_minute']:.2f}x candidates/"
                  f"minute; speedups over vendor agree within {max(moved.values(), default=0.0):.1f} % on "
                  f"{len(moved)} candidates")
        return _write_out(found, args.out)
    if args.from_cache:
        found = from_cache(args.from_cache, args.since, args.until)
        print(f"{found['candidates']} candidates of {found['workloads']} workloads on {', '.join(found['gpus'])}, "
              f"written over {found['span_s']:.0f} s: {found['candidates_per_minute']:.1f} candidates/minute")
        print(f"seconds per candidate: p50 {found['candidate_p50_s']:.1f}, p90 {found['candidate_p90_s']:.1f}")
        for gate, p50 in found["gate_p50_s"].items():
            parts = [f"{label} {found[key[:-2] + '_p50_s'][gate]:.2f}"
                     for key, label in zip(SPLIT, SPLIT_LABELS, strict=True)
                     if gate in found[key[:-2] + "_p50_s"]]
            print(f"  {gate:<12} p50 {p50:7.2f} s  p90 {found['gate_p90_s'][gate]:7.2f} s"
                  + (f"  (p50s: {', '.join(parts)})" if parts else ""))
        if found["alone_per_candidate_p50_s"] is not None:
            print(f"GPU held alone: p50 {found['alone_per_candidate_p50_s']:.2f} s per candidate, "
                  f"{100 * found['alone_share_of_span']:.0f} % of the span (near 100 %: timing is the bottleneck)")
        return _write_out(found, args.out)
    report: dict[str, Any] = {"machine": f"{platform.node()} ({os.cpu_count()} CPUs)",
                              "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if args.cpu_jobs:
        report["cpu"] = _jobs(args.cpu_jobs, "cpu")
    if args.cold_warm:
        report["cold_warm"] = _cold_vs_warm(args.cold_warm, "cpu" if args.cpu else "auto")
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
    if "cold_warm" in report:
        cw = report["cold_warm"]
        for kind in ("cold", "warm"):
            print(f"{kind} job wall p50 (s){'':<16} {cw[kind]['wall_p50_s']:>12.2f}")
            for gate, seconds in cw[kind]["gate_p50_s"].items():
                print(f"  {kind} {gate} p50 (s){'':<{20 - len(gate)}} {seconds:>12.3f}")
    if "http_cached" in report:
        h = report["http_cached"]
        print(f"cached result over HTTP p50 (ms){'':<2} {h['p50_ms']:>12.2f}")
        print(f"cached result over HTTP p99 (ms){'':<2} {h['p99_ms']:>12.2f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
