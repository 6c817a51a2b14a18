#!/usr/bin/env python3
"""Which measured skills does search mark APPLICABLE for each held-out naive kernel?

Builds the knowledge base ``make demo`` builds (every ``lineages/*.lineage.json``) in a temporary
folder, then asks the same service function ``klineage search --kernel FILE --context ...`` calls,
for every kernel under ``heldout/`` at the first shape of its manifest (first dtype, sm_90), and
prints one row per kernel: the APPLICABLE skills, and how many were NOT_APPLICABLE or UNKNOWN.
No GPU; ~40 s (embedding the skills):

    python3 bench/recommend_heldout.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.ingest.pipeline import ingest_lineages  # noqa: E402
from klineage.kb.embedded_store import EmbeddedStore  # noqa: E402
from klineage.kb.search import APPLICABLE, NOT_APPLICABLE  # noqa: E402
from klineage.kb.service import KnowledgeBase  # noqa: E402
from klineage.schema.lineage_document import load_lineage_document  # noqa: E402
from klineage.schema.manifest import load_manifest  # noqa: E402
from klineage.transforms.facts import kernel_facts  # noqa: E402


def main() -> int:
    """Print the table (or JSON rows with ``--json``); exit 0."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON object per kernel instead of a table")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        kb = KnowledgeBase(EmbeddedStore(Path(folder)))
        docs = [load_lineage_document(p) for p in sorted((ROOT / "lineages").glob("*.lineage.json"))]
        ingest_lineages(kb, docs)
        for kernel_dir in sorted(p for p in (ROOT / "heldout").iterdir() if (p / "manifest.toml").is_file()):
            manifest = load_manifest(kernel_dir)
            context = {**manifest.shapes[0], "dtype": manifest.dtypes[0], "arch": 90}
            source = (kernel_dir / "naive.py").read_text(encoding="utf-8")
            hits = kb.search(text="optimize this kernel", context=context, limit=100,
                             **kernel_facts(source).search_kwargs())
            rows.append({
                "kernel": kernel_dir.name, "family": manifest.family, "context": context,
                "applicable": sorted(h.skill.operator for h in hits if h.applicable == APPLICABLE),
                "not_applicable": sum(1 for h in hits if h.applicable == NOT_APPLICABLE),
                "unknown": sum(1 for h in hits if h.applicable not in (APPLICABLE, NOT_APPLICABLE)),
            })
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print("| held-out kernel | family | APPLICABLE skills | not applicable | unknown |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['kernel']} | {row['family']} | {', '.join(row['applicable']) or '—'} | "
              f"{row['not_applicable']} | {row['unknown']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
