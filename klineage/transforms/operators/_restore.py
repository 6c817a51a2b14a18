"""What ``simplify`` removed, recorded so that ``apply(source, **params)`` can put back exactly that.

Three kinds of records, all JSON-serialisable (str/int/list/dict):

- keyword records ``{"value": "8", "pos": 3, "sep": ", "}``: a keyword argument (``num_warps=8``,
  ``eviction_policy="evict_first"``) that was the ``pos``-th argument of its call, with the separator
  that joined it to its neighbour (so a multi-line call keeps its layout);
- site lists: the values that were written at a tunable's sites, in the order the operator finds
  those sites (unchanged by the rewrite, which only changes the values);
- hunks (``klineage.transforms._hunks``): a piece of code the rewrite replaced, anchored by the lines
  of the simplified source that hold its replacement. Structural operators (mask elision, online
  softmax, causal skip, autotune) record the constructs they removed this way: the expert's code is
  the choice they undo; ``Operator.apply`` puts them back.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, Src, call_items
from klineage.transforms._triton import Kernel, autotune_configs, loops, range_call, tl_func

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


# ------------------------------------------------------------------------------------- call locators


def kernel_calls(m: Module, k: Kernel) -> dict[str, list[ast.Call]]:
    """The calls of one kernel a tuning record can point at, by kind: its autotune ``Config``s, its
    launches, the ``tl.range`` calls of its loops and its ``tl.load``/``tl.store`` calls (source order)."""
    ranges = [rc for lp in loops(k.node) if (rc := range_call(lp, m.al)) is not None]
    mem = [n for n in ast.walk(k.node) if tl_func(n, m.al) in ("load", "store")]
    return {
        "config": autotune_configs(k.autotune, m.al, m.src.tree),
        "launch": [la.call for la in m.launches_of(k)],
        "range": sorted(ranges, key=lambda c: (c.lineno, c.col_offset)),
        "memory": sorted(mem, key=lambda c: (c.lineno, c.col_offset)),  # type: ignore[arg-type]
    }


def where(m: Module, k: Kernel, call: ast.Call) -> dict[str, Any]:
    """``{"kernel", "at", "index"}`` locating ``call`` among ``kernel_calls``."""
    for kind, calls in kernel_calls(m, k).items():
        for i, c in enumerate(calls):
            if c is call:
                return {"kernel": k.name, "at": kind, "index": i}
    raise LookupError("call not found among the kernel's calls")


def find_call(m: Module, rec: Mapping[str, Any]) -> ast.Call | None:
    """The call a ``where`` record points at in (another version of) the module, else None."""
    k = m.kernel(rec.get("kernel"))
    if k is None:
        return None
    calls = kernel_calls(m, k).get(str(rec.get("at")), [])
    i = rec.get("index")
    return calls[i] if isinstance(i, int) and 0 <= i < len(calls) else None


def restore_keywords(m: Module, name: str, sites: Sequence[Mapping[str, Any]]) -> list[Edit] | None:
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


def indexed_site_edits(
    m: Module, recorded: Sequence[Mapping[str, Any]], sites_of: Callable[[Kernel], list[tuple[str, ast.expr]]]
) -> list[Edit] | None:
    """Edits writing back records ``{"kernel", "index", "name", "value"}``: the ``index``-th of
    ``sites_of(kernel)`` (``(parameter name, value node)`` in the order simplify numbered them) gets
    ``value``. None when a kernel or site is missing or names another parameter."""
    edits = []
    for rec in recorded:
        k = m.kernel(rec.get("kernel"))
        ks = sites_of(k) if k is not None else []
        j = rec.get("index")
        if not isinstance(j, int) or not 0 <= j < len(ks) or ks[j][0] != rec.get("name"):
            return None
        edits.append(Edit(*m.src.span(ks[j][1]), str(rec["value"])))
    return list(dict.fromkeys(edits))
