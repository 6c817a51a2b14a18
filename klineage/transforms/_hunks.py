"""Hunk records: a piece of code a rewrite replaced, anchored in the rewritten source, so that the
rewrite can be undone exactly on that source (or a later version whose anchor lines are unchanged).

A hunk is ``{"at": needle, "occurrence": n, "offset": o, "length": l, "text": original}``: the
replacement is found as the ``n``-th occurrence of ``needle`` (the lines of the rewritten source that
hold it), starts ``o`` characters in and is ``l`` long; ``text`` is what it replaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from klineage.transforms._source import Edit, apply_edits


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _line_end(text: str, pos: int) -> int:
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1


def _occurrences(text: str, needle: str) -> list[int]:
    out, i = [], text.find(needle)
    while i >= 0:
        out.append(i)
        i = text.find(needle, i + 1)
    return out


def hunks(before: str, edits: Sequence[Edit]) -> list[dict[str, Any]]:
    """Records undoing ``edits`` (as applied to ``before`` by ``apply_edits``), anchored in the result."""
    after = apply_edits(before, edits)
    out = []
    delta = 0
    for e in sorted(set(edits), key=lambda e: (e.start, e.end)):
        new_start = e.start + delta
        new_end = new_start + len(e.text)
        delta += len(e.text) - (e.end - e.start)
        a = _line_start(after, new_start)
        if a == new_start and a > 0:
            a = _line_start(after, a - 1)  # an edit at a line start: anchor on the line above too
        b = _line_end(after, new_end)
        needle = after[a:b]
        occ = _occurrences(after, needle).index(a)
        out.append(
            {
                "at": needle,
                "occurrence": occ,
                "offset": new_start - a,
                "length": len(e.text),
                "text": before[e.start : e.end],
            }
        )
    return out


def undo_hunks(source: str, records: Sequence[Mapping[str, Any]]) -> str | None:
    """``source`` with every hunk put back; None when an anchor is not found."""
    edits: list[Edit] = []
    for r in records:
        try:
            needle, occ = str(r["at"]), int(r["occurrence"])
            offset, length, text = int(r["offset"]), int(r["length"]), str(r["text"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed hunk record {dict(r)!r}: {exc}") from exc
        found = _occurrences(source, needle)
        if occ >= len(found):
            return None
        start = found[occ] + offset
        if edits and length == 0 and edits[-1].start == edits[-1].end == start:
            edits[-1] = Edit(start, start, edits[-1].text + text)  # consecutive insertions, in order
        else:
            edits.append(Edit(start, start + length, text))
    try:
        return apply_edits(source, edits)
    except ValueError:
        return None
