#!/usr/bin/env python3
"""Print which skills the knowledge base recommends for each held-out naive kernel, as Markdown.

For every workload folder under ``--heldout`` (default ``heldout/``) and for two of its GPU shapes
(the first and the last of the manifest, with its first dtype and ``--arch``), this runs the same
search as ``klineage search --kernel <naive.py> --context '{...}'``: kernel features, summary and
operator anchors from ``klineage.transforms.facts``, then ``KnowledgeBase.search``. One row per
(kernel, context): the APPLICABLE skills, the UNKNOWN ones (with what is missing) and the
NOT_APPLICABLE ones (with the first failed check).

The knowledge base: ``--store DIR`` opens an existing embedded store; otherwise the lineage
documents of ``--lineages`` (default: the sample fixtures, ``tests/fixtures/lineages``) are
ingested into a temporary one. Sample fixtures are labelled as such in the output.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def open_kb(store: Path | None, lineages: Path) -> tuple[Any, bool]:
    """The knowledge base to query and whether it holds sample (fixture) data only."""
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    if store is not None:
        kb = KnowledgeBase(EmbeddedStore(store))
        return kb, all(s.sample for s in kb.skills(first=1000).items)
    kb = KnowledgeBase(EmbeddedStore(Path(tempfile.mkdtemp(prefix="klineage-recommend-"))))
    docs = [load_lineage_document(p) for p in sorted(lineages.glob("*.json"))]
    if not docs:
        raise SystemExit(f"no lineage documents (*.json) in {lineages}")
    for doc in docs:
        kb.ingest(doc)
    return kb, all(d.sample for d in docs)


def cases(heldout: Path, arch: int) -> list[tuple[str, Path, dict[str, Any]]]:
    """(workload, kernel file, context) for the first and last GPU shape of every held-out workload."""
    from klineage.schema.manifest import load_manifest

    out = []
    for folder in sorted(p for p in heldout.iterdir() if (p / "manifest.toml").is_file()):
        m = load_manifest(folder)
        for shape in [m.shapes[0]] + ([m.shapes[-1]] if len(m.shapes) > 1 else []):
            out.append((m.name, m.kernel_path, {**shape, "dtype": m.dtypes[0], "arch": arch}))
    return out


def recommend(kb: Any, source: str, context: dict[str, Any]) -> list[Any]:
    """Every skill's hit for this kernel and context (the CLI's search, without text)."""
    from klineage.transforms.facts import kernel_facts

    return kb.search(context=context, limit=100, **kernel_facts(source).search_kwargs())


def _short(line: str, width: int = 90) -> str:
    line = line.replace("|", "\\|")
    return line if len(line) <= width else line[: width - 1] + "…"


def table(kb: Any, rows: list[tuple[str, Path, dict[str, Any]]]) -> str:
    """The Markdown table of recommendations."""
    from klineage.kb.search import APPLICABLE, NOT_APPLICABLE, UNKNOWN

    lines = ["| kernel | context | applicable | unknown (missing) | not applicable (first reason) |",
             "|---|---|---|---|---|"]
    for name, path, context in rows:
        hits = recommend(kb, path.read_text(encoding="utf-8"), context)
        ctx = ", ".join(f"{k}={v}" for k, v in context.items())
        yes = ", ".join(h.skill.name + f" ({h.skill.operator})" for h in hits if h.applicable == APPLICABLE)
        maybe = "; ".join(f"{h.skill.operator}: {_short(h.unknown[0], 60) if h.unknown else '?'}"
                          for h in hits if h.applicable == UNKNOWN)
        no = "<br>".join(f"{h.skill.operator}: {_short(h.failed[0]) if h.failed else '?'}"
                         for h in hits if h.applicable == NOT_APPLICABLE)
        lines.append(f"| {name} | {ctx} | {yes or '—'} | {maybe or '—'} | {no or '—'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, build or open the knowledge base, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", type=Path, default=ROOT / "heldout", help="folder of workload folders")
    parser.add_argument("--lineages", type=Path, default=ROOT / "tests" / "fixtures" / "lineages",
                        help="lineage documents to ingest into a temporary store")
    parser.add_argument("--store", type=Path, default=None, help="an existing embedded store folder instead")
    parser.add_argument("--arch", type=int, default=90, help="compute capability put in every context")
    args = parser.parse_args(argv)
    kb, sample = open_kb(args.store, args.lineages)
    skills = kb.skills(first=1000).items
    label = " (sample data, not measured)" if sample else ""
    print(f"Recommendations for {args.heldout} from {len(skills)} skill(s) "
          f"[{', '.join(sorted({s.operator for s in skills}))}]{label}\n")
    print(table(kb, cases(args.heldout, args.arch)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
