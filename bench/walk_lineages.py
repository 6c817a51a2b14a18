"""Walk the expert workloads on the GPU within one time budget, then run the replay check.

Meant for one device call (``run`` of the device tool, ≤ 10 minutes): walks the workloads one after
another (cheapest first) with what is left of ``--budget-s``, writes each lineage document (without
skills: ``klineage ingest`` extracts and merges them where the knowledge base lives), and for every
complete walk rebuilds the kernel forward from its naive end with ``apply`` (the replay check) twice:
with the parameters each step recorded (normally the expert byte for byte: reported as identical, not
re-timed) and with ``apply``'s generic defaults (a different kernel, gated and timed against the
expert). Gate results are cached in ``--cache``: carry that file to the next call
and the walks resume where they stopped.

    python bench/walk_lineages.py --out $OUT --budget-s 520 --cache .klineage/walk-cache.sqlite
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.ingest.replay import replay_check  # noqa: E402
from klineage.ingest.walker import Walker, WalkEvent, WalkOptions  # noqa: E402
from klineage.validator.factory import make_validator  # noqa: E402

ORDER = ("layernorm", "softmax", "gemm", "attention", "cross_entropy")  # cheapest first; walked ones: cached


def main() -> int:
    """Walk, write, replay; print one line per event and a summary; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for lineages/ and replay/")
    parser.add_argument("--budget-s", type=float, default=520.0, help="total wall-time budget")
    parser.add_argument("--cache", type=Path, default=Path(".klineage/walk-cache.sqlite"),
                        help="SQLite cache of gate results: carry it to the next call and the walks resume where "
                             "they stopped (default: .klineage/walk-cache.sqlite)")
    parser.add_argument("--parallel", type=int, default=6,
                        help="candidates' checking jobs run at a time (performance jobs always run one by one)")
    parser.add_argument("--rep-ms", type=float, default=50.0,
                        help="timed milliseconds per case of a candidate (the starting kernel's gate keeps the "
                             "default, 100)")
    parser.add_argument("--host-lead-us", type=float, default=0.0,
                        help="keep the GPU busy this long after each L2 flush so the host launch path stays "
                             "out of the times (0: the method of the committed walks; other values are cached "
                             "under other keys)")
    parser.add_argument("--validator", default=None,
                        help="where the jobs run: local (default), http://HOST:PORT, or a Ray cluster (ray, "
                             "ray:auto, ray:HOST:6379): one actor per GPU, --cache shared by all")
    parser.add_argument("--workloads", default=",".join(ORDER),
                        help=f"comma-separated names under workloads/, walked in this order "
                             f"(default: {','.join(ORDER)}, cheapest first)")
    parser.add_argument("--no-replay", action="store_true",
                        help="write the lineages only, without the replay check of complete walks")
    parser.add_argument("--pack", action="store_true",
                        help="at the end, put lineages/ and replay/ into results.tgz (a device call returns "
                             "at most 8 files)")
    args = parser.parse_args()
    start = time.monotonic()
    lead = {"host_lead_us": args.host_lead_us} if args.host_lead_us > 0 else {}
    candidates = make_validator(args.validator, cache=args.cache,
                                timing={"rep_ms": args.rep_ms, "baseline": False, **lead})
    baseline = make_validator(args.validator, cache=args.cache, timing=lead or None)
    (args.out / "lineages").mkdir(parents=True, exist_ok=True)
    (args.out / "replay").mkdir(parents=True, exist_ok=True)
    summary = []
    for name in args.workloads.split(","):
        left = args.budget_s - (time.monotonic() - start)
        if left < 30:
            print(f"[{name}] skipped: {left:.0f} s left", flush=True)
            summary.append({"workload": name, "status": "not started"})
            continue
        t0 = time.monotonic()

        def show(event: WalkEvent, name: str = name, t0: float = t0) -> None:
            print(f"[{name} {time.monotonic() - t0:6.1f}s step {event.step:>2}] {event.kind}: {event.message}",
                  flush=True)

        walker = Walker(ROOT / "workloads" / name, candidates, options=WalkOptions(parallel=args.parallel,
                                                                                  budget_s=left - 20),
                        baseline_validator=baseline, on_event=show)
        try:
            doc = walker.run()
        except Exception as exc:  # one workload's failure must not lose the others
            print(f"[{name}] walk failed: {type(exc).__name__}: {exc}", flush=True)
            summary.append({"workload": name, "status": f"failed: {exc}"})
            continue
        path = args.out / "lineages" / f"{name}.lineage.json"
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        entry = {"workload": name, "complete": doc["complete"], "steps": len(doc["steps"]),
                 "accepted": sum(1 for s in doc["steps"] if s["accepted"]), "wall_s": time.monotonic() - t0}
        if doc["complete"] and not args.no_replay:
            entry["replay"] = {}
            for mode in ("recorded", "generic"):  # recorded: normally the expert itself; generic: timed
                if args.budget_s - (time.monotonic() - start) < 40:
                    break
                report, rebuilt, source = replay_check(doc, walker, recorded=mode == "recorded")
                data = {**report.to_json(), "rebuilt_failed": rebuilt.failed, "gate_runs": rebuilt.gate_runs(),
                        "source": source}
                (args.out / "replay" / f"{name}.{mode}.replay.json").write_text(json.dumps(data, indent=1) + "\n",
                                                                               encoding="utf-8")
                entry["replay"][mode] = {"passed": report.passed, "identical": report.identical,
                                         "worst_ratio": data["worst_ratio"], "failed": rebuilt.failed}
        summary.append(entry)
        print(json.dumps(entry), flush=True)
    (args.out / "walk-summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if args.pack:
        with tarfile.open(args.out / "results.tgz", "w:gz") as tar:
            for folder in ("lineages", "replay"):
                tar.add(args.out / folder, arcname=folder)
        for folder in ("lineages", "replay"):
            shutil.rmtree(args.out / folder)
    print(f"total {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
