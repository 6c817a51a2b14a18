"""The persistent-loop template shared by persistent (tiles) and row-persistent (rows)."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from klineage.transforms._module import Module
from klineage.transforms._source import (
    Edit,
    add_keyword,
    add_param,
    reindent,
)
from klineage.transforms._triton import (
    Kernel,
    Launch,
    dotted,
    launch_args,
    program_id_axis,
    range_call,
    tl_func,
    unique_name,
)
from klineage.transforms.features import derived_names, pid_derived
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite
from klineage.transforms.operators._common import anchor, grid_tuple, has_dot, merge_appends, sm_names
from klineage.transforms.operators._statements import leaves_loop


def _one_d_launches(m: Module, k: Kernel) -> list[Launch] | None:
    """The launches of ``k`` when every one is from host code with a 1-D grid ``(g,)``: a literal
    tuple, or a ``lambda META: (g,)`` / ``def grid(meta): return (g,)``."""
    las = m.launches_of(k)
    for la in las:
        gt = grid_tuple(m, la)
        if la.func is None or gt is None or len(gt[0].elts) != 1:  # type: ignore[attr-defined]
            return None
    return las


def _kernel_side(m: Module, k: Kernel, la: Launch, expr: ast.expr, meta: str | None) -> str | None:
    """``expr`` (host code of a grid) rewritten as kernel code, or None when some part has no kernel
    counterpart: ``triton.cdiv`` -> ``tl.cdiv``, ``META["X"]`` -> the constexpr ``X``, a host name ->
    the parameter the launch passes it to, integer constants and + - * // as they are. Lets a kernel
    count its own work items when the host count depends on the launch's meta-parameters."""
    args = launch_args(la, k)
    rebound = {n.id for n in ast.walk(k.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # a parameter the kernel rebinds no longer holds what the host passed: not a counterpart
    passed = {a.id: p for p, a in args.items() if isinstance(a, ast.Name) and p not in rebound}
    cex = set(k.constexprs)
    assigned: dict[str, list[ast.expr]] = {}
    for a in ast.walk(la.func) if la.func is not None else ():
        if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name):
            assigned.setdefault(a.targets[0].id, []).append(a.value)
    locals_ = {name: values[0] for name, values in assigned.items() if len(values) == 1}

    def walk(node: ast.expr, depth: int = 0) -> str | None:
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return repr(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            left, right = walk(node.left, depth + 1), walk(node.right, depth + 1)
            op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
            return None if left is None or right is None else f"({left} {op} {right})"
        if isinstance(node, ast.Call) and dotted(node.func) in ("triton.cdiv", "cdiv") and len(node.args) == 2:
            a, b = walk(node.args[0], depth + 1), walk(node.args[1], depth + 1)
            return None if a is None or b is None else f"{m.tl}.cdiv({a}, {b})"
        if (meta is not None and isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == meta and isinstance(node.slice, ast.Constant)
                and node.slice.value in cex):
            return str(node.slice.value)
        if isinstance(node, ast.Name):
            if node.id in passed:
                return passed[node.id]
            if node.id in locals_ and node.id != meta:  # a local of the grid function or host code
                return walk(locals_[node.id], depth + 1)
        return None

    return walk(expr)


def _one_d_grid(grid: tuple[ast.expr, str | None] | None) -> tuple[ast.expr, str | None]:
    """The only dimension and the meta argument of a grid that ``_one_d_launches`` accepted (a tuple)."""
    assert grid is not None and isinstance(grid[0], (ast.Tuple, ast.List)), "a 1-D launch has a grid tuple"
    return grid[0].elts[0], grid[1]


class PersistentLoop(Operator):
    """Shared machinery: programs loop over work items with a program-count stride. Subclasses say
    whether they take tl.dot kernels (``dot``), how the work count is named (``work_name``) and how
    many programs per SM ``apply`` launches by default (``programs_per_sm``)."""

    dot: ClassVar[bool] = True
    work_name: ClassVar[str] = "num_tiles"
    programs_per_sm: ClassVar[int] = 1
    params = (Param("programs_per_sm"),)
    record = "code"

    def _loops(self, m: Module, k: Kernel) -> list[tuple[ast.For, ast.Call]]:
        out = []
        pid = pid_derived(k.node, m.al)
        nprog = derived_names(k.node, m.al, "num_programs")
        sm_params = set()
        for la in m.launches_of(k):
            sms = sm_names(m, la.func)
            for p, v in launch_args(la, k).items():
                if any(isinstance(n, ast.Name) and n.id in sms for n in ast.walk(v)):
                    sm_params.add(p)
        for st in k.node.body:
            rc = range_call(st, m.al)
            if rc is None or not isinstance(st, ast.For) or len(rc.args) < 3 or not isinstance(st.target, ast.Name):
                continue
            start, step = rc.args[0], rc.args[2]
            s_ok = any(
                tl_func(n, m.al) == "program_id" or (isinstance(n, ast.Name) and n.id in pid)
                for n in ast.walk(start)
            )
            t_ok = any(
                tl_func(n, m.al) == "num_programs"
                or (isinstance(n, ast.Name) and (n.id in nprog or n.id in sm_params))
                for n in ast.walk(step)
            )
            if s_ok and t_ok:
                out.append((st, rc))
        return out

    def _mine(self, m: Module, k: Kernel) -> bool:
        return has_dot(k, m) == self.dot

    def _detect(self, m: Module) -> list[Anchor]:
        """Work loops strided by the program count (present); kernels with one program per work item
        (applicable)."""
        out = []
        for k in m.kernels:
            if self._mine(m, k):
                out += [
                    anchor("present", lp, f"{k.name} loops over work items", k) for lp, _ in self._loops(m, k)
                ]
        if not out:
            for k in m.launched:
                if self._mine(m, k) and (self._apply_plan(m, k) or self._guarded_plan(m, k)) is not None:
                    out.append(anchor("applicable", k.node, f"{k.name} runs one program per work item", k))
        return out

    def _grid_fix(self, m: Module, la: Launch) -> Edit | None:
        gt = grid_tuple(m, la)
        if gt is None:
            return None
        node = gt[0]
        sms = sm_names(m, la.func)
        helpers = {
            f.name
            for f in m.src.tree.body
            if isinstance(f, ast.FunctionDef)
            and any(isinstance(n, ast.Attribute) and n.attr == "multi_processor_count" for n in ast.walk(f))
        }
        for elt in node.elts:  # type: ignore[attr-defined]
            target = elt
            if isinstance(elt, ast.Name) and la.func is not None:
                before = [
                    a
                    for a in ast.walk(la.func)
                    if isinstance(a, ast.Assign)
                    and len(a.targets) == 1
                    and isinstance(a.targets[0], ast.Name)
                    and a.targets[0].id == elt.id
                    and a.lineno <= la.call.lineno
                ]
                target = max(before, key=lambda a: a.lineno).value if before else elt
            if (
                isinstance(target, ast.Call)
                and isinstance(target.func, ast.Name)
                and target.func.id == "min"
                and len(target.args) == 2
            ):
                uses = [
                    any(
                        (isinstance(n, ast.Name) and n.id in sms)
                        or (isinstance(n, ast.Attribute) and n.attr == "multi_processor_count")
                        or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers)
                        for n in ast.walk(a)
                    )
                    for a in target.args
                ]
                if uses.count(True) == 1:
                    keep = target.args[uses.index(False)]
                    return Edit(*m.src.span(target), m.src.seg(keep))
        return None

    def _simplify(self, m: Module) -> Rewrite | None:
        """Replace the work loop by ``v = start`` + ``if v < end:`` and size the grid by the work count."""
        edits: list[Edit] = []
        for k in m.kernels:
            if not self._mine(m, k):
                continue
            lps = self._loops(m, k)
            if len(lps) != 1:
                continue
            lp, rc = lps[0]
            fixes = [self._grid_fix(m, la) for la in m.launches_of(k)]
            if not fixes or any(f is None for f in fixes):
                continue
            indent = m.src.indent_of(lp.lineno)
            header_end = m.src.line_span(lp.body[0].lineno, lp.body[0].lineno)[0]
            start = m.src.line_span(lp.lineno, lp.lineno)[0]
            var = lp.target.id  # type: ignore[attr-defined]
            edits.append(
                Edit(
                    start,
                    header_end,
                    f"{indent}{var} = {m.src.seg(rc.args[0])}\n{indent}if {var} < {m.src.seg(rc.args[1])}:\n",
                )
            )
            edits += [f for f in fixes if f is not None]
        return self._removed(m, sorted(set(edits), key=lambda e: e.start))

    def _apply_plan(self, m: Module, k: Kernel) -> tuple[ast.Assign, list[Launch]] | None:
        if k.autotune is not None or any(p.has_default for p in k.params):
            return None
        if any(isinstance(n, ast.Return) for n in ast.walk(k.node)):
            return None
        pid_stmts = [
            st
            for st in k.node.body
            if isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and program_id_axis(st.value, m.al) == 0
        ]
        if len(pid_stmts) != 1:
            return None
        n_pid0 = sum(1 for n in ast.walk(k.node) if program_id_axis(n, m.al) == 0)
        if n_pid0 != 1 or any(tl_func(n, m.al) == "num_programs" for n in ast.walk(k.node)):
            return None
        las = _one_d_launches(m, k)
        return (pid_stmts[0], las) if las is not None else None

    def _guarded_plan(self, m: Module, k: Kernel) -> tuple[ast.Assign, ast.If, list[Launch]] | None:
        """The one-item-per-program form written as ``v = <program id expr>`` then ``if v < N:`` (the
        kernel's last two statements; what this operator's simplify leaves): safe to loop when the
        guarded body never leaves early, never rebinds ``v`` and reads no other program-id-derived
        value computed before it."""
        body = k.node.body
        if k.autotune is not None or len(body) < 2:
            return None
        assign, guard = body[-2], body[-1]
        if not (isinstance(guard, ast.If) and not guard.orelse and isinstance(assign, ast.Assign)
                and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
            return None
        var = assign.targets[0].id
        test = guard.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Lt)
                and isinstance(test.left, ast.Name) and test.left.id == var):
            return None
        pid = pid_derived(k.node, m.al)
        if not any(program_id_axis(n, m.al) == 0 or (isinstance(n, ast.Name) and n.id in pid)
                   for n in ast.walk(assign.value)):
            return None
        inner = [n for st in guard.body for n in ast.walk(st)]
        if any(isinstance(n, ast.Return) or program_id_axis(n, m.al) is not None for n in inner):
            return None
        if leaves_loop(guard.body):
            return None
        if any(isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Store) for n in inner):
            return None
        before = {n.id for st in body[:-2] for n in ast.walk(st) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)} & pid
        if any(isinstance(n, ast.Name) and n.id in before - {var} for n in inner):
            return None
        las = _one_d_launches(m, k)
        return (assign, guard, las) if las else None

    def _apply_guarded(self, m: Module, k: Kernel, per_sm: int) -> list[Edit] | None:
        plan = self._guarded_plan(m, k)
        if plan is None:
            return None
        assign, guard, las = plan
        var = assign.targets[0].id  # type: ignore[attr-defined]
        nprog = [st.targets[0].id for st in k.node.body[:-2]
                 if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                 and tl_func(st.value, m.al) == "num_programs"]
        step = nprog[0] if nprog else f"{m.tl}.num_programs(0)"
        indent = m.src.indent_of(assign.lineno)
        start = m.src.line_span(assign.lineno, assign.lineno)[0]
        end = m.src.line_span(guard.body[0].lineno, guard.body[0].lineno)[0]
        end_value = m.src.seg(guard.test.comparators[0])  # type: ignore[attr-defined]
        edits = [Edit(start, end, f"{indent}for {var} in {m.tl}.range({m.src.seg(assign.value)}, {end_value}, "
                                  f"{step}):\n")]
        for la in las:
            edits += self._launch_edits(m, la, lambda elt_text: elt_text, per_sm)
        return edits

    def _launch_edits(self, m: Module, la: Launch, work: Any, per_sm: int) -> list[Edit]:
        """Grid ``(g,)`` -> ``(min(w, num_sms x per_sm),)`` with the SM count computed on the host just
        before the grid; ``work(g_text)`` gives ``w`` (a new name bound to ``g`` or ``g`` itself)."""
        gt = grid_tuple(m, la)
        assert gt is not None and la.func is not None
        elt = gt[0].elts[0]  # type: ignore[attr-defined]
        # the grid tuple may be bound earlier: insert before whichever comes first
        grid_stmt = next((s for s in ast.walk(la.func)
                          if (isinstance(s, ast.Assign) and (s.value is gt[0] or (
                              isinstance(s.value, ast.Lambda) and s.value.body is gt[0])))
                          or (isinstance(s, ast.FunctionDef) and s is not la.func and any(
                              isinstance(r, ast.Return) and r.value is gt[0] for r in ast.walk(s)))), None)
        anchor_stmt = grid_stmt if grid_stmt is not None else la.stmt
        assert anchor_stmt is not None
        hindent = m.src.indent_of(anchor_stmt.lineno)
        hosts = unique_name(m.src.tree, "num_sms")
        pos = m.src.line_span(anchor_stmt.lineno, anchor_stmt.lineno)[0]
        name = work(m.src.seg(elt))
        bind = f"{hindent}{name} = {m.src.seg(elt)}\n" if name != m.src.seg(elt) else ""
        mult = f" * {per_sm}" if per_sm != 1 else ""
        return [Edit(pos, pos, f"{hindent}{hosts} = (torch.cuda.get_device_properties(torch.cuda.current_device())"
                               f".multi_processor_count if torch.cuda.is_available() else 4)\n{bind}"),
                Edit(*m.src.span(elt), f"min({name}, {hosts}{mult})")]

    def _apply(self, m: Module, programs_per_sm: int | None = None) -> Rewrite | None:
        """Loop the kernel body over work items (``for pid in tl.range(pid0, n, tl.num_programs(0))``),
        pass the work count ``n`` and launch ``min(n, SMs x programs_per_sm)`` programs. A body already
        written ``v = pid`` + ``if v < N:`` becomes ``for v in tl.range(pid, N, tl.num_programs(0)):``.
        With the ``code`` simplify recorded, the expert's construct goes back exactly as written."""
        per_sm = programs_per_sm or self.programs_per_sm
        edits: list[Edit] = []
        for k in m.launched:
            if not self._mine(m, k) or self._loops(m, k):
                continue
            plan = self._apply_plan(m, k)
            if plan is None:
                edits += self._apply_guarded(m, k, per_sm) or []
                continue
            pid_stmt, las = plan
            tl = m.tl
            work = unique_name(m.src.tree, self.work_name)
            var = pid_stmt.targets[0].id  # type: ignore[attr-defined]
            indent = m.src.indent_of(pid_stmt.lineno)
            rest = [st for st in k.node.body if st.lineno > pid_stmt.lineno]
            if not rest:
                continue
            # A grid that reads the launch's meta-parameters (lambda META: ...) cannot be counted on
            # the host before the launch: the kernel counts its work items itself.
            grids = [grid_tuple(m, la) for la in las]
            in_kernel = None
            if any(g is not None and g[1] is not None for g in grids):
                counts = {_kernel_side(m, k, la, *_one_d_grid(g)) for la, g in zip(las, grids, strict=True)}
                if len(counts) != 1 or None in counts:
                    continue
                in_kernel = counts.pop()
            head = m.src.line_span(pid_stmt.lineno, pid_stmt.end_lineno or pid_stmt.lineno)
            count_line = f"{indent}{work} = {in_kernel}\n" if in_kernel is not None else ""
            edits.append(
                Edit(
                    head[0],
                    head[1],
                    f"{count_line}{indent}for {var} in {tl}.range({tl}.program_id(0), {work}, {tl}.num_programs(0)):\n",
                )
            )
            first, last = m.src.stmt_lines(rest[0])[0], m.src.stmt_lines(rest[-1])[1]
            span = m.src.line_span(first, last)
            edits.append(
                Edit(span[0], span[1], reindent(m.src.text[span[0] : span[1]], indent, indent + "    "))
            )
            if in_kernel is not None:
                for la in las:
                    edits += self._launch_edits(m, la, lambda elt_text: elt_text, per_sm)
                continue
            edits.append(add_param(m.src, k.node, work))
            for la in las:
                edits += self._launch_edits(m, la, lambda _elt, work=work: work, per_sm)
                edits.append(add_keyword(m.src, la.call, f"{work}={work}"))
        return self._edited(m, merge_appends(edits), {"programs_per_sm": per_sm}, "apply")
