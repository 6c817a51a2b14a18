"""Control-flow operators: mask-elision, persistent, row-persistent, multi-row, single-pass-row."""

from __future__ import annotations

import ast
from typing import Any

from klineage.transforms._source import (
    Edit,
    add_keyword,
    add_param,
    apply_edits,
    call_items,
    dict_items,
    param_spans,
    reindent,
    remove_items,
    remove_keywords,
    str_const,
)
from klineage.transforms._triton import (
    Kernel,
    Launch,
    arange_blocks,
    dotted,
    kwarg,
    launch_args,
    loops,
    program_id_axis,
    range_call,
    single_value,
    tl_func,
    unique_name,
)
from klineage.transforms.features import derived_names, pid_derived
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import Module, anchor, grid_tuple, has_dot, parse, sm_names
from klineage.transforms.operators._restore import (
    check_params,
    hunks,
    require_list,
    rewrite_with_hunks,
)


def _block_text(m: Module, stmts: list[ast.stmt], indent: str) -> str:
    """Whole lines of consecutive statements re-indented to ``indent``."""
    first = m.src.stmt_lines(stmts[0])[0]
    last = m.src.stmt_lines(stmts[-1])[1]
    start, end = m.src.line_span(first, last)
    old = m.src.indent_of(stmts[0].lineno)
    return reindent(m.src.text[start:end], old, indent)


def _replace_stmt_with(m: Module, stmt: ast.stmt, body: list[ast.stmt]) -> Edit:
    """Replace a compound statement by ``body`` at its own indentation (empty body: delete)."""
    start, end = m.src.line_span(m.src.stmt_lines(stmt)[0], m.src.stmt_lines(stmt)[1])
    if not body:
        return Edit(start, end, "")
    return Edit(start, end, _block_text(m, body, m.src.indent_of(stmt.lineno)))


# ------------------------------------------------------------------------------------- mask-elision


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


def _leaves_loop(stmts: list[ast.stmt]) -> bool:
    """True when ``stmts`` hold a ``break`` / ``continue`` that is not inside a loop of their own."""
    for st in stmts:
        if isinstance(st, (ast.Break, ast.Continue)):
            return True
        if isinstance(st, (ast.For, ast.While)):
            continue  # its break / continue belong to it
        for field in ("body", "orelse", "finalbody"):
            if _leaves_loop(getattr(st, field, []) or []):
                return True
    return False


