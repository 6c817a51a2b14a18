"""``bench/collect_call.py``: one device call's files filed into bench/results once, the cache merged, not replaced."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

from . import load_bench

bench = load_bench("collect_call")

SCHEMA = ("create table results (key text primary key, created text not null, kernel_sha text not null, "
          "workload text not null, doc text not null);"
          "create table ceilings (key text primary key, created text not null, doc text not null);")


def _cache(path: Path, keys: list[str]) -> None:
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.executemany("insert into results values (?, 'd', 'sha', 'w', ?)", [(k, f"doc {k}") for k in keys])


def _call(folder: Path, keys: list[str], rows: list[dict]) -> Path:
    folder.mkdir()
    (folder / "gpu.txt").write_text("NVIDIA H100 80GB HBM3, 580\ncard: h100 (cache ...)\n")
    _cache(folder / "cache.sqlite", keys)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "evaluation.log").write_text("[ 1 s] ...\n")
    (folder / "validator_solo.json").write_text("{}")
    return folder


def test_a_call_is_merged_appended_and_copied_once(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _cache(results / "agent-h100-cache.sqlite", ["a", "b"])
    (results / "agent-h100.jsonl").write_text(json.dumps({"instance": "old"}) + "\n")
    call = _call(tmp_path / "call", ["b", "c"], [{"instance": "x"}, {"instance": "y"}])
    args = [str(call), "--call", "7", "--date", "2026-12-07", "--results", str(results)]

    assert bench.main(args) == 0
    with sqlite3.connect(results / "agent-h100-cache.sqlite") as db:
        assert sorted(k for (k,) in db.execute("select key from results")) == ["a", "b", "c"]
    lines = (results / "agent-h100.jsonl").read_text().splitlines()
    assert [json.loads(line)["instance"] for line in lines] == ["old", "x", "y"]
    assert sorted(p.name for p in (results / "runs").iterdir()) == [
        "2026-12-07-h100-call7-evaluation.log", "2026-12-07-h100-call7-gpu.txt",
        "2026-12-07-h100-call7-validator-solo.json"]

    assert bench.main(args) == 2  # the same call again: refused, nothing appended twice
    assert len((results / "agent-h100.jsonl").read_text().splitlines()) == 3


def test_a_folder_not_written_by_device_call_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert bench.main([str(tmp_path / "empty"), "--call", "1", "--results", str(tmp_path)]) == 2


def test_a_gzipped_cache_is_unpacked_and_merged(tmp_path: Path) -> None:
    """device_call.sh sends the cache gzipped (the whole of it outgrew what a call may send back)."""
    results = tmp_path / "results"
    results.mkdir()
    _cache(results / "agent-h100-cache.sqlite", ["a"])
    call = _call(tmp_path / "call", ["a", "z"], [])
    raw = call / "cache.sqlite"
    (call / "cache.sqlite.gz").write_bytes(gzip.compress(raw.read_bytes()))
    raw.unlink()

    assert bench.main([str(call), "--call", "9", "--date", "2026-12-07", "--results", str(results)]) == 0
    with sqlite3.connect(results / "agent-h100-cache.sqlite") as db:
        assert sorted(k for (k,) in db.execute("select key from results")) == ["a", "z"]
    assert not any("cache" in p.name for p in (results / "runs").iterdir())  # merged, not copied as a log
