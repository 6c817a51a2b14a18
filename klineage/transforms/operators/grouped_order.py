"""The grouped-order operator: a GROUP_SIZE_M program-id swizzle so concurrent tiles share L2."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, ClassVar

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, add_param, int_const
from klineage.transforms._triton import Kernel, kwarg, loops, tl_func, unique_name
from klineage.transforms.features import dot_loops, pid_derived
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_int
from klineage.transforms.operators._common import anchor, has_dot, int_value, param_default
from klineage.transforms.operators._restore import indexed_site_edits
from klineage.transforms.operators._statements import assign


class GroupedOrder(Operator):
    """GROUP_SIZE_M program-id swizzle for L2 reuse."""

    id = "grouped-order"
    feature = "grouped_order"
    name = "Grouped tile order"
    intent = (
        "Launch output tiles in groups of GROUP_SIZE_M rows so concurrent programs share A and B "
        "panels in L2."
    )
    carrier = "the program-id to tile mapping at the top of the kernel and the GROUP_SIZE_M constexpr"
    anchor_predicate = "has_dot and not grouped_order"
    anchor_description = "a 2-D tiled tl.dot kernel mapping program ids to tiles row-major"
    default_params: ClassVar[Mapping[str, Any]] = {"group_size": 8}
    params = (
        Param("group_size"),
        Param("group_size_m"),
    )
    record = "sites"

    def _group_params(self, m: Module, k: Kernel) -> list[str]:
        return [p for p in k.constexprs if "GROUP" in p.upper()]

    def _sites(self, m: Module, k: Kernel) -> list[tuple[str, ast.expr]]:
        out = []
        for p in self._group_params(m, k):
            out += [(p, s.node) for s in m.sites(k, p) if int_value(s) is not None]
            d = param_default(k, p)
            if int_const(d) is not None:
                out.append((p, d))  # type: ignore[arg-type]
        return out

    def _rowmajor(self, m: Module, k: Kernel) -> tuple[ast.Assign, ast.Assign] | None:
        """``x = P // Q`` and ``y = P % Q`` (same body, P from program_id), or two program_id axes."""
        derived = pid_derived(k.node, m.al)
        for body in [k.node.body] + [lp.body for lp in loops(k.node)]:
            divs: dict[tuple[str, str], ast.Assign] = {}
            mods: dict[tuple[str, str], ast.Assign] = {}
            pids: dict[int, ast.Assign] = {}
            for st in body:
                if assign(st) is None or not isinstance(st, ast.Assign):
                    continue
                v = st.value
                if (
                    isinstance(v, ast.BinOp)
                    and isinstance(v.left, ast.Name)
                    and isinstance(v.right, ast.Name)
                    and (v.left.id in derived)
                ):
                    if isinstance(v.op, ast.FloorDiv):
                        divs[(v.left.id, v.right.id)] = st
                    elif isinstance(v.op, ast.Mod):
                        mods[(v.left.id, v.right.id)] = st
                if isinstance(v, ast.Call) and tl_func(v, m.al) == "program_id":
                    axis = int_const(v.args[0]) if v.args else int_const(kwarg(v, "axis"))
                    if axis in (0, 1):
                        pids[axis] = st
            for key, st in divs.items():
                if key in mods:
                    return st, mods[key]
            if 0 in pids and 1 in pids:
                return pids[0], pids[1]
        return None

    def _detect(self, m: Module) -> list[Anchor]:
        """GROUP constexpr set above 1 (present); a row-major tile mapping in a dot kernel (applicable)."""
        out = []
        for k in m.kernels:
            if not has_dot(k, m):
                continue
            sites = self._sites(m, k)
            if any((int_const(v) or 0) > 1 for _, v in sites):
                out += [anchor("present", v, f"{p}={m.src.seg(v)} in {k.name}", k) for p, v in sites]
            elif sites:
                out += [anchor("applicable", v, f"{p}=1 in {k.name}", k) for p, v in sites]
            elif k in m.launched and self._gemm_like(m, k) and (rm := self._rowmajor(m, k)) is not None:
                out.append(anchor("applicable", rm[0], f"row-major tile order in {k.name}", k))
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Set GROUP_SIZE to 1 everywhere it is written: the swizzle degenerates to row-major order."""
        edits, sites = [], []
        for k in m.kernels:
            for j, (p, v) in enumerate(self._sites(m, k)):
                if (int_const(v) or 0) > 1:
                    edits.append(Edit(*m.src.span(v), "1"))
                    sites.append({"kernel": k.name, "index": j, "name": p, "value": m.src.seg(v)})
        return self._edited(m, edits, {"sites": sites}, "simplify")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """The expert's group size written back at each recorded site."""
        return indexed_site_edits(m, recorded, lambda k: self._sites(m, k))

    def _apply(self, m: Module, group_size: int = 8, group_size_m: int | None = None) -> Rewrite | None:
        """Raise a GROUP_SIZE of 1 to ``group_size``, or insert the swizzle in place of a row-major
        ``pid // n`` / ``pid % n`` mapping (``tl.swizzle2d`` for a 2-D grid); with the ``sites``
        simplify recorded, write back the expert's group size at each of them. ``group_size_m`` (the
        role name) is the same as ``group_size`` and wins when both are given."""
        if group_size_m is not None:
            group_size = group_size_m
        if not is_int(group_size) or group_size < 1:
            raise ValueError(f"grouped-order.apply: group size must be an int >= 1, got {group_size!r}")
        edits: list[Edit] = []
        for k in m.kernels:
            if not has_dot(k, m):
                continue
            sites = self._sites(m, k)
            if sites:
                edits += [Edit(*m.src.span(v), str(group_size)) for _, v in sites if int_const(v) == 1]
                continue
            if k not in m.launched or not self._gemm_like(m, k):
                continue
            rm = self._rowmajor(m, k)
            if rm is None:
                continue
            first, second = rm
            g = unique_name(m.src.tree, "GROUP_SIZE_M")
            tl = m.tl
            xm, xn = first.targets[0].id, second.targets[0].id  # type: ignore[attr-defined]
            indent = m.src.indent_of(first.lineno)
            if isinstance(first.value, ast.Call):  # two program_id axes
                later = max(first, second, key=lambda s: s.lineno)
                pos = m.src.line_span(later.end_lineno or later.lineno, later.end_lineno or later.lineno)[1]
                edits.append(
                    Edit(
                        pos,
                        pos,
                        f"{indent}{xm}, {xn} = {tl}.swizzle2d({xm}, {xn}, {tl}.num_programs(0), "
                        f"{tl}.num_programs(1), {g})\n",
                    )
                )
            else:
                pid = first.value.left.id  # type: ignore[attr-defined]
                q = first.value.right.id  # type: ignore[attr-defined]
                names = {
                    b: unique_name(m.src.tree, b)
                    for b in ("num_pid_in_group", "group_id", "first_pid_m", "group_size_m", "num_pid_m")
                }
                npm = self._num_pid_m(m, k, q)
                pre = ""
                if npm is None:
                    npm = names["num_pid_m"]
                    pre = f"{indent}{npm} = {tl}.num_programs(0) // {q}\n"
                block = (
                    pre + f"{indent}{names['num_pid_in_group']} = {g} * {q}\n"
                    f"{indent}{names['group_id']} = {pid} // {names['num_pid_in_group']}\n"
                    f"{indent}{names['first_pid_m']} = {names['group_id']} * {g}\n"
                    f"{indent}{names['group_size_m']} = min({npm} - {names['first_pid_m']}, {g})\n"
                    f"{indent}{xm} = {names['first_pid_m']} + ({pid} % {names['group_size_m']})\n"
                    f"{indent}{xn} = ({pid} % {names['num_pid_in_group']}) // {names['group_size_m']}\n"
                )
                a = m.src.line_span(first.lineno, first.end_lineno or first.lineno)
                b = m.src.line_span(second.lineno, second.end_lineno or second.lineno)
                if b[0] == a[1]:
                    edits.append(Edit(a[0], b[1], block))
                else:
                    edits += [Edit(a[0], a[1], block), Edit(b[0], b[1], "")]
            edits.append(add_param(m.src, k.node, f"{g}: {tl}.constexpr = {group_size}"))
        return self._edited(m, edits, {"group_size": group_size}, "apply")

    @staticmethod
    def _gemm_like(m: Module, k: Kernel) -> bool:
        return bool(dot_loops(k, m.al)) and sum(1 for n in ast.walk(k.node) if tl_func(n, m.al) == "dot") == 1

    @staticmethod
    def _num_pid_m(m: Module, k: Kernel, q: str) -> str | None:
        cdivs = [
            st.targets[0].id
            for st in k.node.body
            if isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and tl_func(st.value, m.al) == "cdiv"
        ]
        others = [c for c in cdivs if c != q]
        return others[0] if len(others) == 1 and q in cdivs else None
