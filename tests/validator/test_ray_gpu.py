"""On the GPU (issue 17): a job through Ray is timed as through the local pool — same run, within 2 %.

One GPU, a one-node Ray cluster started here: the Ray actor holds the GPU (``num_gpus=1``) and runs the
job in its own warm worker, as ``LocalValidator`` does in this process. The two are run in turn
(local, Ray, local, Ray) so that neither times while the other runs, and each case's candidate median
is compared. Skipped without CUDA; with ``KLINEAGE_GPU_OUT`` set the figures are written there
(``ray_vs_local.json``).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from klineage.validator import LocalValidator  # noqa: E402
from validator import gpu_report  # noqa: E402

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"
TOLERANCE_PCT = 2.0


def _cases(result: Any) -> dict[str, dict[str, float]]:
    """Per case: the candidate's median and the speedup over the vendor."""
    gate = result.gate("performance")
    assert gate is not None and gate.status == "pass", result.to_dict()["gates"]
    return {f"{row['shape']} {row['dtype']}": {"median_ms": float(row["candidate"]["median_ms"]),
                                               "speedup": float(row["speedup"] or 0.0)}
            for row in gate.metrics["rows"]}


def test_ray_times_like_the_local_pool() -> None:
    ray = pytest.importorskip("ray")
    from klineage.validator.ray_backend import RayValidator, shutdown_ray_validators

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_gpus=1, num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = RayValidator(cache=None, device="auto", actors=1)
        where = on_ray.where()
        assert len(where) == 1 and len(where[0]["gpu_ids"]) == 1, where
        assert on_ray.device_info().cuda
        local = LocalValidator(cache=None, device="auto")
        source = (ROWSUM / "kernel.py").read_text()
        runs: dict[str, list[dict[str, dict[str, float]]]] = {"local": [], "ray": []}
        docs: dict[str, Any] = {}
        for name in ("local", "ray", "local", "ray"):
            client: Any = local if name == "local" else on_ray
            result = client.validate(source, ROWSUM)
            assert result.verdict == "pass", result.to_dict()["gates"]
            docs[name] = result
            runs[name].append(_cases(result))
        assert [(g.gate, g.status) for g in docs["ray"].gates] == [(g.gate, g.status) for g in docs["local"].gates]
        assert docs["ray"].gpu == docs["local"].gpu and docs["ray"].versions == docs["local"].versions
        rows = {}
        for case in runs["local"][0]:
            local_ms = statistics.median(r[case]["median_ms"] for r in runs["local"])
            ray_ms = statistics.median(r[case]["median_ms"] for r in runs["ray"])
            rows[case] = {"local_ms": local_ms, "ray_ms": ray_ms, "diff_pct": 100 * abs(ray_ms - local_ms) / local_ms,
                          "local_speedup": statistics.median(r[case]["speedup"] for r in runs["local"]),
                          "ray_speedup": statistics.median(r[case]["speedup"] for r in runs["ray"])}
        gpu_report.write("ray_vs_local", {"cases": rows, "runs": runs, "criterion": f"within {TOLERANCE_PCT} %",
                                          "ray_actor": where[0]})
        for case, row in rows.items():
            assert row["diff_pct"] < TOLERANCE_PCT, (case, row)
    finally:
        shutdown_ray_validators()
        ray.shutdown()