def _divisibility_test(node: ast.AST) -> bool:
    """True for a test that a size fits the tile: ``a % b == 0`` or ``a == b`` (not ``a <= LIMIT``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return True
    return isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq))


class MaskElision(Operator):
    """Unmasked loads when the shape divides the tile (EVEN_K style)."""

    id = "mask-elision"
    name = "Elide boundary masks on divisible shapes"
    intent = (
        "Skip boundary masks when the problem size is a multiple of the tile, selected by a constexpr flag."
    )
    carrier = "a @triton.heuristics divisibility flag and an if/else between unmasked and masked loads"
    anchor_predicate = "uses_mask and n_loops >= 1 and not mask_elision"
    anchor_description = "masked loads inside a loop whose mask only guards the tile boundary"

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
        out = []
        runtime = {p.name for p in k.params if not p.constexpr}
        assigns = {
            st.targets[0].id: st.value
            for st in ast.walk(k.node)
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
        }

        def blocks(expr: ast.AST, depth: int = 0) -> set[str]:
            found: set[str] = set()
            for n in ast.walk(expr):
                if tl_func(n, m.al) == "arange" and len(n.args) == 2 and isinstance(n.args[1], ast.Name):  # type: ignore
                    found.add(n.args[1].id)  # type: ignore[attr-defined]
                elif isinstance(n, ast.Name) and n.id in assigns and depth < 6:
                    found |= blocks(assigns[n.id], depth + 1)
            return found

        for lp in loops(k.node):
            for st in lp.body:
                if not isinstance(st, ast.Assign):
                    continue
                calls = [c for c in ast.walk(st.value) if tl_func(c, m.al) == "load"]
                if len(calls) != 1:
                    continue
                call = calls[0]
                mask = kwarg(call, "mask")  # type: ignore[arg-type]
                if mask is None or len(call.args) > 1:  # type: ignore[attr-defined]
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
                    pairs.append((sizes[0], bs.pop()))
                if ok and pairs:
                    out.append((st, call, sorted(set(pairs))))  # type: ignore[arg-type]
        return out

    def detect(self, source: str) -> list[Anchor]:
        """Divisibility flags selecting a branch (present); masked loop loads (applicable)."""
        m = parse(source)
        if m is None:
            return []
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

    def simplify(self, source: str) -> Rewrite | None:
        """Keep only the general (masked) branch of every flag test and remove the flag (parameter,
        heuristic entry or launch keyword)."""
        m = parse(source)
        if m is None:
            return None
        edits: list[Edit] = []
        for k in m.kernels:
            flags = self._flags(m, k)
            if not flags:
                continue
            for f in flags:
                for n, neg in self._ifs(m, k, f):
                    edits.append(_replace_stmt_with(m, n, n.body if neg else n.orelse))
            for la in m.launches_of(k):  # one removal per call: neighbouring keywords share a comma
                passed = {kw.arg for kw in la.call.keywords} & set(flags)
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
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"code": hunks(source, edits)}, "simplify")

    def apply(self, source: str, code: list[dict[str, Any]] | None = None, **params: Any) -> Rewrite | None:
        """Wrap masked loads in loops as ``if EVEN_X: unmasked else: masked`` with
        ``@triton.heuristics({"EVEN_X": lambda args: args["X"] % args["BLOCK"] == 0 ...})``.
        With the ``code`` simplify recorded, the expert's construct goes back exactly as written."""
        check_params(self.id, params, ())
        if require_list(self.id, "code", code) is not None:
            return rewrite_with_hunks(self, source, code, {"code": code})
        m = parse(source)
        if m is None:
            return None
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
                masked = _block_text(m, [st], indent + "    ")
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
            for pairs, flag in conds.items():
                test = " and ".join(f'args["{s}"] % args["{b}"] == 0' for s, b in pairs)
                entries.append(f'"{flag}": lambda args: {test}')
            indent = m.src.indent_of(k.node.lineno)
            if k.heuristics is not None and k.heuristics.args and isinstance(k.heuristics.args[0], ast.Dict):
                d = k.heuristics.args[0]
                from klineage.transforms._source import append_item

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
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, _merge(edits)), {}, "apply")


def _merge(edits: list[Edit]) -> list[Edit]:
    out: dict[tuple[int, int], Edit] = {}
    for e in edits:
        key = (e.start, e.end)
        if key in out and e.start == e.end:
            out[key] = Edit(e.start, e.end, out[key].text + e.text)
        else:
            out[key] = e
    return list(out.values())


# ------------------------------------------------------------------------------- persistent kernels


class _Persistent(Operator):
    """Shared machinery: programs loop over work items with a program-count stride."""

    dot: bool = True
    work_name = "num_tiles"
    programs_per_sm = 1

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
            if rc is None or len(rc.args) < 3 or not isinstance(st.target, ast.Name):  # type: ignore[attr-defined]
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
                out.append((st, rc))  # type: ignore[arg-type]
        return out

    def _mine(self, m: Module, k: Kernel) -> bool:
        return has_dot(k, m) == self.dot

    def detect(self, source: str) -> list[Anchor]:
        """Work loops strided by the program count (present); kernels with one program per work item
        (applicable)."""
        m = parse(source)
        if m is None:
            return []
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

    def simplify(self, source: str) -> Rewrite | None:
        """Replace the work loop by ``v = start`` + ``if v < end:`` and size the grid by the work count."""
        m = parse(source)
        if m is None:
            return None
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
        if not edits:
            return None
        edits = sorted(set(edits), key=lambda e: e.start)
        return self._rewrite(source, apply_edits(source, edits), {"code": hunks(source, edits)}, "simplify")

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
        if _leaves_loop(guard.body):
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
        nprog = [st.targets[0].id for st in k.node.body[:-2]  # type: ignore[attr-defined]
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

    def apply(
        self,
        source: str,
        programs_per_sm: int | None = None,
        code: list[dict[str, Any]] | None = None,
        **params: Any,
    ) -> Rewrite | None:
        """Loop the kernel body over work items (``for pid in tl.range(pid0, n, tl.num_programs(0))``),
        pass the work count ``n`` and launch ``min(n, SMs x programs_per_sm)`` programs. A body already
        written ``v = pid`` + ``if v < N:`` becomes ``for v in tl.range(pid, N, tl.num_programs(0)):``.
        With the ``code`` simplify recorded, the expert's construct goes back exactly as written."""
        check_params(self.id, params, ())
        if require_list(self.id, "code", code) is not None:
            return rewrite_with_hunks(self, source, code, {"code": code})
        m = parse(source)
        if m is None:
            return None
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
                counts = {_kernel_side(m, k, la, g[0].elts[0], g[1])  # type: ignore[attr-defined,index]
                          for la, g in zip(las, grids, strict=True)}
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
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, _merge(edits)), {"programs_per_sm": per_sm}, "apply")


