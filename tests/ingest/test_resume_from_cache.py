"""Resuming a walk from the gate cache of the H200 (lineages/h200-walk-cache.sqlite): every committed
complete walk replays entirely from the cache, with no job run, to the committed lineage. Each walk
starts from the kernel its document records, which need not be today's expert.py (the cache key is
the kernel's hash, so a lineage of an earlier expert version stays replayable)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from klineage.ingest.walker import Walker, WalkOptions, accepted_path, start_kernel
from klineage.transforms.registry import get_operator
from klineage.validator import LocalValidator
from klineage.validator.runner import DeviceInfo

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "lineages" / "h200-walk-cache.sqlite"
COMPLETE = sorted(p.name.removesuffix(".lineage.json") for p in (ROOT / "lineages").glob("*.lineage.json")
                  if json.loads(p.read_text(encoding="utf-8"))["complete"])


class CacheOnly(LocalValidator):
    """The H200's cache, read here: any job that is not cached is a failure of the resume."""

    def __init__(self, cache: Path, device: DeviceInfo, **kwargs: object) -> None:
        super().__init__(cache=cache, **kwargs)  # type: ignore[arg-type]
        self._device = device

    def device_info(self) -> DeviceInfo:
        return self._device

    def ceilings(self) -> None:
        return None

    def validate(self, candidate_source, workload_dir, gates=(), shapes=None, timeout_s=None):  # type: ignore[override]
        *_, key = self.prepare(candidate_source, workload_dir, gates, shapes)
        hit = self.cached(key)
        if hit is None:
            raise AssertionError(f"not in the H200 cache: {gates} for a {Path(workload_dir).name} kernel")
        return hit


def test_the_committed_walks_include_complete_ones() -> None:
    assert CACHE.is_file() and {"cross_entropy", "layernorm", "softmax"} <= set(COMPLETE)


@pytest.mark.parametrize("workload", COMPLETE)
def test_a_complete_walk_resumes_from_the_h200_cache(tmp_path: Path, workload: str) -> None:
    committed = json.loads((ROOT / "lineages" / f"{workload}.lineage.json").read_text(encoding="utf-8"))
    cache = tmp_path / "cache.sqlite"
    shutil.copy(CACHE, cache)
    start_run = committed["steps"][0]["gate_runs"][0]
    device = DeviceInfo(gpu=start_run["gpu"], versions=dict(start_run["versions"]), cuda=True, device_count=1)
    candidates = CacheOnly(cache, device, timing={"rep_ms": 50.0, "baseline": False})
    baseline = CacheOnly(cache, device)
    # the operators of that walk (operators added since then would propose candidates it never measured)
    operators = [get_operator(op) for op in dict.fromkeys(s["operator"] for s in committed["steps"])]
    doc = Walker(ROOT / "workloads" / workload, candidates, operators, options=WalkOptions(parallel=2),
                 baseline_validator=baseline, start_source=start_kernel(committed)).run()
    assert [s["operator"] for s in accepted_path(doc)] == [s["operator"] for s in accepted_path(committed)]
    assert [(s["operator"], s["accepted"], s["gate"]) for s in doc["steps"]] == \
        [(s["operator"], s["accepted"], s["gate"]) for s in committed["steps"]]
    assert [s["timings"] for s in doc["steps"]] == [s["timings"] for s in committed["steps"]]
    assert doc["complete"] is True
