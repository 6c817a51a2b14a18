"""What ``simplify`` removed, recorded so that ``apply(source, **params)`` can put back exactly that.

Three kinds of records, all JSON-serialisable (str/int/list/dict):

- keyword records ``{"value": "8", "pos": 3, "sep": ", "}``: a keyword argument (``num_warps=8``,
  ``eviction_policy="evict_first"``) that was the ``pos``-th argument of its call, with the separator
  that joined it to its neighbour (so a multi-line call keeps its layout);
- site lists: the values that were written at a tunable's sites, in the order the operator finds
  those sites (unchanged by the rewrite, which only changes the values);
- hunks ``{"at": needle, "occurrence": n, "offset": o, "length": l, "text": original}``: a piece of
  code the rewrite replaced, anchored by the lines of the simplified source that hold its
  replacement (the ``n``-th occurrence of ``needle``; the replacement starts ``o`` characters in and
  is ``l`` long). Structural operators (mask elision, online softmax, causal skip, autotune) record
  the constructs they removed this way: the expert's code is the choice they undo.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from klineage.transforms._source import Edit, Src, apply_edits, call_items


def check_params(op_id: str, params: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """TypeError naming the parameters ``apply`` of ``op_id`` does not take (never ignored)."""
    allowed = set(allowed)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise TypeError(
            f"{op_id}.apply got unexpected parameter(s) {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(sorted(allowed)) or 'none'}"
        )


def require_list(op_id: str, name: str, value: Any) -> list[Any] | None:
    """A recorded list parameter (None stays None); ValueError for anything that is not a list of dicts."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{op_id}.apply: {name} must be a list of records (dicts) as simplify recorded them")
    return value


# ------------------------------------------------------------------------------------------ keywords


def kw_record(src: Src, call: ast.Call, name: str) -> dict[str, Any] | None:
    """How keyword ``name`` sits in ``call``: its value, argument position and separator."""
    items = call_items(src, call)
    for i, (kw, (start, end)) in enumerate(items):
        if kw != name:
            continue
        node = next(k for k in call.keywords if k.arg == name)
        rec: dict[str, Any] = {"value": src.seg(node.value), "pos": i}
        if i + 1 < len(items):
            rec["sep"] = src.text[end : items[i + 1][1][0]]
        elif i > 0:
            rec["sep"] = src.text[items[i - 1][1][1] : start]
        text = src.text[start:end]
        if text != f"{name}={rec['value']}":
            rec["text"] = text
        return rec
    return None


def kw_insert(src: Src, call: ast.Call, name: str, rec: Mapping[str, Any]) -> Edit | None:
    """The edit putting keyword ``name`` back as ``kw_record`` described it (None: cannot)."""
    items = call_items(src, call)
    if any(kw == name for kw, _ in items):
        return None
    text = rec.get("text") or f"{name}={rec['value']}"
    pos = int(rec.get("pos", len(items)))
    sep = rec.get("sep", ", ")
    if not items:
        close = src.span(call)[1] - 1
        return Edit(close, close, text)
    if pos < len(items):
        at = items[pos][1][0]
        return Edit(at, at, f"{text}{sep}")
    at = items[-1][1][1]
    return Edit(at, at, f"{sep}{text}")


# --------------------------------------------------------------------------------------------- hunks


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
    edits = []
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


# ------------------------------------------------------------------------------------- call locators


def kernel_calls(m: Any, k: Any) -> dict[str, list[ast.Call]]:
    """The calls of one kernel a tuning record can point at, by kind: its autotune ``Config``s, its
    launches, the ``tl.range`` calls of its loops and its ``tl.load``/``tl.store`` calls (source order)."""
    from klineage.transforms._triton import autotune_configs, loops, range_call, tl_func

    ranges = [rc for lp in loops(k.node) if (rc := range_call(lp, m.al)) is not None]
    mem = [n for n in ast.walk(k.node) if tl_func(n, m.al) in ("load", "store")]
    return {
        "config": autotune_configs(k.autotune, m.al, m.src.tree),
        "launch": [la.call for la in m.launches_of(k)],
        "range": sorted(ranges, key=lambda c: (c.lineno, c.col_offset)),
        "memory": sorted(mem, key=lambda c: (c.lineno, c.col_offset)),  # type: ignore[arg-type]
    }


def where(m: Any, k: Any, call: ast.Call) -> dict[str, Any]:
    """``{"kernel", "at", "index"}`` locating ``call`` among ``kernel_calls``."""
    for kind, calls in kernel_calls(m, k).items():
        for i, c in enumerate(calls):
            if c is call:
                return {"kernel": k.name, "at": kind, "index": i}
    raise LookupError("call not found among the kernel's calls")


def find_call(m: Any, rec: Mapping[str, Any]) -> ast.Call | None:
    """The call a ``where`` record points at in (another version of) the module, else None."""
    k = next((k for k in m.kernels if k.name == rec.get("kernel")), None)
    if k is None:
        return None
    calls = kernel_calls(m, k).get(str(rec.get("at")), [])
    i = rec.get("index")
    return calls[i] if isinstance(i, int) and 0 <= i < len(calls) else None


def restore_keywords(m: Any, name: str, sites: Sequence[Mapping[str, Any]]) -> list[Edit] | None:
    """Edits putting keyword ``name`` back at every recorded call (None: a call is not found or
    already has the keyword)."""
    edits = []
    for rec in sites:
        call = find_call(m, rec)
        e = kw_insert(m.src, call, name, rec) if call is not None else None
        if e is None:
            return None
        edits.append(e)
    return edits


def rewrite_with_hunks(op: Any, source: str, records: Any, params: dict[str, Any]) -> Any:
    """``op``'s apply-direction Rewrite putting back the recorded hunks (None: an anchor is missing)."""
    after = undo_hunks(source, records)
    return None if after is None else op._rewrite(source, after, params, "apply")