class Persistent(_Persistent):
    """Persistent tl.dot kernels: grid = #SMs, programs loop over output tiles."""

    id = "persistent"
    name = "Persistent tile loop"
    intent = (
        "Launch about one program per SM and let each loop over output tiles, amortizing launch and prologue."
    )
    carrier = (
        "the kernel body wrapped in a tile loop strided by tl.num_programs, and the grid min(tiles, SMs)"
    )
    anchor_predicate = "has_dot and not persistent"
    anchor_description = "a tl.dot kernel with one program per output tile on a 1-D grid"
    dot = True
    work_name = "num_tiles"
    programs_per_sm = 1


class RowPersistent(_Persistent):
    """Row kernels whose programs loop over rows."""

    id = "row-persistent"
    name = "Row-persistent grid"
    intent = (
        "Size the grid by occupancy and let each program stride over rows instead of one program per row."
    )
    carrier = (
        "the kernel body wrapped in a row loop strided by tl.num_programs, and the grid min(rows, SMs x k)"
    )
    anchor_predicate = "not has_dot and not persistent"
    anchor_description = "a row or elementwise kernel with one program per row/block on a 1-D grid"
    dot = False
    work_name = "num_rows"
    programs_per_sm = 4


# ----------------------------------------------------------------------------------------- multi-row


class MultiRow(Operator):
    """Several rows per program (2-D tile) for short rows."""

    id = "multi-row"
    name = "Several rows per program"
    intent = "Pack several short rows into one 2-D tile per program so each program moves enough data."
    carrier = "the rows-per-program constexpr (a 2-D [ROWS, BLOCK] tile) set from the row width at launch"
    anchor_predicate = "multi_row and row_reduction"
    anchor_description = "a row kernel written over a 2-D [ROWS, BLOCK] tile"

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
                    tl_func(c, m.al) == "arange"
                    and len(c.args) == 2  # type: ignore
                    and isinstance(c.args[1], ast.Name)
                    and c.args[1].id == p  # type: ignore
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

    def detect(self, source: str) -> list[Anchor]:
        """More than one row per program (present) or exactly one in a 2-D tile kernel (applicable)."""
        m = parse(source)
        if m is None:
            return []
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

    def simplify(self, source: str) -> Rewrite | None:
        """One row per program: the rows-per-program value becomes 1."""
        m = parse(source)
        if m is None:
            return None
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
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "simplify")

    def apply(
        self, source: str, tile_elems: int = 4096, sites: list[dict[str, Any]] | None = None, **params: Any
    ) -> Rewrite | None:
        """Rows per program = ``max(1, min(tile_elems // BLOCK, 16))`` where it is 1; with the
        ``sites`` simplify recorded, the expert's rows-per-program expression where it was."""
        check_params(self.id, params, ())
        m = parse(source)
        if m is None:
            return None
        if require_list(self.id, "sites", sites) is not None:
            redo = set()
            for rec in sites:  # type: ignore[union-attr]
                k = next((k for k in m.kernels if k.name == rec.get("kernel")), None)
                ks = self._sites(m, k) if k is not None else []
                j = rec.get("index")
                if not isinstance(j, int) or not 0 <= j < len(ks) or ks[j][1] != rec.get("name"):
                    return None
                redo.add(Edit(*m.src.span(ks[j][2]), str(rec["value"])))
            return self._rewrite(source, apply_edits(source, redo), {"sites": sites}, "apply")
        edits = set()
        for k in m.kernels:
            for la, p, v in self._sites(m, k):
                if not (isinstance(v, ast.Constant) and v.value == 1):
                    continue
                block = self._column_block(m, k, la, p, v)
                if block is None:
                    continue
                edits.add(Edit(*m.src.span(v), f"max(1, min({tile_elems} // {m.src.seg(block)}, 16))"))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"tile_elems": tile_elems}, "apply")


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


_ = (call_items, kwarg)
