"""The on-disk result cache: SQLite, one row per (kernel, workload version, shapes, gates, GPU, versions).

Keys come from ``runner.cache_key``. Only results that say something about the candidate are stored:
a job that was killed by its time limit or whose worker died is not (``JobOutput.cacheable``), so a
loaded machine cannot make a slow-but-correct kernel fail forever. Device ceilings are stored here too,
one row per GPU and versions.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from klineage.schema.gate_result import GateResult

DEFAULT_CACHE_ENV = "KLINEAGE_VALIDATOR_CACHE"


def default_cache_path() -> Path:
    """``$KLINEAGE_VALIDATOR_CACHE``, else ``.klineage/validator/cache.sqlite``: the cache the CLI uses."""
    import os

    return Path(os.environ.get(DEFAULT_CACHE_ENV, ".klineage/validator/cache.sqlite"))


@runtime_checkable
class ResultStore(Protocol):
    """What a validator needs of a result cache: ``ResultCache`` here, or its proxy on a Ray worker
    (``ray_backend.RemoteResultCache``, which reaches the one SQLite file through an actor)."""

    def get(self, key: str) -> GateResult | None:
        """The cached result for ``key``, or None."""
        ...

    def put(self, key: str, result: GateResult) -> None:
        """Store a complete result under ``key``."""
        ...

    def get_ceilings(self, key: str) -> dict[str, Any] | None:
        """Stored device ceilings for ``key``, or None."""
        ...

    def put_ceilings(self, key: str, ceilings: dict[str, Any]) -> None:
        """Store measured device ceilings under ``key``."""
        ...


class ResultCache:
    """A small thread-safe SQLite store of gate result documents and device ceilings."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, created TEXT NOT NULL, "
                       "kernel_sha TEXT NOT NULL, workload TEXT NOT NULL, doc TEXT NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS ceilings (key TEXT PRIMARY KEY, created TEXT NOT NULL, "
                       "doc TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def get(self, key: str) -> GateResult | None:
        """The cached result for ``key``, or None."""
        with self._lock, self._connect() as db:
            row = db.execute("SELECT doc FROM results WHERE key = ?", (key,)).fetchone()
        return GateResult.from_dict(json.loads(row[0])) if row else None

    def put(self, key: str, result: GateResult) -> None:
        """Store ``result`` under ``key`` (replacing any earlier one)."""
        doc = json.dumps(result.to_dict(), sort_keys=True)
        now = datetime.now(UTC).isoformat()
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                       (key, now, result.kernel_sha, result.workload, doc))

    def __len__(self) -> int:
        with self._lock, self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def get_ceilings(self, key: str) -> dict[str, Any] | None:
        """Stored device ceilings for ``key`` (GPU + versions), or None."""
        with self._lock, self._connect() as db:
            row = db.execute("SELECT doc FROM ceilings WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put_ceilings(self, key: str, ceilings: dict[str, Any]) -> None:
        """Store measured device ceilings under ``key``."""
        now = datetime.now(UTC).isoformat()
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO ceilings VALUES (?, ?, ?)", (key, now, json.dumps(ceilings)))
