"""Hint operators: contiguity-hints, eviction-hints, int64-offsets.

They wrap or unwrap expressions in place (``tl.multiple_of``, ``eviction_policy=``, ``.to(tl.int64)``)
and never change what is computed, only what the compiler may assume or how caches treat the data.
"""

from __future__ import annotations

import ast
from typing import Any

from klineage.transforms._source import Edit, add_keyword, apply_edits, remove_keyword, str_const
from klineage.transforms._triton import Kernel, is_tl_attr, kwarg, tl_func
from klineage.transforms.features import derived_names, pid_derived
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import Module, anchor, has_dot, parse
from klineage.transforms.operators._restore import (
    check_params,
    hunks,
    kw_record,
    require_list,
    restore_keywords,
    rewrite_with_hunks,
    where,
)

_HINTS = ("multiple_of", "max_contiguous")



def _stmt_of(m: Module, node: ast.AST) -> ast.AST | None:
    cur = m.src.parent(node)
    while cur is not None and not isinstance(cur, ast.stmt):
        cur = m.src.parent(cur)
    return cur


class ContiguityHints(Operator):
    """``tl.multiple_of`` / ``tl.max_contiguous`` on block offsets."""

    id = "contiguity-hints"
    name = "Contiguity and alignment hints"
    intent = "Tell the compiler that block offsets are contiguous and aligned so loads and stores vectorize."
    carrier = "offset expressions wrapped in tl.max_contiguous(tl.multiple_of(..., B), B)"
    anchor_predicate = "n_kernels >= 1 and not contiguity_hints"
    anchor_description = "an offset vector pid * BLOCK + tl.arange(0, BLOCK) used for loads/stores"

    def _hint_calls(self, m: Module) -> list[ast.Call]:
        """Outermost hint calls."""
        out = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if tl_func(n, m.al) in _HINTS and tl_func(m.src.parent(n), m.al) not in _HINTS:
                    out.append(n)
        return out  # type: ignore[return-value]

    def _candidates(self, m: Module) -> list[tuple[Kernel, ast.Assign, str]]:
        out = []
        for k in m.kernels:
            for st in ast.walk(k.node):
                if not (
                    isinstance(st, ast.Assign)
                    and len(st.targets) == 1
                    and isinstance(st.targets[0], ast.Name)
                ):
                    continue
                v = st.value
                if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add)):
                    continue
                for mul, ar in ((v.left, v.right), (v.right, v.left)):
                    if (
                        tl_func(ar, m.al) == "arange"
                        and len(ar.args) == 2
                        and isinstance(mul, ast.BinOp)
                        and isinstance(mul.op, ast.Mult)
                    ):  # type: ignore[attr-defined]
                        block = m.src.seg(ar.args[1])  # type: ignore[attr-defined]
                        if block in (m.src.seg(mul.left), m.src.seg(mul.right)):
                            out.append((k, st, block))
        return out

    def detect(self, source: str) -> list[Anchor]:
        """Hint calls (present); ``pid * B + tl.arange(0, B)`` offsets without hints (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = [anchor("present", c, f"{tl_func(c, m.al)} hint", None) for c in self._hint_calls(m)]
        out += [
            anchor("applicable", st, f"block offsets {st.targets[0].id} in {k.name}", k)  # type: ignore
            for k, st, _ in self._candidates(m)
        ]
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Unwrap every hint; a statement reduced to ``x = x`` is deleted."""
        m = parse(source)
        if m is None:
            return None
        edits = []
        for call in self._hint_calls(m):
            inner: ast.expr = call
            while tl_func(inner, m.al) in _HINTS and inner.args:  # type: ignore[attr-defined]
                inner = inner.args[0]  # type: ignore[attr-defined]
            parent = m.src.parent(call)
            if (
                isinstance(parent, ast.Assign)
                and len(parent.targets) == 1
                and isinstance(inner, ast.Name)
                and isinstance(parent.targets[0], ast.Name)
                and parent.targets[0].id == inner.id
            ):
                edits.append(Edit(*m.src.line_span(parent.lineno, parent.end_lineno or parent.lineno), ""))
            else:
                edits.append(Edit(*m.src.span(call), m.src.seg(inner)))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"hints": hunks(source, edits)}, "simplify")

    def apply(self, source: str, hints: list[dict[str, Any]] | None = None, **params: Any) -> Rewrite | None:
        """Wrap ``pid * B + tl.arange(0, B)`` offsets in ``tl.max_contiguous(tl.multiple_of(..., B), B)``;
        with the ``hints`` simplify recorded, put back the expert's hint calls and statements where
        they were (they may sit on other offsets than the ones this rule would pick)."""
        check_params(self.id, params, ())
        if require_list(self.id, "hints", hints) is not None:
            return rewrite_with_hunks(self, source, hints, {"hints": hints})
        m = parse(source)
        if m is None:
            return None
        tl = m.tl
        edits = [
            Edit(
                *m.src.span(st.value),
                f"{tl}.max_contiguous({tl}.multiple_of({m.src.seg(st.value)}, {b}), {b})",
            )
            for _, st, b in self._candidates(m)
        ]
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {}, "apply")


