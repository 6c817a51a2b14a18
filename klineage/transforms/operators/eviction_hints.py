"""The eviction-hints operator: ``eviction_policy=`` on loads, by how often the data is read."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, add_keyword, remove_keyword
from klineage.transforms._triton import Kernel, kwarg, pointer_param, tl_call, tl_func
from klineage.transforms.features import derived_names, pid_derived
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import anchor, has_dot
from klineage.transforms.operators._restore import kw_record, restore_keywords, where


class EvictionHints(Operator):
    """``eviction_policy`` on loads of row kernels."""

    id = "eviction-hints"
    feature = "eviction_hints"
    name = "Cache eviction hints"
    intent = "Keep data that will be re-read in L2 (evict_last) and stream single-use data (evict_first)."
    carrier = "eviction_policy= keywords on tl.load"
    anchor_predicate = "not has_dot and not eviction_hints"
    anchor_description = "vector loads in a row or elementwise kernel, some re-read in a later pass"
    record = "sites"

    def _loads(self, m: Module, k: Kernel) -> list[ast.Call]:
        vec = derived_names(k.node, m.al, "arange")
        out: list[ast.Call] = []
        for n in ast.walk(k.node):
            if tl_call(n, m.al, "load") and n.args:
                ptr = n.args[0]
                if any(isinstance(x, ast.Name) and x.id in vec for x in ast.walk(ptr)) or any(
                    tl_func(x, m.al) == "arange" for x in ast.walk(ptr)
                ):
                    out.append(n)
        return sorted(out, key=lambda c: (c.lineno, c.col_offset))

    def _detect(self, m: Module) -> list[Anchor]:
        """Loads with an eviction policy (present); vector loads of non-dot kernels without (applicable)."""
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

    def _simplify(self, m: Module) -> Rewrite | None:
        """Drop every ``eviction_policy=`` keyword."""
        edits, sites = [], []
        for k in m.kernels:
            for c in ast.walk(k.node):
                if tl_call(c, m.al, "load", "store") and (e := remove_keyword(m.src, c, "eviction_policy")):
                    edits.append(e)
                    sites.append({**where(m, k, c), **(kw_record(m.src, c, "eviction_policy") or {})})
        return self._edited(m, edits, {"sites": sites}, "simplify")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """The expert's eviction policy put back on each recorded load / store."""
        return restore_keywords(m, "eviction_policy", recorded)

    def _apply(self, m: Module) -> Rewrite | None:
        """Per pointer parameter: loads before its last load in the kernel get ``evict_last`` (they are
        read again), the last one ``evict_first``; a single load gets ``evict_first`` when it depends
        on the program id (streamed) and ``evict_last`` otherwise (shared by every program). Loads in the
        two arms of one ``if``/``else`` are one read, not a read and a re-read. With the
        ``sites`` simplify recorded, each recorded load/store gets back the expert's policy."""
        edits = []
        for k in m.kernels:
            if has_dot(k, m) or any(kwarg(c, "eviction_policy") for c in self._loads(m, k)):
                continue
            pid = pid_derived(k.node, m.al)
            by_param: dict[str, list[ast.Call]] = {}
            for c in self._loads(m, k):
                base = pointer_param(k, c.args[0])
                if base is not None:
                    by_param.setdefault(base, []).append(c)
            sides = _branch_sides(k.node)
            for calls in by_param.values():
                for i, c in enumerate(calls):
                    # loads in the two arms of one if/else (mask-elision's EVEN branches) read the data once
                    others = [d for d in calls if d is not c and not _exclusive(sides, c, d)]
                    if others:
                        later = any(d for d in calls[i + 1:] if d in others)
                        policy = "evict_last" if later else "evict_first"
                    else:
                        streamed = any(isinstance(x, ast.Name) and x.id in pid for x in ast.walk(c.args[0]))
                        policy = "evict_first" if streamed else "evict_last"
                    edits.append(add_keyword(m.src, c, f'eviction_policy="{policy}"'))
        return self._edited(m, edits, {}, "apply")


def _branch_sides(kernel: ast.FunctionDef) -> dict[int, set[tuple[int, str]]]:
    """For every node of ``kernel``: the ``if`` statements above it, each with the arm it is in."""
    sides: dict[int, set[tuple[int, str]]] = {}

    def visit(node: ast.AST, path: frozenset[tuple[int, str]]) -> None:
        sides[id(node)] = set(path)
        if isinstance(node, ast.If):
            visit(node.test, path)
            for arm, stmts in (("body", node.body), ("else", node.orelse)):
                for stmt in stmts:
                    visit(stmt, path | {(id(node), arm)})
            return
        for sub in ast.iter_child_nodes(node):
            visit(sub, path)

    visit(kernel, frozenset())
    return sides


def _exclusive(sides: dict[int, set[tuple[int, str]]], a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` sit in different arms of one ``if`` (never both run in one pass)."""
    arms = dict(sides.get(id(a), set()))
    return any(node in arms and arms[node] != arm for node, arm in sides.get(id(b), set()))

