"""Shared helpers of the held-out checks: the held-out workload folders and validating many jobs at once.

Validation runs under the Triton interpreter (the session's ``cpu_validator``, tests/conftest.py: static,
compile, correctness on each workload's ``cpu_shapes``, one result cache for the session). Every job runs
in a worker subprocess, so a small thread pool runs one per CPU core, at least two and at most eight.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from klineage.schema.manifest import WorkloadManifest, load_manifest
from klineage.validator import ValidatorClient

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "heldout"
EXPERT_WORKLOADS = frozenset({"gemm", "softmax", "layernorm", "attention", "cross_entropy"})
CPU_GATES = ("static", "compile", "correctness")
WORKERS = max(2, min(8, os.cpu_count() or 2))


def heldout_dirs() -> list[Path]:
    """Every held-out workload folder (a folder of ``heldout/`` with a manifest), by name."""
    return sorted(p for p in HELDOUT.iterdir() if (p / "manifest.toml").is_file())


def manifests() -> dict[str, WorkloadManifest]:
    """The held-out manifests by workload name."""
    return {d.name: load_manifest(d) for d in heldout_dirs()}


def naive_sources() -> dict[str, str]:
    """The naive candidate source of every held-out workload, by name."""
    return {name: m.kernel_path.read_text(encoding="utf-8") for name, m in manifests().items()}


def failed_gates(result: Mapping[str, Any]) -> list[str]:
    """``gate: reason`` for every failed gate of a gate result (as a dict)."""
    return [f"{g['gate']}: {g['reason']}" for g in result["gates"] if g["status"] == "fail"]


def validate_all(jobs: Iterable[tuple[str, str, Path] | tuple[str, str, Path, list[dict[str, Any]]]],
                 validator: ValidatorClient) -> dict[str, dict[str, Any]]:
    """Validate ``(key, source, workload_dir[, shapes])`` jobs with ``validator`` (a CPU one), ``WORKERS``
    at a time (shapes: the manifest's cpu_shapes when not given); gate results (dicts) by key."""
    todo = list(jobs)

    def one(job: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
        key, source, workload, *shapes = job
        return key, validator.validate(source, workload, gates=CPU_GATES, shapes=shapes[0] if shapes else None
                                       ).to_dict()

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(pool.map(one, todo))
