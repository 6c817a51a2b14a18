"""Softmax-structure operators: online-softmax (one pass with a running max / rescaled sum) and
causal-skip (key blocks above the causal diagonal are never visited).

Both rewrite whole statements (loops, helper calls) and recognise their patterns structurally:
which names are running statistics, which loop bound is the diagonal, which ``tl.where`` is the
causal mask. Anything else is left alone (``None``).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from typing import Any

from klineage.schema import pyast
from klineage.transforms._source import Edit, apply_edits
from klineage.transforms._triton import Kernel, dotted, kwarg, range_call, tl_func, unique_name
from klineage.transforms.features import pid_derived
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import Module, anchor, parse
from klineage.transforms.operators._restore import check_params, hunks, require_list, rewrite_with_hunks


def _bodies(node: ast.AST) -> list[list[ast.stmt]]:
    """Every statement list under ``node`` (function, loop and branch bodies)."""
    out = []
    for n in ast.walk(node):
        for attr in ("body", "orelse"):
            b = getattr(n, attr, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                out.append(b)
    return out


def _lines(m: Module, first: ast.stmt, last: ast.stmt) -> tuple[int, int]:
    """Character span of the whole lines from ``first`` to ``last``."""
    return m.src.line_span(m.src.stmt_lines(first)[0], m.src.stmt_lines(last)[1])


def _sub_names(m: Module, node: ast.AST, mapping: dict[str, str]) -> str:
    """Source of ``node`` with the names of ``mapping`` renamed."""
    start, end = m.src.span(node)
    text = m.src.text[start:end]
    hits = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in mapping]
    for h in sorted(hits, key=lambda n: m.src.span(n)[0], reverse=True):
        hs, he = m.src.span(h)
        text = text[: hs - start] + mapping[h.id] + text[he - start :]
    return text


def _name(node: ast.AST | None) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _assign(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    """``name = value`` as (name, value)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    return None


def _uses(nodes: list[ast.AST], names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for node in nodes for n in ast.walk(node))


def _is_exp(m: Module, call: ast.AST) -> bool:
    if not isinstance(call, ast.Call) or len(call.args) != 1:
        return False
    f = tl_func(call, m.al)
    return f in ("exp", "exp2") or (dotted(call.func) or "").endswith(("math.exp2", "math.exp"))


def _header(m: Module, stmt: ast.stmt) -> str | None:
    """The header of a loop or branch (what must agree between the passes)."""
    if isinstance(stmt, ast.For) and not stmt.orelse:
        return f"for {m.src.seg(stmt.target)} in {m.src.seg(stmt.iter)}"
    if isinstance(stmt, ast.If) and not stmt.orelse:
        return f"if {m.src.seg(stmt.test)}"
    return None


# ----------------------------------------------------------------------------------- online-softmax


@dataclass(frozen=True)
class _Online:
    """One online update inside a chunk body: ``new = max(m, r)`` [``g = where(new == -inf, 0, new)``]
    ``s = s * exp(m - g) + t`` ``m = new`` (body[start:end])."""

    start: int
    end: int
    m: str
    s: str
    new: str
    sub: str  # the name subtracted in t: new, or its -inf guard
    r: ast.expr
    t: ast.expr


def _split_scale(arg: ast.expr) -> tuple[ast.expr, ast.expr | None]:
    """``(a - b)`` and ``c`` out of ``(a - b) * c`` / ``c * (a - b)`` with ``c`` a constant or a name
    (``c`` None when ``arg`` is not scaled so). ``exp(c * (x - m))`` rescales like ``exp(x - m)``:
    ``sum exp(c (x - M)) == exp(c (m - M)) * sum exp(c (x - m))`` for any ``c``, which is why the base
    change ``exp2(d) == exp(d * ln 2)`` keeps an online update an online update."""
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mult):
        for diff, factor in ((arg.left, arg.right), (arg.right, arg.left)):
            if isinstance(diff, ast.BinOp) and isinstance(diff.op, ast.Sub) and isinstance(
                factor, (ast.Constant, ast.Name)
            ):
                return diff, factor
    return arg, None


def _unscaled(arg: ast.expr) -> ast.expr:
    """``(a - b)`` out of ``(a - b) * c`` / ``c * (a - b)`` (``_split_scale``)."""
    return _split_scale(arg)[0]


def _online_update(m: Module, body: list[ast.stmt]) -> _Online | None:
    for i, st in enumerate(body):
        a = _assign(st)
        if a is None or tl_func(a[1], m.al) != "maximum" or len(a[1].args) != 2:  # type: ignore[attr-defined]
            continue
        new, call = a[0], a[1]
        run = _name(call.args[0])  # type: ignore[attr-defined]
        if run is None:
            continue
        j, sub = i + 1, new
        g = _assign(body[j]) if j < len(body) else None
        if g is not None and tl_func(g[1], m.al) == "where" and _name(g[1].args[-1]) == new:  # type: ignore
            sub, j = g[0], j + 1
        if j + 1 >= len(body):
            return None
        upd, fin = _assign(body[j]), _assign(body[j + 1])
        if upd is None or fin is None or fin[0] != run or _name(fin[1]) != new:
            return None
        s, v = upd
        # s * E(m - sub) + t
        if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and isinstance(v.left, ast.BinOp)):
            return None
        scale = v.left
        if not (isinstance(scale.op, ast.Mult) and _name(scale.left) == s and _is_exp(m, scale.right)):
            return None
        arg = _unscaled(scale.right.args[0])  # type: ignore[attr-defined]
        if not (
            isinstance(arg, ast.BinOp)
            and isinstance(arg.op, ast.Sub)
            and _name(arg.left) == run
            and _name(arg.right) == sub
        ):
            return None
        t = v.right
        if tl_func(t, m.al) != "sum" or _uses([t], {s, run}) or not _uses([t], {sub}):
            return None
        return _Online(i, j + 2, run, s, new, sub, call.args[1], t)  # type: ignore[attr-defined]
    return None