def _base_param(m: Module, k: Kernel, ptr: ast.expr) -> str | None:
    """The pointer parameter a pointer expression starts from (following local assignments)."""
    params = {p.name for p in k.params}
    assigns = {
        st.targets[0].id: st.value
        for st in ast.walk(k.node)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
    }
    node: ast.AST = ptr
    for _ in range(8):
        while isinstance(node, ast.BinOp):
            node = node.left
        if isinstance(node, ast.Name):
            if node.id in params:
                return node.id
            if node.id in assigns:
                node = assigns[node.id]
                continue
        return None
    return None


class EvictionHints(Operator):
    """``eviction_policy`` on loads of row kernels."""

    id = "eviction-hints"
    name = "Cache eviction hints"
    intent = "Keep data that will be re-read in L2 (evict_last) and stream single-use data (evict_first)."
    carrier = "eviction_policy= keywords on tl.load"
    anchor_predicate = "not has_dot and not eviction_hints"
    anchor_description = "vector loads in a row or elementwise kernel, some re-read in a later pass"

    def _loads(self, m: Module, k: Kernel) -> list[ast.Call]:
        vec = derived_names(k.node, m.al, "arange")
        out = []
        for n in ast.walk(k.node):
            if tl_func(n, m.al) == "load" and n.args:  # type: ignore[attr-defined]
                ptr = n.args[0]  # type: ignore[attr-defined]
                if any(isinstance(x, ast.Name) and x.id in vec for x in ast.walk(ptr)) or any(
                    tl_func(x, m.al) == "arange" for x in ast.walk(ptr)
                ):
                    out.append(n)
        return sorted(out, key=lambda c: (c.lineno, c.col_offset))  # type: ignore[return-value]

    def detect(self, source: str) -> list[Anchor]:
        """Loads with an eviction policy (present); vector loads of non-dot kernels without (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k in m.kernels:
            for c in ast.walk(k.node):
                if tl_func(c, m.al) in ("load", "store") and kwarg(c, "eviction_policy") is not None:  # type: ignore
                    out.append(anchor("present", c, f"eviction_policy in {k.name}", k))
        if not out:
            for k in m.kernels:
                if not has_dot(k, m):
                    out += [anchor("applicable", c, f"vector load in {k.name}", k) for c in self._loads(m, k)]
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Drop every ``eviction_policy=`` keyword."""
        m = parse(source)
        if m is None:
            return None
        edits, sites = [], []
        for k in m.kernels:
            for c in ast.walk(k.node):
                if tl_func(c, m.al) in ("load", "store") and (e := remove_keyword(m.src, c, "eviction_policy")):
                    edits.append(e)
                    sites.append({**where(m, k, c), **(kw_record(m.src, c, "eviction_policy") or {})})  # type: ignore
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "simplify")

    def apply(self, source: str, sites: list[dict[str, Any]] | None = None, **params: Any) -> Rewrite | None:
        """Per pointer parameter: loads before its last load in the kernel get ``evict_last`` (they are
        read again), the last one ``evict_first``; a single load gets ``evict_first`` when it depends
        on the program id (streamed) and ``evict_last`` otherwise (shared by every program). With the
        ``sites`` simplify recorded, each recorded load/store gets back the expert's policy."""
        check_params(self.id, params, ())
        m = parse(source)
        if m is None:
            return None
        if require_list(self.id, "sites", sites) is not None:
            redo = restore_keywords(m, "eviction_policy", sites)  # type: ignore[arg-type]
            if redo is None:
                return None
            return self._rewrite(source, apply_edits(source, redo), {"sites": sites}, "apply")
        edits = []
        for k in m.kernels:
            if has_dot(k, m) or any(kwarg(c, "eviction_policy") for c in self._loads(m, k)):
                continue
            pid = pid_derived(k.node, m.al)
            by_param: dict[str, list[ast.Call]] = {}
            for c in self._loads(m, k):
                base = _base_param(m, k, c.args[0])
                if base is not None:
                    by_param.setdefault(base, []).append(c)
            for calls in by_param.values():
                for i, c in enumerate(calls):
                    if len(calls) > 1:
                        policy = "evict_last" if i < len(calls) - 1 else "evict_first"
                    else:
                        streamed = any(isinstance(x, ast.Name) and x.id in pid for x in ast.walk(c.args[0]))
                        policy = "evict_first" if streamed else "evict_last"
                    edits.append(add_keyword(m.src, c, f'eviction_policy="{policy}"'))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {}, "apply")


