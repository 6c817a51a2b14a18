"""The multi-row operator: several short rows per program, as one 2-D [ROWS, BLOCK] tile."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import (
    Edit,
)
from klineage.transforms._triton import (
    Kernel,
    Launch,
    arange_blocks,
    launch_args,
    single_value,
    tl_call,
)
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite
from klineage.transforms.operators._common import anchor, has_dot
from klineage.transforms.operators._restore import indexed_site_edits


class MultiRow(Operator):
    """Several rows per program (2-D tile) for short rows."""

    id = "multi-row"
    feature = "multi_row"
    name = "Several rows per program"
    intent = "Pack several short rows into one 2-D tile per program so each program moves enough data."
    carrier = "the rows-per-program constexpr (a 2-D [ROWS, BLOCK] tile) set from the row width at launch"
    anchor_predicate = "row_reduction and not multi_row"
    anchor_description = "a row kernel written over a 2-D [ROWS, BLOCK] tile"
    params = (Param("tile_elems"),)
    record = "sites"

    def _row_params(self, m: Module, k: Kernel) -> list[str]:
        """arange blocks used as the leading (row) axis: ``x[:, None]`` of a name derived from them."""
        if has_dot(k, m):
            return []
        out = []
        assigns: dict[str, ast.AST] = {}
        for st in ast.walk(k.node):
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                prev = assigns.get(st.targets[0].id)
                assigns[st.targets[0].id] = st.value if prev is None else ast.Tuple([prev, st.value])  # type: ignore
        blocks = arange_blocks(k, m.al)
        closure: dict[str, set[str]] = {}
        for p in blocks:
            names = {
                n
                for n, v in assigns.items()
                if any(
                    tl_call(c, m.al, "arange")
                    and len(c.args) == 2
                    and isinstance(c.args[1], ast.Name)
                    and c.args[1].id == p
                    for c in ast.walk(v)
                )
            }
            while True:
                grown = names | {
                    n
                    for n, v in assigns.items()
                    if any(isinstance(x, ast.Name) and x.id in names for x in ast.walk(v))
                }
                if grown == names:
                    break
                names = grown
            closure[p] = names
        for p in blocks:
            names = closure[p] - set().union(*[closure[q] for q in blocks if q != p])
            for n in ast.walk(k.node):
                if (
                    isinstance(n, ast.Subscript)
                    and isinstance(n.value, ast.Name)
                    and n.value.id in names
                    and isinstance(n.slice, ast.Tuple)
                    and len(n.slice.elts) == 2
                    and isinstance(n.slice.elts[0], ast.Slice)
                    and isinstance(n.slice.elts[1], ast.Constant)
                ):
                    out.append(p)
                    break
        return out

    def _sites(self, m: Module, k: Kernel) -> list[tuple[Launch, str, ast.expr]]:
        out = []
        for p in self._row_params(m, k):
            for la in m.launches_of(k):
                v = launch_args(la, k).get(p)
                if v is None:
                    continue
                if isinstance(v, ast.Name):
                    v = single_value(la.func, v.id) or v
                out.append((la, p, v))
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """More than one row per program (present) or exactly one in a 2-D tile kernel (applicable)."""
        out = []
        for k in m.kernels:
            for la, p, v in self._sites(m, k):
                one = isinstance(v, ast.Constant) and v.value == 1
                if one and self._column_block(m, k, la, p, v) is None:
                    continue  # one row per program, but apply could not size the rows from the columns
                kind = "applicable" if one else "present"
                out.append(anchor(kind, v, f"{p} = {m.src.seg(v)} rows per program in {k.name}", k))
        return out

    @staticmethod
    def _column_block(m: Any, k: Any, la: Any, p: str, v: ast.expr) -> ast.expr | None:
        """The launch argument of the kernel's one column block, when rows per program can be sized
        from it at ``v`` (it is bound there); None otherwise."""
        cols = [q for q in arange_blocks(k, m.al) if q != p]
        args = launch_args(la, k)
        if len(cols) != 1 or cols[0] not in args:
            return None
        block = args[cols[0]]
        if _assigned_after(la.func, block, v.lineno):
            # computed after rows-per-program: use the expression it is computed from, if that is bound
            value = single_value(la.func, block.id) if isinstance(block, ast.Name) else None
            if value is None or _assigned_after(la.func, value, v.lineno):
                return None
            return value
        return block

    def _simplify(self, m: Module) -> Rewrite | None:
        """One row per program: the rows-per-program value becomes 1."""
        edits: set[Edit] = set()
        sites = []
        for k in m.kernels:
            for j, (_, p, v) in enumerate(self._sites(m, k)):
                if isinstance(v, ast.Constant) and v.value == 1:
                    continue
                e = Edit(*m.src.span(v), "1")
                if e not in edits:
                    edits.add(e)
                    sites.append({"kernel": k.name, "index": j, "name": p, "value": m.src.seg(v)})
        return self._edited(m, edits, {"sites": sites}, "simplify")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """The expert's rows-per-program expression written back at each recorded site."""
        return indexed_site_edits(m, recorded, lambda k: [(p, v) for _la, p, v in self._sites(m, k)])

    def _apply(self, m: Module, tile_elems: int = 4096) -> Rewrite | None:
        """Rows per program = ``max(1, min(tile_elems // BLOCK, 16))`` where it is 1; with the
        ``sites`` simplify recorded, the expert's rows-per-program expression where it was."""
        edits = set()
        for k in m.kernels:
            for la, p, v in self._sites(m, k):
                if not (isinstance(v, ast.Constant) and v.value == 1):
                    continue
                block = self._column_block(m, k, la, p, v)
                if block is None:
                    continue
                edits.add(Edit(*m.src.span(v), f"max(1, min({tile_elems} // {m.src.seg(block)}, 16))"))
        return self._edited(m, edits, {"tile_elems": tile_elems}, "apply")


def _assigned_after(func: ast.AST | None, expr: ast.expr, line: int) -> bool:
    """True when a name used in ``expr`` is assigned in ``func`` after ``line`` (so not yet bound there)."""
    if func is None:
        return False
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.lineno > line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in names for tgt in targets for t in ast.walk(tgt)):
                return True
    return False