def _two_pass_parts(m: Module, body: list[ast.stmt]) -> tuple[int, str, ast.expr] | None:
    """``m = tl.maximum(m, tl.max(...))`` in a pass-1 body: (index, m, reduction)."""
    for i, st in enumerate(body):
        a = _assign(st)
        if a is None or tl_func(a[1], m.al) != "maximum" or len(a[1].args) != 2:  # type: ignore[attr-defined]
            continue
        if _name(a[1].args[0]) == a[0] and tl_func(a[1].args[1], m.al) == "max":  # type: ignore[attr-defined]
            return i, a[0], a[1].args[1]  # type: ignore[attr-defined]
    return None


def _sum_update(m: Module, body: list[ast.stmt], run: str) -> tuple[int, str, ast.expr] | None:
    """``s = s + tl.sum(E(x - m))`` / ``s += ...`` in a pass-2 body: (index, s, the sum)."""
    for i, st in enumerate(body):
        if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name):
            s, t = st.target.id, st.value
        else:
            a = _assign(st)
            if a is None or not (
                isinstance(a[1], ast.BinOp) and isinstance(a[1].op, ast.Add) and _name(a[1].left) == a[0]
            ):
                continue
            s, t = a[0], a[1].right  # type: ignore[attr-defined]
        if tl_func(t, m.al) != "sum" or not t.args or _uses([t], {s}):  # type: ignore[attr-defined]
            continue
        e = t.args[0]  # type: ignore[attr-defined]
        if not _is_exp(m, e):
            continue
        arg = _unscaled(e.args[0])  # type: ignore[attr-defined]
        if (
            isinstance(arg, ast.BinOp)
            and isinstance(arg.op, ast.Sub)
            and _name(arg.right) == run
            and not _uses([arg.left], {run})
        ):
            return i, s, t
    return None


