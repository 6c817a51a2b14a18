"""The mask-elision operator: unmasked loads when the tile divides the extent (``EVEN_X`` flags).

A mask ``index < N`` goes only where divisibility makes it a tile boundary: the index is a whole tile
(``tl.arange(0, BLOCK)``) offset by multiples of it that stay inside ``N`` — the variables of loops written
over ``N`` (``range(0, N, BLOCK)``), program ids (the grid is taken to be over ``N``), or a loop stopping at
the program's own tile start (causal attention's keys before the diagonal). An offset from a loop over another
extent (a split's ``range(0, CHUNK, BLOCK)``) keeps its mask: ``N % BLOCK == 0`` does not keep it in bounds.
"""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import (
    Edit,
    add_param,
    append_item,
    dict_items,
    param_spans,
    reindent,
    remove_items,
    remove_keywords,
    str_const,
)
from klineage.transforms._triton import (
    Kernel,
    kwarg,
    launch_args,
    loops,
    range_call,
    single_value,
    tl_call,
    unique_name,
)
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import anchor, merge_appends
from klineage.transforms.operators._statements import block_text, replace_stmt_with


def _divisibility_test(node: ast.AST) -> bool:
    """True for a test that a size fits the tile: ``a % b == 0`` or ``a == b`` (not ``a <= LIMIT``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return True
    return isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq))


class MaskElision(Operator):
    """Unmasked loads when the shape divides the tile (EVEN_K style)."""

    id = "mask-elision"
    feature = "mask_elision"
    name = "Elide boundary masks on divisible shapes"
    intent = (
        "Skip boundary masks when the problem size is a multiple of the tile, selected by a constexpr flag."
    )
    carrier = "a @triton.heuristics divisibility flag and an if/else between unmasked and masked loads"
    anchor_predicate = "uses_mask and n_loops >= 1 and not mask_elision"
    anchor_description = "masked loads inside a loop whose mask only guards the tile boundary"
    record = "code"

    def _flags(self, m: Module, k: Kernel) -> list[str]:
        """Constexpr params set from a divisibility/equality test and used as an ``if`` test."""
        from_test: set[str] = set()
        if k.heuristics is not None and k.heuristics.args and isinstance(k.heuristics.args[0], ast.Dict):
            for key, v in zip(k.heuristics.args[0].keys, k.heuristics.args[0].values, strict=True):
                if str_const(key) and any(_divisibility_test(n) for n in ast.walk(v)):
                    from_test.add(str_const(key))  # type: ignore[arg-type]
        for la in m.launches_of(k):
            for p, v in launch_args(la, k).items():
                v = single_value(la.func, v.id) or v if isinstance(v, ast.Name) else v
                if _divisibility_test(v):
                    from_test.add(p)
        used = set()
        for n in ast.walk(k.node):
            if isinstance(n, ast.If):
                t = (
                    n.test.operand
                    if isinstance(n.test, ast.UnaryOp) and isinstance(n.test.op, ast.Not)
                    else n.test
                )
                if isinstance(t, ast.Name):
                    used.add(t.id)
        return [p for p in k.constexprs if p in from_test and p in used]

    def _ifs(self, m: Module, k: Kernel, flag: str) -> list[tuple[ast.If, bool]]:
        out = []
        for n in ast.walk(k.node):
            if isinstance(n, ast.If):
                neg = isinstance(n.test, ast.UnaryOp) and isinstance(n.test.op, ast.Not)
                t = n.test.operand if neg else n.test  # type: ignore[attr-defined]
                if isinstance(t, ast.Name) and t.id == flag:
                    out.append((n, neg))
        return out

    def _candidates(self, m: Module, k: Kernel) -> list[tuple[ast.stmt, ast.Call, list[tuple[str, str]]]]:
        out: list[tuple[ast.stmt, ast.Call, list[tuple[str, str]]]] = []
        runtime = {p.name for p in k.params if not p.constexpr}
        assigns = {
            st.targets[0].id: st.value
            for st in ast.walk(k.node)
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
        }

        def blocks(expr: ast.AST, depth: int = 0) -> set[str]:
            found: set[str] = set()
            for n in ast.walk(expr):
                if tl_call(n, m.al, "arange") and len(n.args) == 2 and isinstance(n.args[1], ast.Name):
                    found.add(n.args[1].id)
                elif isinstance(n, ast.Name) and n.id in assigns and depth < 6:
                    found |= blocks(assigns[n.id], depth + 1)
            return found

        for lp in loops(k.node):
            for st in lp.body:
                if not isinstance(st, ast.Assign):
                    continue
                calls = [c for c in ast.walk(st.value) if tl_call(c, m.al, "load")]
                if len(calls) != 1:
                    continue
                call = calls[0]
                mask = kwarg(call, "mask")
                if mask is None or len(call.args) > 1:
                    continue
                pairs: list[tuple[str, str]] = []
                ok = True
                terms = [mask]
                while terms:
                    t = terms.pop()
                    if isinstance(t, ast.BinOp) and isinstance(t.op, ast.BitAnd):
                        terms += [t.left, t.right]
                        continue
                    if isinstance(t, ast.Name) and t.id in assigns:
                        terms.append(assigns[t.id])
                        continue
                    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Lt)):
                        ok = False
                        break
                    bs = blocks(t.left)
                    sizes = sorted(
                        {n.id for n in ast.walk(t.comparators[0]) if isinstance(n, ast.Name)} & runtime
                    )
                    if len(bs) != 1 or len(sizes) != 1:
                        ok = False
                        break
                    block = bs.pop()
                    if not self._tiles_the_extent(m, k, st, t.left, sizes[0], assigns):
                        ok = False
                        break
                    pairs.append((sizes[0], block))
                if ok and pairs:
                    out.append((st, call, sorted(set(pairs))))
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """Divisibility flags selecting a branch (present); masked loop loads (applicable)."""
        out = []
        for k in m.kernels:
            for f in self._flags(m, k):
                out += [anchor("present", n, f"branch on {f} in {k.name}", k) for n, _ in self._ifs(m, k, f)]
        if not out:
            for k in m.launched:
                out += [
                    anchor("applicable", st, f"masked load in a loop of {k.name}", k)
                    for st, _, _ in self._candidates(m, k)
                ]
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Keep only the general (masked) branch of every flag test and remove the flag (parameter,
        heuristic entry or launch keyword)."""
        edits: list[Edit] = []
        for k in m.kernels:
            flags = self._flags(m, k)
            if not flags:
                continue
            for f in flags:
                for n, neg in self._ifs(m, k, f):
                    edits.append(replace_stmt_with(m, n, n.body if neg else n.orelse))
            for la in m.launches_of(k):  # one removal per call: neighbouring keywords share a comma
                passed = {kw.arg for kw in la.call.keywords if kw.arg is not None} & set(flags)
                if passed:
                    edits += remove_keywords(m.src, la.call, passed)
            names = [p.name for p in k.params]
            edits += remove_items(m.src, param_spans(m.src, k.node), {names.index(f) for f in flags})
            if k.heuristics is not None and isinstance(k.heuristics.args[0], ast.Dict):
                items = dict_items(m.src, k.heuristics.args[0])
                drop = {i for i, (key, _) in enumerate(items) if str_const(key) in flags}
                if len(drop) == len(items):
                    h = k.heuristics
                    edits.append(Edit(*m.src.line_span(h.lineno, h.end_lineno or h.lineno), ""))
                else:
                    edits += remove_items(m.src, [sp for _, sp in items], drop)
        return self._removed(m, edits)

    @staticmethod
    def _tiles_the_extent(m: Module, k: Kernel, stmt: ast.stmt, index: ast.expr, size: str,
                          assigns: dict[str, ast.expr]) -> bool:
        """Whether ``index < size`` can only be false past the extent's last whole tile when ``size`` divides
        by the tile: every loop variable the index is built from (through the kernel's locals) belongs to a
        loop whose range is written over ``size`` itself (``range(0, N, BLOCK)``, ``range(tl.cdiv(K,
        BLOCK_K))``) or stops at the program's own tile start (``range(0, start_m * BLOCK_M, BLOCK_N)``: causal
        attention's keys before the diagonal). A loop over another extent keeps the mask: a split's
        ``start = pid * CHUNK`` plus a loop ``range(0, CHUNK, BLOCK)`` reads past ``N`` on its last split whenever
        N is a multiple of BLOCK but not of CHUNK (offsets from program ids alone are taken to follow a grid over
        the extent)."""
        constexprs = set(k.constexprs)

        def program_start(expr: ast.AST, depth: int = 0) -> bool | None:
            """True for a product (or floor quotient) of a program id and constants: the start of this
            program's own tile, inside the extent when the grid is over it (causal attention's off-diagonal
            loop stops there); None for a factor with no program id, False for anything else."""
            if tl_call(expr, m.al, "program_id"):
                return True
            if isinstance(expr, ast.Constant) and isinstance(expr.value, int):
                return None
            if isinstance(expr, ast.Name):
                if expr.id in constexprs:
                    return None
                value = assigns.get(expr.id)
                return program_start(value, depth + 1) is True if value is not None and depth < 6 else False
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult | ast.FloorDiv):
                sides = (program_start(expr.left, depth), program_start(expr.right, depth))
                if False in sides:
                    return False
                return True if True in sides else None
            return False

        loop_vars: dict[str, bool] = {}  # loop variable -> whether its range is written over ``size``
        for lp in loops(k.node):
            if isinstance(lp, ast.For) and any(n is stmt for n in ast.walk(lp)):  # the loops around the load
                rc = range_call(lp, m.al)
                over = rc is not None and (
                    size in {n.id for a in rc.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                    or program_start(rc.args[1] if len(rc.args) >= 2 else rc.args[0]) is True)
                for t in ast.walk(lp.target):
                    if isinstance(t, ast.Name):
                        loop_vars[t.id] = loop_vars.get(t.id, True) and over
        seen: set[str] = set()
        todo: list[ast.AST] = [index]
        while todo:
            for n in ast.walk(todo.pop()):
                if not isinstance(n, ast.Name) or n.id in seen:
                    continue
                seen.add(n.id)
                if n.id in loop_vars and not loop_vars[n.id]:
                    return False
                if n.id in assigns and n.id not in loop_vars:
                    todo.append(assigns[n.id])
        return True

    def _apply(self, m: Module) -> Rewrite | None:
        """Wrap masked loads in loops as ``if EVEN_X: unmasked else: masked`` with
        ``@triton.heuristics({"EVEN_X": lambda args: args["X"] % args["BLOCK"] == 0 ...})``.
        With the ``code`` simplify recorded, the expert's construct goes back exactly as written."""
        edits: list[Edit] = []
        for k in m.launched:
            if self._flags(m, k):
                continue
            cands = self._candidates(m, k)
            if not cands:
                continue
            conds: dict[tuple[tuple[str, str], ...], str] = {}
            for st, call, pairs in cands:
                key = tuple(pairs)
                if key not in conds:
                    conds[key] = unique_name(m.src.tree, "EVEN_" + "_".join(s.upper() for s, _ in pairs))
                flag = conds[key]
                indent = m.src.indent_of(st.lineno)
                masked = block_text(m, [st], indent + "    ")
                # unmasked copy: drop mask/other from the load (spans relative to the statement)
                s0 = m.src.line_span(st.lineno, st.lineno)[0]
                drops = remove_keywords(m.src, call, {"mask", "other"})
                stmt_text = m.src.text[
                    s0 : m.src.line_span(st.end_lineno or st.lineno, st.end_lineno or st.lineno)[1]
                ]
                for e in sorted(drops, key=lambda e: e.start, reverse=True):
                    stmt_text = stmt_text[: e.start - s0] + e.text + stmt_text[e.end - s0 :]
                unmasked = reindent(stmt_text, indent, indent + "    ")
                edits.append(
                    Edit(
                        *m.src.line_span(st.lineno, st.end_lineno or st.lineno),
                        f"{indent}if {flag}:\n{unmasked}{indent}else:\n{masked}",
                    )
                )
            entries = []
            for key, flag in conds.items():
                test = " and ".join(f'args["{s}"] % args["{b}"] == 0' for s, b in key)
                entries.append(f'"{flag}": lambda args: {test}')
            indent = m.src.indent_of(k.node.lineno)
            if k.heuristics is not None and k.heuristics.args and isinstance(k.heuristics.args[0], ast.Dict):
                d = k.heuristics.args[0]

                edits.append(
                    append_item(
                        m.src,
                        [sp for _, sp in dict_items(m.src, d)],
                        m.src.span(d)[1] - 1,
                        ", ".join(entries),
                    )
                )
            else:
                pos = m.src.line_span(k.jit.lineno, k.jit.lineno)[0]
                edits.append(Edit(pos, pos, f"{indent}@{m.triton}.heuristics({{{', '.join(entries)}}})\n"))
            for flag in conds.values():
                edits.append(add_param(m.src, k.node, f"{flag}: {m.tl}.constexpr"))
        return self._edited(m, merge_appends(edits), {}, "apply")
