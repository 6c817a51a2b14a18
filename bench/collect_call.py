"""File what one device call of ``bench/device_call.sh`` measured into ``bench/results/``.

    python bench/collect_call.py /work/.device/3 --call 16

The call's folder (the device tool's ``files_at``) holds ``gpu.txt`` (which card), ``cache.sqlite`` (or
``cache.sqlite.gz``: ``device_call.sh`` sends it gzipped, since the whole cache outgrew what a call may send back),
``results.jsonl`` and logs. This script

* merges the call's gate results into ``bench/results/agent-CARD-cache.sqlite`` (rows already there are kept:
  the cache is keyed by kernel, workload, shapes, gates, GPU and versions, so a key's answer never changes),
* appends the call's result rows to ``bench/results/agent-CARD.jsonl`` (``evaluate_agent.py table`` keeps the
  latest row of each instance × method),
* copies every other file (not SQLite's ``-wal``/``-shm`` side files, read with the cache) to
  ``bench/results/runs/DATE-CARD-callN-NAME`` (underscores become dashes),

and prints what it did. It refuses a folder without ``gpu.txt`` or a call number already filed, so running it
twice on one call adds nothing twice.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sqlite3
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MERGED_FILES = {"cache.sqlite", "results.jsonl"}


def card_of(gpu_txt: Path) -> str:
    """The card's short name (``h100``, ``h200``) from the ``card: NAME`` line ``device_call.sh`` writes."""
    for line in gpu_txt.read_text(encoding="utf-8").splitlines():
        if line.startswith("card: "):
            return line.split()[1]
    raise SystemExit(f"{gpu_txt}: no 'card: NAME' line (was it written by bench/device_call.sh?)")


def merge_cache(new: Path, into: Path) -> tuple[int, int]:
    """Insert the rows of ``new`` that ``into`` lacks (both tables); return (results before, results after)."""
    if not into.exists():
        shutil.copyfile(new, into)
    with sqlite3.connect(into) as db:
        before = db.execute("select count(*) from results").fetchone()[0]
        db.execute("attach database ? as n", (str(new),))
        db.execute("insert or ignore into results select * from n.results")
        db.execute("insert or ignore into ceilings select * from n.ceilings")
        db.commit()
        after = db.execute("select count(*) from results").fetchone()[0]
    return before, after


def main(argv: list[str] | None = None) -> int:
    """Merge, append and copy as the module docstring says; 0 on success, a message and 2 on a bad folder."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the call's files (the device tool's files_at)")
    parser.add_argument("--call", type=int, required=True, help="the call's number (runs/ names its files by it)")
    parser.add_argument("--date", default=datetime.now(UTC).date().isoformat(), help="default: today (UTC)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: bench/results")
    args = parser.parse_args(argv)
    folder: Path = args.folder
    if not (folder / "gpu.txt").is_file():
        print(f"{folder}: no gpu.txt; expected the files of one bench/device_call.sh call", file=sys.stderr)
        return 2
    card = card_of(folder / "gpu.txt")
    prefix = f"{args.date}-{card}-call{args.call}-"
    runs = args.results / "runs"
    if any(runs.glob(prefix + "*")):
        print(f"{runs}/{prefix}*: call {args.call} is filed already", file=sys.stderr)
        return 2
    runs.mkdir(parents=True, exist_ok=True)
    into = args.results / f"agent-{card}-cache.sqlite"
    if (folder / "cache.sqlite").is_file():
        before, after = merge_cache(folder / "cache.sqlite", into)
        print(f"cache agent-{card}-cache.sqlite: {before} -> {after} gate results")
    elif (folder / "cache.sqlite.gz").is_file():
        with tempfile.TemporaryDirectory() as tmp:  # the call's folder is read-only: unpack beside it
            unpacked = Path(tmp) / "cache.sqlite"
            with gzip.open(folder / "cache.sqlite.gz", "rb") as packed, unpacked.open("wb") as out:
                shutil.copyfileobj(packed, out)
            before, after = merge_cache(unpacked, into)
        print(f"cache agent-{card}-cache.sqlite: {before} -> {after} gate results (from cache.sqlite.gz)")
    rows = folder / "results.jsonl"
    if rows.is_file() and rows.stat().st_size:
        text = rows.read_text(encoding="utf-8")
        with (args.results / f"agent-{card}.jsonl").open("a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        print(f"agent-{card}.jsonl: {sum(1 for line in text.splitlines() if line.strip())} rows appended")
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in MERGED_FILES and not path.name.startswith("cache.sqlite"):
            target = runs / (prefix + path.name.replace("_", "-"))
            shutil.copyfile(path, target)
            target.chmod(0o644)
            print(f"runs/{target.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
