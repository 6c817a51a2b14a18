"""A validator that only answers from a result cache: what a GPU measured, replayed where there is none.

The agent and the walker are deterministic given their gate results, so a run whose every candidate was
already judged on a GPU can be replayed on a CPU from that GPU's cache and ends exactly where a fresh run
on the GPU that found the same results would. ``CacheOnlyValidator`` serves those stored results under the
recorded GPU's identity (its name and versions are part of every cache key, ``runner.cache_key``) and
refuses, with ``NotInCache``, the first candidate that was never measured: it never judges a kernel
itself, so it can never invent a timing. Results it serves are the stored documents, dates included.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from klineage.schema.gate_result import GATES, NO_GPU, GateResult
from klineage.validator.cache import ResultCache
from klineage.validator.client import ValidatorUnavailable, prepare_request
from klineage.validator.runner import DeviceInfo

__all__ = ["CacheOnlyValidator", "NotInCache", "recorded_devices"]


class NotInCache(ValidatorUnavailable):
    """The candidate was never measured under the cache's recorded device: only a GPU can judge it."""


def recorded_devices(path: Path | str) -> list[tuple[DeviceInfo, int]]:
    """Each (GPU, versions) the cache at ``path`` holds results of, with how many, most results first;
    FileNotFoundError when there is no such file (a missing cache is never created here)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"result cache {str(file)!r} does not exist")
    # counted by SQLite: the documents are stored with sorted keys, so equal versions are equal texts
    with sqlite3.connect(f"file:{file}?mode=ro", uri=True) as db:
        groups = db.execute("SELECT json_extract(doc, '$.gpu') AS gpu, json_extract(doc, '$.versions'), COUNT(*) AS n "
                            "FROM results WHERE gpu IS NOT NULL AND gpu != ? GROUP BY 1, 2 ORDER BY n DESC",
                            (NO_GPU,)).fetchall()
    return [(DeviceInfo(gpu=gpu, versions=json.loads(versions or "{}"), cuda=True, device_count=1), n)
            for gpu, versions, n in groups]


class CacheOnlyValidator:
    """Serve stored gate results of the GPU named like ``device`` (default: the one with the most results in the
    cache, see ``recorded_devices``); ``NotInCache`` for any request the cache cannot answer. ``seeds`` and ``timing``
    must be those the results were measured with, as for ``LocalValidator`` (they are part of the key)."""

    def __init__(self, cache: Path | str, device: str | None = None, seeds: int = 5,
                 timing: Mapping[str, Any] | None = None) -> None:
        found = recorded_devices(cache)
        if not found:
            raise ValueError(f"result cache {str(cache)!r} holds no GPU result to replay")
        named = [d for d, _ in found if device is None or device.lower() in d.gpu.lower()]
        if not named:
            raise ValueError(f"result cache {str(cache)!r} holds no result of a GPU named like {device!r}; "
                             f"it holds: {', '.join(sorted({d.gpu for d, _ in found}))}")
        self.device = named[0]
        self.cache = ResultCache(cache)
        self.seeds = seeds
        self.timing = dict(timing) if timing else None
        self.last_cached = True
        self.misses = 0

    def device_info(self) -> DeviceInfo:
        """The recorded GPU the served results were measured on."""
        return self.device

    def validate(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] = GATES,
                 shapes: Sequence[Mapping[str, int | bool]] | None = None,
                 timeout_s: float | None = None) -> GateResult:
        """The stored result of this request (see ``ValidatorClient``); ``NotInCache`` when there is none.
        Requests are checked as ``LocalValidator`` checks them (``ValidationRequestError`` for bad ones)."""
        *_, key = prepare_request(candidate_source, workload_dir, gates, shapes, self.device, self.seeds,
                                  self.timing)
        hit = self.cache.get(key)
        if hit is None:
            self.misses += 1
            raise NotInCache(f"never measured on {self.device.gpu} (versions {self.device.versions}): "
                             "a GPU must judge this candidate")
        return hit