class Int64Offsets(Operator):
    """64-bit row offsets."""

    id = "int64-offsets"
    name = "64-bit offsets"
    intent = "Compute row offsets in 64 bits so rows x stride beyond 2^31 elements do not overflow."
    carrier = "program-id derived indices cast with .to(tl.int64) before multiplying by a stride"
    anchor_predicate = "n_kernels >= 1 and not int64_offsets"
    anchor_description = "a program-id derived index multiplied by a stride or size parameter"

    def _casts(self, m: Module) -> list[tuple[ast.Call, ast.expr]]:
        out = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "to"
                    and n.args
                    and is_tl_attr(n.args[0], m.al, "int64")
                ):
                    out.append((n, n.func.value))
                elif tl_func(n, m.al) == "cast" and len(n.args) >= 2 and is_tl_attr(n.args[1], m.al, "int64"):  # type: ignore
                    out.append((n, n.args[0]))  # type: ignore[attr-defined]
        return out

    def _candidates(self, m: Module) -> list[tuple[Kernel, ast.expr]]:
        out = []
        for k in m.kernels:
            # An index comes from the program id and never from loaded data: casting a loaded value
            # (``x * scale`` with x = tl.load(...)) would truncate it (seen on heldout/scaled_softmax).
            pid = pid_derived(k.node, m.al) - pid_derived(k.node, m.al, "load")
            runtime = {p.name for p in k.params if not p.constexpr}
            for n in ast.walk(k.node):
                if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)):
                    continue
                for idx, other in ((n.left, n.right), (n.right, n.left)):
                    base = idx.value if isinstance(idx, ast.Subscript) else idx
                    if (
                        isinstance(base, ast.Name)
                        and base.id in pid
                        and isinstance(other, ast.Name)
                        and other.id in runtime
                    ):
                        out.append((k, idx))
                        break
        return out

    def detect(self, source: str) -> list[Anchor]:
        """int64 casts (present); pid-derived index x runtime stride products (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = [anchor("present", c, "cast to tl.int64") for c, _ in self._casts(m)]
        if not out:
            out = [
                anchor("applicable", e, f"32-bit index {m.src.seg(e)} times a stride", k)
                for k, e in self._candidates(m)
            ]
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Remove every cast to tl.int64 (32-bit offsets)."""
        m = parse(source)
        if m is None:
            return None
        casts = self._casts(m)
        inner_ids = {id(x) for c, _ in casts for x in ast.walk(c) if x is not c}
        edits = [Edit(*m.src.span(c), m.src.seg(e)) for c, e in casts if id(c) not in inner_ids]
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"casts": hunks(source, edits)}, "simplify")

    def apply(self, source: str, casts: list[dict[str, Any]] | None = None, **params: Any) -> Rewrite | None:
        """Cast the pid-derived index of every ``index * stride`` product to tl.int64; with the
        ``casts`` simplify recorded, put back the expert's casts (where and how they were written)."""
        check_params(self.id, params, ())
        if require_list(self.id, "casts", casts) is not None:
            return rewrite_with_hunks(self, source, casts, {"casts": casts})
        m = parse(source)
        if m is None or self._casts(m):
            return None
        seen: set[int] = set()
        edits = []
        for _, e in self._candidates(m):
            if id(e) in seen:
                continue
            seen.add(id(e))
            edits.append(Edit(*m.src.span(e), f"{m.tl}.cast({m.src.seg(e)}, {m.tl}.int64)"))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {}, "apply")


_ = str_const
