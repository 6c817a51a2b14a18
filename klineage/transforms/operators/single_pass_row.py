"""The single-pass-row operator: rows that fit are held whole in registers and read
once; longer rows keep the column-looped kernel).

``simplify`` takes the host dispatch ``if next_power_of_2(n_cols) <= SINGLE_PASS_MAX: <single-pass
launch> else: <looped launch>`` down to its looped branch and deletes what only the single-pass
branch used (its kernel, its constants and helpers, host locals), so every row takes the looped
kernel. ``apply`` adds the dispatch to a column-looped row kernel: the single-pass kernel is a copy
of the looped one with the column loops unrolled (the launch sets the column block to
``next_power_of_2(n_cols)``, so each loop runs once), its repeated loads of the row merged into one.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, ClassVar

from klineage.transforms._module import Module, parse
from klineage.transforms._source import Edit, apply_edits, int_const, shifted_edit
from klineage.transforms._triton import (
    REDUCTIONS,
    Kernel,
    is_row_reduction,
    kwarg,
    launch_args,
    loops,
    tl_func,
    tl_names,
    unique_name,
)
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._dispatch import (
    copy_base_name,
    delete_definition,
    dispatch_text,
    keep_else_branch,
    whole_lines,
)
from klineage.transforms.operators._single_pass import (
    Dispatch,
    Looped,
    dispatches,
    looped_kernels,
    single_pass_kernel,
)
from klineage.transforms.operators._statements import all_names
from klineage.transforms.operators.mask_elision import MaskElision


def _reduces_across_columns_of_a_2d_tile(m: Module, k: Kernel) -> bool:
    """A reduction along axis 1: the kernel holds a 2-D tile of several rows (multi-row)."""
    for n in ast.walk(k.node):
        if isinstance(n, ast.Call) and tl_func(n, m.al) in REDUCTIONS:
            axis = kwarg(n, "axis")
            if axis is None and len(n.args) >= 2:
                axis = n.args[1]
            if int_const(axis) == 1:
                return True
    return False


def _whole_row_kernels(m: Module) -> list[Kernel]:
    """Row kernels (one row per program) that hold the whole row in one tile: no loop loads."""
    return [
        k for k in m.kernels
        if is_row_reduction(k, m.al) and not _reduces_across_columns_of_a_2d_tile(m, k)
        and not any("load" in tl_names(loop, m.al) for loop in loops(k.node))
    ]


def _looped_through_mask_elision(m: Module) -> tuple[Module, list[Looped]]:
    """The column-looped row kernels of ``m``, and the module they were read from. A kernel whose loads
    branch on a divisibility flag (mask elision: ``if EVEN_N: unmasked else: masked``) is read in its
    masked form: the single-pass copy holds the row in one block of ``next_power_of_2(n_cols)``, which a
    row rarely fills, so its load keeps the mask; the looped kernel keeps its flag."""
    found = looped_kernels(m)
    if found:
        return m, found
    masked = MaskElision().simplify(m.src.text)
    plain = None if masked is None else parse(masked.source)
    if plain is None:
        return m, []
    return plain, looped_kernels(plain)


class SinglePassRow(Operator):
    """Rows that fit in registers are read once by a single-pass kernel; longer rows keep the
    column-looped kernel."""

    id = "single-pass-row"
    feature = "single_pass_row"
    name = "Single-pass rows (the whole row in registers when it fits)"
    intent = (
        "Give rows up to SINGLE_PASS_MAX columns a kernel that holds the whole row in registers "
        "(column block = next_power_of_2(n_cols)) and reads it from memory once, and keep the "
        "column-looped kernel, which re-reads the row on every pass, for longer rows."
    )
    carrier = (
        "the host launch of a row kernel: `if next_power_of_2(n_cols) <= SINGLE_PASS_MAX:` launches "
        "a single-pass kernel (column loops unrolled, one load of the row), `else:` the looped kernel"
    )
    anchor_predicate = "row_reduction and not has_dot and n_loops >= 1 and not single_pass_row"
    anchor_description = (
        "a row kernel that loops over the columns of its row in fixed blocks "
        "(for off in range(0, n_cols, BLOCK)), reading the row once per pass (max/sum/write, "
        "mean/var/normalize), with no host dispatch to a whole-row kernel for rows that fit"
    )
    params = (Param("max_cols"),)
    record = "code"
    default_params: ClassVar[Mapping[str, Any]] = {"max_cols": 8192}

    def _detect(self, m: Module) -> list[Anchor]:
        """The host dispatch to a single-pass kernel, or a row kernel that holds its whole row in one
        tile (present); a column-looped row kernel (applicable)."""
        out = []
        found = dispatches(m)
        for d in found:
            out.append(Anchor(
                "present", d.node.lineno, d.node.end_lineno or d.node.lineno,
                f"{d.func.name}: rows that fit launch {d.single} (whole row in registers), "
                f"longer rows {d.looped}", d.single,
            ))
        dispatched = {n for d in found for n in (d.single, d.looped)}
        for k in _whole_row_kernels(m):
            if k.name not in dispatched:
                out.append(anchor("present", k.node, f"{k.name}: the whole row in one tile (no column loop)", k))
        read_from, looped = _looped_through_mask_elision(m)
        for lp in looped:
            first, last = lp.loops[0].lineno, lp.loops[-1].end_lineno or lp.loops[-1].lineno
            if read_from is not m:  # lines of the masked form: anchor the kernel of m instead
                kernel = next(k for k in m.kernels if k.name == lp.kernel.name)
                first, last = kernel.node.lineno, kernel.node.end_lineno or kernel.node.lineno
            out.append(Anchor(
                "applicable", first, last,
                f"{lp.kernel.name}: {len(lp.loops)} loop(s) over the columns in blocks of {lp.block}",
                lp.kernel.name,
            ))
        return out

    # -- simplify: always take the looped path
    def _simplify(self, m: Module) -> Rewrite | None:
        """Replace the dispatch by its looped branch and delete what only the single-pass branch
        used: the single-pass kernel, module constants and helpers, host locals."""
        found = dispatches(m)
        if not found:
            return None
        d = found[0]
        node = d.node
        edits = [keep_else_branch(m, node)]
        removed: list[ast.AST] = [node.test, *node.body]
        dead = self._dead(m, d, removed)
        for st in dead:
            edits.append(delete_definition(m, st))
        try:
            return self._removed(m, edits)
        except ValueError:  # overlapping edits
            return None

    @staticmethod
    def _dead(m: Module, d: Dispatch, removed: list[ast.AST]) -> list[ast.stmt]:
        """Definitions (module level, or top-level statements of the host function) that only the
        removed code used, transitively."""
        defs: dict[str, list[ast.stmt]] = {}

        def define(st: ast.stmt) -> None:
            if isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                defs.setdefault(st.name, []).append(st)
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                defs.setdefault(st.targets[0].id, []).append(st)

        for st in m.src.tree.body:
            if st is not d.func:
                define(st)
        for st in d.func.body:
            if st is not d.node:
                define(st)
        candidates = all_names(removed)
        dead: list[ast.stmt] = []
        gone = {id(n) for r in removed for n in ast.walk(r)}
        changed = True
        while changed:
            changed = False
            live_uses: set[str] = set()
            for n in ast.walk(m.src.tree):
                if id(n) in gone:
                    continue
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                    live_uses.add(n.id)
                elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
                    pass
            # names used in strings of __all__ etc. are not considered
            for name in sorted(candidates):
                sts = defs.get(name)
                if not sts or name in live_uses or name == "run":
                    continue
                if len(sts) != 1:
                    continue
                st = sts[0]
                if any(st is x for x in dead):
                    continue
                dead.append(st)
                gone |= {id(n) for n in ast.walk(st)}
                candidates |= all_names([st.value if isinstance(st, ast.Assign) else st])
                changed = True
        return sorted(dead, key=lambda s: s.lineno)

    def _apply(self, m: Module, max_cols: int | None = None) -> Rewrite | None:
        """Add a single-pass kernel and the host dispatch to it (rows up to ``max_cols`` columns,
        default 8192) in front of a column-looped row kernel's launch. With the ``code`` simplify
        recorded, the expert's dispatch, kernel and constants go back exactly."""
        limit = int(self.default_params["max_cols"] if max_cols is None else max_cols)
        if limit < 1:
            raise ValueError(f"{self.id}.apply: max_cols must be positive, got {limit}")
        read_from, found = _looped_through_mask_elision(m)
        if not found:
            return None
        lp = found[0]
        k = next(k for k in m.kernels if k.name == lp.kernel.name)
        la = m.launches_of(k)[0]  # its one launch (looped_kernels): mask elision adds none
        dropped = {p.name for p in k.params} - {p.name for p in lp.kernel.params}
        if any(kw.arg in dropped for kw in la.call.keywords):
            return None  # a flag passed at the launch, which the single-pass copy does not take
        kname = unique_name(m.src.tree, copy_base_name(k.name, "single_pass"))
        const = unique_name(m.src.tree, "SINGLE_PASS_MAX")
        blk = unique_name(m.src.tree, "row_block")
        try:
            kernel_text = single_pass_kernel(read_from, lp, kname)
        except (SyntaxError, ValueError):
            return None
        args = launch_args(la, k)
        n_text = m.src.seg(args[lp.n_param])
        # host: the dispatch around the launch
        stmt = la.stmt
        assert stmt is not None
        s_first, s_last = m.src.stmt_lines(stmt)
        s_start, s_end = m.src.line_span(s_first, s_last)
        # comment lines right above the launch go with it into the looped branch (simplify takes
        # that branch back whole)
        c_start = m.src.line_span(whole_lines(m.src, stmt)[0], s_last)[0]
        ind = m.src.indent_of(stmt.lineno)
        launch_text = m.src.text[s_start:s_end]
        bs, be = m.src.span(args[lp.block])
        single = apply_edits(launch_text, [
            Edit(bs - s_start, be - s_start, blk),
            shifted_edit(m.src.span(la.call.func.value), s_start, kname),  # type: ignore[attr-defined]
        ])
        launch_text = m.src.text[c_start:s_end]
        s_start = c_start
        host = f"{ind}{blk} = {m.triton}.next_power_of_2({n_text})\n" + dispatch_text(
            ind, f"{blk} <= {const}", single, launch_text, "the whole row in registers: one read of the row")
        edits = [Edit(s_start, s_end, host)]
        # the kernel, right after the looped one
        k_end = m.src.line_span(*m.src.stmt_lines(k.node))[1]
        edits.append(Edit(k_end, k_end, "\n\n" + kernel_text))
        # the constant, after the imports
        imports = [st for st in m.src.tree.body if isinstance(st, (ast.Import, ast.ImportFrom))]
        if not imports:
            return None
        at = m.src.line_span(*m.src.stmt_lines(imports[-1]))[1]
        edits.append(Edit(at, at, f"\n{const} = {limit}  # widest row held whole in registers; longer rows loop\n"))
        try:
            return self._edited(m, edits, {"max_cols": limit}, "apply")
        except ValueError:  # overlapping edits
            return None