class OnlineSoftmax(Operator):
    """One pass over the column chunks with a running max and a rescaled running sum."""

    id = "online-softmax"
    name = "Online softmax (running max and rescaled sum)"
    intent = (
        "Fuse the max pass and the sum-of-exponentials pass over a row's column chunks into one pass "
        "that rescales the running sum whenever the running max grows, so each chunk is read once."
    )
    carrier = (
        "the chunk loop (and tail branch) of a row reduction: m_new = max(m, max(x)); "
        "s = s * exp(m - m_new) + sum(exp(x - m_new)); m = m_new"
    )
    anchor_predicate = "row_reduction and not online_softmax and n_loops >= 2"
    anchor_description = (
        "a max pass followed by a sum-of-exp pass over the same column chunks (two reads of the row)"
    )

    # -- recognition
    def _regions(self, m: Module) -> list[tuple[Kernel, list[ast.stmt], int, int, list[_Online]]]:
        """Runs of consecutive chunk statements (loops / branches) each holding one online update of
        the same (m, s), whose other statements never read the statistics."""
        out = []
        for k in m.kernels:
            for body in _bodies(k.node):
                i = 0
                while i < len(body):
                    run: list[_Online] = []
                    j = i
                    while j < len(body) and _header(m, body[j]) is not None:
                        u = _online_update(m, body[j].body)  # type: ignore[attr-defined]
                        if u is None or (run and (u.m, u.s) != (run[0].m, run[0].s)):
                            break
                        run.append(u)
                        j += 1
                    if run and self._clean(m, body[i:j], run):
                        out.append((k, body, i, j, run))
                        i = j
                    else:
                        i += 1
        return out

    @staticmethod
    def _clean(m: Module, stmts: list[ast.stmt], ups: list[_Online]) -> bool:
        for st, u in zip(stmts, ups, strict=True):
            head = [st.iter, st.target] if isinstance(st, ast.For) else [st.test]  # type: ignore[attr-defined]
            names = {u.m, u.s, u.new, u.sub}
            others = st.body[: u.start] + st.body[u.end :]  # type: ignore[attr-defined]
            if _uses(head + others, names):  # type: ignore[arg-type]
                return False
        return True

    def _two_pass(self, m: Module) -> list[tuple[Kernel, list[ast.stmt], int, int, int, list[Any]]]:
        """(kernel, body, pass-1 start, pass-2 start, pass-2 end, per-chunk parts) of a max pass
        followed (after only movable assignments) by a sum pass with the same chunk headers."""
        out = []
        for k in m.kernels:
            for body in _bodies(k.node):
                for i in range(len(body)):
                    found = self._two_pass_at(m, body, i)
                    if found is not None:
                        out.append((k, body, i, *found))
        return out

    def _two_pass_at(self, m: Module, body: list[ast.stmt], i: int) -> tuple[int, int, list[Any]] | None:
        p1: list[tuple[ast.stmt, int, ast.expr]] = []
        run = None
        j = i
        while j < len(body) and _header(m, body[j]) is not None:
            parts = _two_pass_parts(m, body[j].body)  # type: ignore[attr-defined]
            if parts is None or (run is not None and parts[1] != run):
                break
            run = parts[1]
            p1.append((body[j], parts[0], parts[2]))
            j += 1
        if not p1 or run is None:
            return None
        mid = j
        assigned1 = {
            n.id
            for st, _, _ in p1
            for n in ast.walk(st)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        } | {run}
        while mid < len(body) and _assign(body[mid]) is not None and not _uses([body[mid]], assigned1):
            mid += 1
        if mid + len(p1) > len(body):
            return None
        parts_out = []
        s_name = None
        for n, (st1, idx1, red) in enumerate(p1):
            st2 = body[mid + n]
            if _header(m, st2) != _header(m, st1):
                return None
            su = _sum_update(m, st2.body, run)  # type: ignore[attr-defined]
            if su is None or (s_name is not None and su[1] != s_name):
                return None
            s_name = su[1]
            rest1 = [m.src.seg(s) for x, s in enumerate(st1.body) if x != idx1]  # type: ignore[attr-defined]
            rest2 = [m.src.seg(s) for x, s in enumerate(st2.body) if x != su[0]]  # type: ignore[attr-defined]
            others = [s for x, s in enumerate(st1.body) if x != idx1]  # type: ignore[attr-defined]
            if rest1 != rest2 or _uses(others, {run, s_name}):
                return None
            parts_out.append((st1, idx1, red, st2, su[0], su[2]))
        # the sum must start from a value set before pass 2 and not read in pass 1
        if s_name is None or _uses([st for st, _, _ in p1], {s_name}):
            return None
        return mid, mid + len(p1), parts_out

    def detect(self, source: str) -> list[Anchor]:
        """Online updates (present); a max pass followed by a sum-of-exp pass (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k, body, i, j, _ in self._regions(m):
            a = anchor("present", body[i], f"{k.name}: running max and rescaled sum over chunks", k)
            last = body[j - 1].end_lineno or a.end_line
            out.append(Anchor("present", a.start_line, last, a.description, k.name))
        for k, body, i, _mid, end, _ in self._two_pass(m):
            a = anchor("applicable", body[i], f"{k.name}: max pass then sum-of-exp pass", k)
            last = body[end - 1].end_lineno or a.end_line
            out.append(Anchor("applicable", a.start_line, last, a.description, k.name))
        return out

    # -- simplify: two passes
    def simplify(self, source: str) -> Rewrite | None:
        """Split each online region into a max pass (``m = tl.maximum(m, r)``) and a second pass
        accumulating ``s = s + sum(exp(x - m))`` against the final max."""
        m = parse(source)
        if m is None:
            return None
        edits = []
        for _k, body, i, j, ups in self._regions(m):
            start, end = _lines(m, body[i], body[j - 1])
            pass1 = self._region_text(
                m, body[i:j], ups, lambda u, ind: f"{ind}{u.m} = {m.tl}.maximum({u.m}, {m.src.seg(u.r)})\n"
            )
            pass2 = self._region_text(
                m, body[i:j], ups, lambda u, ind: f"{ind}{u.s} = {u.s} + {_sub_names(m, u.t, {u.sub: u.m})}\n"
            )
            indent = m.src.indent_of(body[i].lineno)
            note = f"{indent}# second pass: sum of exponentials against the final max\n"
            edits.append(Edit(start, end, pass1 + note + pass2))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"code": hunks(source, edits)}, "simplify")

    @staticmethod
    def _region_text(m: Module, stmts: list[ast.stmt], ups: list[_Online], line: Any) -> str:
        start, end = _lines(m, stmts[0], stmts[-1])
        inner = []
        for st, u in zip(stmts, ups, strict=True):
            first, last = st.body[u.start], st.body[u.end - 1]  # type: ignore[attr-defined]
            ind = m.src.indent_of(first.lineno)
            s, e = _lines(m, first, last)
            inner.append(Edit(s - start, e - start, line(u, ind)))
        return apply_edits(m.src.text[start:end], inner)

    # -- apply: fuse the passes
    def apply(
        self, source: str, code: list[dict[str, Any]] | None = None, kernel: str | None = None, **params: Any
    ) -> Rewrite | None:
        """Fuse a max pass and the following sum-of-exp pass into one online pass; the subtracted max
        is guarded (``where(m_new == -inf, 0, m_new)``) so fully masked chunks give 0, not NaN.
        ``kernel`` restricts the fusion to that kernel. With the ``code`` simplify recorded, the
        expert's online update goes back exactly as written (guarded or not, its own names)."""
        check_params(self.id, params, ())
        if require_list(self.id, "code", code) is not None:
            return rewrite_with_hunks(self, source, code, {"code": code})
        m = parse(source)
        if m is None:
            return None
        found = self._two_pass(m)
        if not found:
            return None
        found = [f for f in found if kernel is None or f[0].name == kernel]
        if not found:
            return None
        k, body, i, mid, end, parts = found[0]
        run = _two_pass_parts(m, parts[0][0].body)[1]  # type: ignore[index]
        new = unique_name(m.src.tree, f"{run}_new")
        safe = unique_name(m.src.tree, f"{run}_safe")
        edits = []
        start1 = _lines(m, body[i], body[i])[0]
        # movable assignments between the passes (the sum's initial value) go before pass 1
        between = body[i + len(parts) : mid]
        if between:
            s, e = _lines(m, between[0], between[-1])
            moved = m.src.text[s:e]
            edits.append(Edit(s, e, ""))
            edits.append(Edit(start1, start1, moved))
        for st1, idx1, red, _st2, _idx2, t in parts:
            mx = st1.body[idx1]
            ind = m.src.indent_of(mx.lineno)
            e = t.args[0]
            exp_fn = m.src.seg(e.func)
            factor = _split_scale(e.args[0])[1]
            rescale = f"({run} - {safe}) * {m.src.seg(factor)}" if factor is not None else f"{run} - {safe}"
            s_name = _sum_update(m, _st2.body, run)[1]  # type: ignore[index]
            text = (
                f"{ind}{new} = {m.tl}.maximum({run}, {m.src.seg(red)})\n"
                f"{ind}{safe} = {m.tl}.where({new} == -float(\"inf\"), 0.0, {new})  # no -inf - -inf\n"
                f"{ind}{s_name} = {s_name} * {exp_fn}({rescale}) + {_sub_names(m, t, {run: safe})}\n"
                f"{ind}{run} = {new}\n"
            )
            edits.append(Edit(*_lines(m, mx, mx), text))
        # pass 2 goes, with the comment lines right above it
        first = m.src.stmt_lines(body[mid])[0]
        while first > 1 and m.src.lines[first - 2].strip().startswith("#"):
            first -= 1
        edits.append(Edit(m.src.line_span(first, first)[0], _lines(m, body[mid], body[end - 1])[1], ""))
        try:
            after = apply_edits(source, edits)
        except ValueError:
            return None
        return self._rewrite(source, after, {"kernel": k.name}, "apply")


# -------------------------------------------------------------------------------------- causal-skip


def _minimum_bound(m: Module, k: Kernel, node: ast.expr, derived: set[str]) -> ast.expr | None:
    """For a diagonal bound ``tl.minimum(diag, N)`` (diag depends on the program id, N does not; a
    local name is followed to its single assignment) return N."""
    if isinstance(node, ast.Name):
        assigns = [
            a for b in _bodies(k.node) for st in b if (a := _assign(st)) is not None and a[0] == node.id
        ]
        if len(assigns) != 1:
            return None
        node = assigns[0][1]
    if tl_func(node, m.al) != "minimum" or len(node.args) != 2:  # type: ignore[attr-defined]
        return None
    a, b = node.args  # type: ignore[attr-defined]
    da, db = _uses([a], derived), _uses([b], derived)
    if da and not db:
        return b
    if db and not da:
        return a
    return None


class CausalSkip(Operator):
    """Causal attention visits only the key blocks at or below the diagonal; the mask is applied on
    the diagonal blocks only."""

    id = "causal-skip"
    name = "Skip key blocks above the causal diagonal"
    intent = (
        "Stop the key loop of causal attention at the diagonal and run the blocks strictly below it "
        "without the causal mask, so about half of the QK^T and PV work disappears."
    )
    carrier = (
        "the key-block loop of an attention kernel: split into an unmasked loop up to the query block's "
        "first row and a masked loop over the diagonal block(s), upper bound min(diagonal end, N)"
    )
    anchor_predicate = "has_dot and n_dots >= 2 and not causal_skip"
    anchor_description = (
        "an attention loop over every key block that applies a causal tl.where mask "
        "(offs_m[:, None] >= offs_n[None, :]) on each block"
    )

    # -- present: two consecutive loops, or two calls of a jit helper looping over [lo, hi)
    def _loop_splits(self, m: Module) -> list[tuple[Kernel, ast.For, ast.For, ast.expr]]:
        out = []
        for k in m.kernels:
            derived = pid_derived(k.node, m.al)
            for body in _bodies(k.node):
                for a, b in itertools.pairwise(body):
                    ra, rb = range_call(a, m.al), range_call(b, m.al)
                    if ra is None or rb is None or len(ra.args) != 3 or len(rb.args) != 3:
                        continue
                    assert isinstance(a, ast.For) and isinstance(b, ast.For)
                    if m.src.seg(a.target) != m.src.seg(b.target) or m.src.seg(ra.args[2]) != m.src.seg(rb.args[2]):
                        continue
                    if m.src.seg(ra.args[1]) != m.src.seg(rb.args[0]) or not _uses([ra.args[1]], derived):
                        continue
                    n = _minimum_bound(m, k, rb.args[1], derived)
                    masked = any(tl_func(x, m.al) == "where" for x in ast.walk(b))
                    if n is not None and masked and len(b.body) > len(a.body):
                        out.append((k, a, b, n))
        return out

    def _call_splits(self, m: Module) -> list[tuple[Kernel, list[ast.stmt], int, int, int, int, ast.expr]]:
        """(kernel, body, first stmt, second stmt, lo index, hi index, N) for two helper calls."""
        helpers = {k.name: k for k in m.kernels}
        out = []
        for k in m.kernels:
            derived = pid_derived(k.node, m.al)
            for body in _bodies(k.node):
                for i, st in enumerate(body):
                    first = self._helper_call(st, helpers)
                    if first is None:
                        continue
                    for j in range(i + 1, min(i + 3, len(body))):
                        second = self._helper_call(body[j], helpers)
                        if second is None:
                            if _assign(body[j]) is None:
                                break
                            continue
                        found = self._pair(m, k, body, i, j, first, second, derived, helpers)
                        if found is not None:
                            out.append(found)
                        break
        return out

    @staticmethod
    def _helper_call(st: ast.stmt, helpers: dict[str, Kernel]) -> ast.Call | None:
        value = st.value if isinstance(st, (ast.Assign, ast.Expr)) else None
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in helpers
            and not value.keywords
            and not any(isinstance(a, ast.Starred) for a in value.args)
        ):
            return value
        return None

    def _pair(
        self, m: Module, k: Kernel, body: list[ast.stmt], i: int, j: int, c1: ast.Call, c2: ast.Call,
        derived: set[str], helpers: dict[str, Kernel],
    ) -> tuple[Kernel, list[ast.stmt], int, int, int, int, ast.expr] | None:
        s1, s2 = body[i], body[j]
        if _func_name(c1) != _func_name(c2) or len(c1.args) != len(c2.args):
            return None
        if isinstance(s1, ast.Assign) != isinstance(s2, ast.Assign):
            return None
        if isinstance(s1, ast.Assign) and m.src.seg(s1.targets[0]) != m.src.seg(s2.targets[0]):  # type: ignore[attr-defined]
            return None
        diff = [x for x, (a, b) in enumerate(zip(c1.args, c2.args, strict=True)) if m.src.seg(a) != m.src.seg(b)]
        pairs = [
            (lo, hi)
            for lo in diff
            for hi in diff
            if lo < hi and m.src.seg(c1.args[hi]) == m.src.seg(c2.args[lo]) and _uses([c2.args[lo]], derived)
        ]
        if len(pairs) != 1:
            return None
        lo, hi = pairs[0]
        flags = [x for x in diff if x not in (lo, hi)]
        if not flags or not all(
            isinstance(c1.args[x], ast.Constant) and c1.args[x].value is False  # type: ignore[attr-defined]
            and isinstance(c2.args[x], ast.Constant) and c2.args[x].value is True  # type: ignore[attr-defined]
            for x in flags
        ):
            return None
        helper = helpers[_func_name(c1)]  # type: ignore[index]
        params = [p.name for p in helper.params]
        if len(params) != len(c1.args):
            return None
        # the helper loops over range(lo, hi, ...) and masks with tl.where under the flags
        rcs = [range_call(n, m.al) for n in ast.walk(helper.node) if isinstance(n, ast.For)]
        if not any(
            rc is not None and len(rc.args) >= 2 and _name(rc.args[0]) == params[lo] and _name(rc.args[1]) == params[hi]
            for rc in rcs
        ):
            return None
        for x in flags:
            guarded = [
                n for n in ast.walk(helper.node) if isinstance(n, ast.If) and _uses([n.test], {params[x]})
            ]
            if not any(tl_func(w, m.al) == "where" for g in guarded for w in ast.walk(g)):
                return None
        # statements between the calls: assignments used only by the second call
        between = body[i + 1 : j]
        names = {a[0] for st in between if (a := _assign(st)) is not None}
        rest = [st for x, st in enumerate(body) if x not in range(i, j + 1)]
        if _uses(rest, names):
            return None
        n = _minimum_bound(m, k, c2.args[hi], derived)
        if n is None:
            return None
        return k, body, i, j, lo, hi, n

    def detect(self, source: str) -> list[Anchor]:
        """A split key loop (present); a single key loop with a causal tl.where mask (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k, a, b, _n in self._loop_splits(m):
            out.append(Anchor("present", a.lineno, b.end_lineno or b.lineno, "unmasked + diagonal key loops", k.name))
        for k, body, i, j, *_ in self._call_splits(m):
            out.append(
                Anchor("present", body[i].lineno, body[j].end_lineno or body[j].lineno,
                       "off-diagonal (unmasked) and diagonal (masked) key-block helper calls", k.name)
            )
        for k, loop, *_ in self._causal_loops(m):
            out.append(anchor("applicable", loop, "key loop masking every block causally", k))
        for st, call, *_ in self._causal_calls(m):
            out.append(anchor("applicable", st, f"{_func_name(call)} called over every key block, causal mask on"))
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """One loop (or helper call) over every key block up to N, the causal mask on each block."""
        m = parse(source)
        if m is None:
            return None
        edits = []
        for _k, a, b, n in self._loop_splits(m):
            ra, rb = range_call(a, m.al), range_call(b, m.al)
            assert ra is not None and rb is not None
            edits.append(Edit(_comment_start(m, a), _lines(m, a, a)[1], ""))
            cb = _comment_start(m, b)
            if cb < _lines(m, b, b)[0]:
                edits.append(Edit(cb, _lines(m, b, b)[0], ""))
            edits.append(Edit(*m.src.span(rb.args[0]), m.src.seg(ra.args[0])))
            edits.append(Edit(*m.src.span(rb.args[1]), m.src.seg(n)))
        for _k, body, i, j, lo, hi, n in self._call_splits(m):
            c1, c2 = self._helper_call(body[i], {}) or body[i].value, body[j].value  # type: ignore[attr-defined]
            s2 = body[j]
            base = m.src.line_span(m.src.stmt_lines(s2)[0], m.src.stmt_lines(s2)[0])[0]
            end = _lines(m, s2, s2)[1]
            inner = [
                Edit(*(p - base for p in m.src.span(c2.args[lo])), m.src.seg(c1.args[lo])),
                Edit(*(p - base for p in m.src.span(c2.args[hi])), m.src.seg(n)),
            ]
            text = apply_edits(m.src.text[base:end], inner)
            # comment lines right above the first call describe the split: they go with it
            first = m.src.stmt_lines(body[i])[0]
            while first > 1 and m.src.lines[first - 2].strip().startswith("#"):
                first -= 1
            start = m.src.line_span(first, first)[0]
            indent = m.src.indent_of(body[i].lineno)
            note = f"{indent}# every key block up to {m.src.seg(n)}, the causal mask on each\n"
            edits.append(Edit(start, end, note + text))
        if not edits:
            return None
        try:
            after = apply_edits(source, edits)
        except ValueError:
            return None
        return self._rewrite(source, after, {"code": hunks(source, edits)}, "simplify")

    # -- apply: split a causally masked loop
    def _causal_loops(self, m: Module) -> list[tuple[Kernel, ast.For, ast.stmt, ast.stmt | None, str, str, str, str]]:
        """(kernel, loop, where stmt, mask stmt or None, first query row A, BM, step, N)."""
        out = []
        split = {id(a) for _, a, _, _ in self._loop_splits(m)} | {id(b) for _, _, b, _ in self._loop_splits(m)}
        for k in m.launched:
            derived = pid_derived(k.node, m.al)
            top = {a[0]: a[1] for st in k.node.body if (a := _assign(st)) is not None}
            for loop in [n for n in ast.walk(k.node) if isinstance(n, ast.For)]:
                rc = range_call(loop, m.al)
                if id(loop) in split or rc is None or len(rc.args) != 3 or kwarg(rc, "num_stages") is not None:
                    continue
                if not (isinstance(rc.args[0], ast.Constant) and rc.args[0].value == 0):
                    continue
                if not isinstance(loop.target, ast.Name) or _uses([rc.args[1]], derived):
                    continue
                found = self._mask_in(m, loop, top, derived, m.src.seg(rc.args[2]), m.src.seg(rc.args[1]))
                if found is not None:
                    out.append((k, loop, *found, m.src.seg(rc.args[2]), m.src.seg(rc.args[1])))
        return out

    def _mask_in(
        self, m: Module, loop: ast.For, top: dict[str, ast.expr], derived: set[str], step: str, bound: str
    ) -> tuple[ast.stmt, ast.stmt | None, str, str] | None:
        local = {a[0]: (st, a[1]) for st in loop.body if (a := _assign(st)) is not None}
        var = loop.target.id  # type: ignore[attr-defined]
        for st in loop.body:
            a = _assign(st)
            if a is None or tl_func(a[1], m.al) != "where" or len(a[1].args) != 3:  # type: ignore[attr-defined]
                continue
            cond, x, _neg = a[1].args  # type: ignore[attr-defined]
            if _name(x) != a[0]:
                continue
            mask_stmt = None
            if isinstance(cond, ast.Name) and cond.id in local:
                mask_stmt, cond = local[cond.id]
                used = [n for s in loop.body if s is not st and s is not mask_stmt for n in ast.walk(s)]
                if any(isinstance(n, ast.Name) and n.id == _assign(mask_stmt)[0] for n in used):  # type: ignore[index]
                    mask_stmt = None  # still needed elsewhere: keep it
            terms = _conjuncts(cond)
            causal = [t for t in terms if self._causal_cmp(m, t, top, local, derived, var, step) is not None]
            if len(causal) != 1:
                continue
            rest_ok = all(t is causal[0] or self._key_bound(m, t, local, var, step, bound) for t in terms)
            if not rest_ok:
                continue
            a_text, bm = self._causal_cmp(m, causal[0], top, local, derived, var, step)  # type: ignore[misc]
            return st, mask_stmt, a_text, bm
        return None

    @staticmethod
    def _offsets(m: Module, node: ast.expr, defs: dict[str, ast.expr]) -> tuple[ast.expr, ast.expr] | None:
        """A name defined as ``A + tl.arange(0, B)``: (A, B)."""
        v = defs.get(node.id) if isinstance(node, ast.Name) else None
        if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add)):
            return None
        for base, ar in ((v.left, v.right), (v.right, v.left)):
            if tl_func(ar, m.al) == "arange" and len(ar.args) == 2 and m.src.seg(ar.args[0]) == "0":  # type: ignore
                return base, ar.args[1]  # type: ignore[attr-defined]
        return None

    def _causal_cmp(
        self, m: Module, t: ast.expr, top: dict[str, ast.expr], local: dict[str, tuple[ast.stmt, ast.expr]],
        derived: set[str], var: str, step: str,
    ) -> tuple[str, str] | None:
        """``Q[:, None] >= K[None, :]`` with Q = A + arange(0, BM) (A from the program id) and
        K = loop var + arange(0, step): (A, BM)."""
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1):
            return None
        left, right = t.left, t.comparators[0]
        if isinstance(t.ops[0], ast.LtE):
            left, right = right, left
        elif not isinstance(t.ops[0], ast.GtE):
            return None
        if not (isinstance(left, ast.Subscript) and isinstance(right, ast.Subscript)):
            return None
        q = self._offsets(m, left.value, top)
        kk = self._offsets(m, right.value, {n: v for n, (_s, v) in local.items()})
        if q is None or kk is None:
            return None
        if _name(kk[0]) != var or m.src.seg(kk[1]) != step or not _uses([q[0]], derived):
            return None
        if m.src.seg(left.slice) != ":, None" or m.src.seg(right.slice) != "None, :":
            return None
        return m.src.seg(q[0]), m.src.seg(q[1])

    def _key_bound(
        self, m: Module, t: ast.expr, local: dict[str, tuple[ast.stmt, ast.expr]], var: str, step: str, bound: str
    ) -> bool:
        """``K[None, :] < N`` with N the loop's upper bound: true on every block below the diagonal."""
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Lt)):
            return False
        left = t.left
        if not isinstance(left, ast.Subscript) or m.src.seg(t.comparators[0]) != bound:
            return False
        kk = self._offsets(m, left.value, {n: v for n, (_s, v) in local.items()})
        return kk is not None and _name(kk[0]) == var and m.src.seg(kk[1]) == step

    def _causal_calls(self, m: Module) -> list[tuple[ast.stmt, ast.Call, int, int, int, str, str, str]]:
        """One call of a jit helper that loops over ``range(lo, hi, BN)`` with lo = 0 passed, and whose
        single True constexpr flag guards the causal comparison ``P[:, None] >= <key offsets>`` (P a
        helper parameter the caller binds to ``A + tl.arange(0, BM)``, A from the program id):
        (statement, call, lo index, hi index, flag index, A, BM, BN as the caller writes them)."""
        helpers = {k.name: k for k in m.kernels}
        split = {id(body[x]) for _k, body, i, j, *_ in self._call_splits(m) for x in (i, j)}
        out = []
        for k in m.launched:
            derived = pid_derived(k.node, m.al)
            defs = {a[0]: a[1] for b in _bodies(k.node) for st in b if (a := _assign(st)) is not None}
            for body in _bodies(k.node):
                for st in body:
                    call = self._helper_call(st, helpers)
                    if call is None or id(st) in split:
                        continue
                    found = self._causal_call(m, helpers[_func_name(call)], call, defs, derived)  # type: ignore[index]
                    if found is not None:
                        out.append((st, call, *found))
        return out

    def _causal_call(
        self, m: Module, helper: Kernel, call: ast.Call, defs: dict[str, ast.expr], derived: set[str]
    ) -> tuple[int, int, int, str, str, str] | None:
        params = [p.name for p in helper.params]
        if len(params) != len(call.args):
            return None
        for loop in (n for n in ast.walk(helper.node) if isinstance(n, ast.For)):
            rc = range_call(loop, m.al)
            if rc is None or len(rc.args) != 3 or not isinstance(loop.target, ast.Name):
                continue
            lo, hi = _name(rc.args[0]), _name(rc.args[1])
            if lo not in params or hi not in params:
                continue
            lo_i, hi_i = params.index(lo), params.index(hi)  # type: ignore[arg-type]
            if not (isinstance(call.args[lo_i], ast.Constant) and call.args[lo_i].value == 0):  # type: ignore[attr-defined]
                continue
            step = _name(rc.args[2])
            step_text = m.src.seg(call.args[params.index(step)]) if step in params else m.src.seg(rc.args[2])
            flags = [
                x for x, a in enumerate(call.args)
                if isinstance(a, ast.Constant) and a.value is True and helper.param(params[x]).constexpr  # type: ignore[union-attr]
            ]
            hits = [(x, q) for x in flags if (q := self._guarded_causal(m, helper, params, x, loop)) is not None]
            if len(hits) != 1:
                continue
            flag, q_param = hits[0]
            q = self._offsets(m, call.args[params.index(q_param)], defs)
            if q is None or not _uses([q[0]], derived):
                continue
            return lo_i, hi_i, flag, m.src.seg(q[0]), m.src.seg(q[1]), step_text
        return None

    def _guarded_causal(self, m: Module, helper: Kernel, params: list[str], flag: int, loop: ast.For) -> str | None:
        """The helper parameter P of the causal mask ``keep = P[:, None] >= (v + O[None, :])`` (v the
        loop variable, O = tl.arange(0, step); ``<=`` mirrored), assigned whole in the body of an
        ``if FLAG:``, with no other comparison on v or P there (a window or a strict ``>`` would
        make the unmasked blocks below the diagonal wrong); None otherwise."""
        var, step = loop.target.id, m.src.seg(range_call(loop, m.al).args[2])  # type: ignore[attr-defined,union-attr]
        defs = {a[0]: a[1] for b in _bodies(helper.node) for st in b if (a := _assign(st)) is not None}
        for node in ast.walk(helper.node):
            if not (isinstance(node, ast.If) and _name(node.test) == params[flag]):
                continue
            compares = [t for st in node.body for t in ast.walk(st) if isinstance(t, ast.Compare)
                        and _uses([t], {var, *params})]
            mask = next((a[1] for st in node.body if (a := _assign(st)) is not None and a[1] in compares), None)
            if len(compares) != 1 or mask is None or len(mask.ops) != 1:  # type: ignore[attr-defined]
                continue
            left, right = mask.left, mask.comparators[0]  # type: ignore[attr-defined]
            if isinstance(mask.ops[0], ast.LtE):  # type: ignore[attr-defined]
                left, right = right, left
            elif not isinstance(mask.ops[0], ast.GtE):  # type: ignore[attr-defined]
                continue
            if not (isinstance(left, ast.Subscript) and _name(left.value) in params
                    and m.src.seg(left.slice) == ":, None"):
                continue
            if self._key_offsets(m, right, defs, var, step):
                return left.value.id  # type: ignore[attr-defined]
        return None

    def _key_offsets(self, m: Module, node: ast.expr, defs: dict[str, ast.expr], var: str, step: str) -> bool:
        """``v + O[None, :]`` / ``O[None, :] + v`` with O = tl.arange(0, step), or ``K[None, :]`` with
        K = v + tl.arange(0, step): the keys of the block starting at v."""
        if isinstance(node, ast.Subscript) and m.src.seg(node.slice) == "None, :":
            kk = self._offsets(m, node.value, defs)
            return kk is not None and _name(kk[0]) == var and m.src.seg(kk[1]) == step
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            return False
        for v, o in ((node.left, node.right), (node.right, node.left)):
            if _name(v) != var or not (isinstance(o, ast.Subscript) and m.src.seg(o.slice) == "None, :"):
                continue
            ar = defs.get(_name(o.value) or "")
            if (tl_func(ar, m.al) == "arange" and len(ar.args) == 2  # type: ignore[union-attr]
                    and m.src.seg(ar.args[0]) == "0" and m.src.seg(ar.args[1]) == step):  # type: ignore[union-attr]
                return True
        return False

    def _split_call(self, m: Module, found: tuple[ast.stmt, ast.Call, int, int, int, str, str, str]) -> Edit:
        """The edit replacing one masked helper call by an unmasked call below the diagonal and a
        masked one over the diagonal block(s)."""
        st, call, lo, hi, flag, a_text, bm, step = found
        a_p = a_text if _simple(a_text) else f"({a_text})"
        diag = f"{a_p} // {step} * {step}"
        start, end = _lines(m, st, st)

        def with_args(new: dict[int, str]) -> str:
            return apply_edits(m.src.text[start:end], [
                Edit(*(p - start for p in m.src.span(call.args[x])), text) for x, text in new.items()
            ])

        ind = m.src.indent_of(st.lineno)
        n_text = m.src.seg(call.args[hi])
        return Edit(start, end, (
            f"{ind}# key blocks below the diagonal: every key precedes every query, no causal mask\n"
            + with_args({hi: diag, flag: "False"})
            + f"{ind}# diagonal block(s): causal mask; blocks above the diagonal are skipped\n"
            + with_args({lo: diag, hi: f"{m.tl}.minimum({a_text} + {bm}, {n_text})"})
        ))

    def apply(self, source: str, code: list[dict[str, Any]] | None = None, **params: Any) -> Rewrite | None:
        """Split a causally masked key loop ``range(0, N, BN)`` into ``range(0, A // BN * BN, BN)``
        without the mask (every key precedes every query there) and ``range(A // BN * BN,
        tl.minimum(A + BM, N), BN)`` with it; blocks past the diagonal are never visited. A jit helper
        called over [0, N) with a causal flag (``_causal_calls``) becomes two calls the same way, the
        flag off below the diagonal. With the ``code`` simplify recorded, the expert's split (loops or
        helper calls) goes back exactly."""
        check_params(self.id, params, ())
        if require_list(self.id, "code", code) is not None:
            return rewrite_with_hunks(self, source, code, {"code": code})
        m = parse(source)
        if m is None:
            return None
        found = self._causal_loops(m)
        if not found:
            calls = self._causal_calls(m)
            if not calls:
                return None
            return self._rewrite(source, apply_edits(source, [self._split_call(m, calls[0])]), {}, "apply")
        edits = []
        for _k, loop, where, mask_stmt, a_text, bm, step, n in found[:1]:
            rc = range_call(loop, m.al)
            assert rc is not None
            a_p = a_text if _simple(a_text) else f"({a_text})"
            diag = f"{a_p} // {step} * {step}"
            start, end = _lines(m, loop, loop)
            text = m.src.text[start:end]

            def rel(node: ast.AST, new: str, _start: int = start) -> Edit:
                s, e = m.src.span(node)
                return Edit(s - _start, e - _start, new)

            def drop(st: ast.stmt, _start: int = start) -> Edit:
                s, e = _lines(m, st, st)
                return Edit(s - _start, e - _start, "")

            ind = m.src.indent_of(loop.lineno)
            below = [rel(rc.args[1], diag), drop(where)] + ([drop(mask_stmt)] if mask_stmt is not None else [])
            diagonal = [rel(rc.args[0], diag), rel(rc.args[1], f"{m.tl}.minimum({a_text} + {bm}, {n})")]
            new = (
                f"{ind}# key blocks below the diagonal: every key precedes every query, no causal mask\n"
                + apply_edits(text, below)
                + f"{ind}# diagonal block(s): causal mask; blocks above the diagonal are skipped\n"
                + apply_edits(text, diagonal)
            )
            edits.append(Edit(start, end, new))
        return self._rewrite(source, apply_edits(source, edits), {}, "apply")


def _comment_start(m: Module, stmt: ast.stmt) -> int:
    """Offset of the first of the comment lines right above a statement (or of the statement)."""
    first = m.src.stmt_lines(stmt)[0]
    while first > 1 and m.src.lines[first - 2].strip().startswith("#"):
        first -= 1
    return m.src.line_span(first, first)[0]


def _simple(text: str) -> bool:
    try:
        node = pyast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
    )


def _conjuncts(node: ast.expr) -> list[ast.expr]:
    """``a & b & c`` as [a, b, c]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _func_name(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else None
