"""The online-softmax operator: one pass over a row's column chunks with a running max and a
rescaled running sum, instead of a max pass and a sum-of-exponentials pass.

Recognised structurally: which names are the running statistics, which chunk loops (and tail
branches) hold them. Two forms are applied: a row softmax's max pass and sum-of-exp pass over the same
chunks, and attention's (``WeightedPasses``: a max pass over key blocks, then a pass whose exp weights feed
accumulators linear in them, as a decode attention's denominator and weighted sum of values), folded into
the weighted pass with every accumulator rescaled by ``exp(m_old - m_new)``. simplify splits the row form.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, apply_edits
from klineage.transforms._triton import Kernel, dotted, loops, tl_call, tl_func, unique_name
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._statements import all_names, assign, bodies, name_of, stmt_span, uses


def _sub_names(m: Module, node: ast.AST, mapping: dict[str, str]) -> str:
    """Source of ``node`` with the names of ``mapping`` renamed."""
    start, end = m.src.span(node)
    text = m.src.text[start:end]
    hits = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in mapping]
    for h in sorted(hits, key=lambda n: m.src.span(n)[0], reverse=True):
        hs, he = m.src.span(h)
        text = text[: hs - start] + mapping[h.id] + text[he - start :]
    return text


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


def _own_nodes(loop: ast.For | ast.While) -> list[ast.AST]:
    """The nodes of a loop's body and else, not those inside a loop nested in it."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [*loop.body, *loop.orelse]
    while todo:
        n = todo.pop()
        out.append(n)
        if not isinstance(n, (ast.For, ast.While)):
            todo.extend(ast.iter_child_nodes(n))
    return out


def _running_max_loops(m: Module, k: Kernel) -> list[ast.For | ast.While]:
    """Loops of ``k`` that grow a running max (``new = tl.maximum(old, ...)``) and, in the same loop (not
    a nested or an enclosing one), rescale by the exponential of an expression reading both the old and
    the new max: an online softmax in any form, row or attention. A max pass followed by a separate
    sum-of-exp pass (``m = tl.maximum(m, ...)``, then ``exp(x - m)``) rescales nothing and is not one."""
    out = []
    for loop in loops(k.node):
        own = _own_nodes(loop)
        assigned = [a for st in own if isinstance(st, ast.stmt) and (a := assign(st)) is not None]
        pairs = set()
        for new, value in assigned:
            if isinstance(value, ast.Call) and tl_func(value, m.al) == "maximum":
                pairs |= {(new, old) for old in map(name_of, value.args) if old is not None and old != new}
                # ``old = m; m = tl.maximum(m, ...)``: the rescale reads the saved copy
                pairs |= {(new, saved) for saved, source in assigned if name_of(source) == new}
        # a guarded copy of the new max (``safe = tl.where(new == -inf, 0, new)``) rescales as the new max does
        pairs |= {(guard, old) for guard, value in assigned if tl_func(value, m.al) == "where"
                  for new, old in set(pairs) if new in all_names([value])}
        if any(_is_exp(m, n) and any({new, old} <= all_names([n]) for new, old in pairs) for n in own):
            out.append(loop)
    return out


@dataclass(frozen=True)
class OnlineUpdate:
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


def _online_update(m: Module, body: list[ast.stmt]) -> OnlineUpdate | None:
    for i, st in enumerate(body):
        a = assign(st)
        if a is None or tl_func(a[1], m.al) != "maximum" or len(a[1].args) != 2:  # type: ignore[attr-defined]
            continue
        new, call = a[0], a[1]
        run = name_of(call.args[0])  # type: ignore[attr-defined]
        if run is None:
            continue
        j, sub = i + 1, new
        g = assign(body[j]) if j < len(body) else None
        if g is not None and tl_func(g[1], m.al) == "where" and name_of(g[1].args[-1]) == new:  # type: ignore
            sub, j = g[0], j + 1
        if j + 1 >= len(body):
            return None
        upd, fin = assign(body[j]), assign(body[j + 1])
        if upd is None or fin is None or fin[0] != run or name_of(fin[1]) != new:
            return None
        s, v = upd
        # s * E(m - sub) + t
        if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and isinstance(v.left, ast.BinOp)):
            return None
        scale = v.left
        if not (isinstance(scale.op, ast.Mult) and name_of(scale.left) == s and _is_exp(m, scale.right)):
            return None
        arg = _unscaled(scale.right.args[0])  # type: ignore[attr-defined]
        if not (
            isinstance(arg, ast.BinOp)
            and isinstance(arg.op, ast.Sub)
            and name_of(arg.left) == run
            and name_of(arg.right) == sub
        ):
            return None
        t = v.right
        if tl_func(t, m.al) != "sum" or uses([t], {s, run}) or not uses([t], {sub}):
            return None
        return OnlineUpdate(i, j + 2, run, s, new, sub, call.args[1], t)  # type: ignore[attr-defined]
    return None


def _two_pass_parts(m: Module, body: list[ast.stmt]) -> tuple[int, str, ast.expr] | None:
    """``m = tl.maximum(m, tl.max(...))`` in a pass-1 body: (index, m, reduction)."""
    for i, st in enumerate(body):
        a = assign(st)
        if a is None or tl_func(a[1], m.al) != "maximum" or len(a[1].args) != 2:  # type: ignore[attr-defined]
            continue
        if name_of(a[1].args[0]) == a[0] and tl_func(a[1].args[1], m.al) == "max":  # type: ignore[attr-defined]
            return i, a[0], a[1].args[1]  # type: ignore[attr-defined]
    return None


def _sum_update(m: Module, body: list[ast.stmt], run: str) -> tuple[int, str, ast.Call] | None:
    """``s = s + tl.sum(E(x - m))`` / ``s += ...`` in a pass-2 body: (index, s, the sum)."""
    for i, st in enumerate(body):
        if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name):
            s, t = st.target.id, st.value
        else:
            a = assign(st)
            if a is None or not (
                isinstance(a[1], ast.BinOp) and isinstance(a[1].op, ast.Add) and name_of(a[1].left) == a[0]
            ):
                continue
            s, t = a[0], a[1].right
        if not tl_call(t, m.al, "sum") or not t.args or uses([t], {s}):
            continue
        e = t.args[0]
        if not isinstance(e, ast.Call) or not _is_exp(m, e):
            continue
        arg = _unscaled(e.args[0])
        if (
            isinstance(arg, ast.BinOp)
            and isinstance(arg.op, ast.Sub)
            and name_of(arg.right) == run
            and not uses([arg.left], {run})
        ):
            return i, s, t
    return None


@dataclass(frozen=True)
class OnlineRegion:
    """``body[start:end]``: consecutive chunk statements of ``kernel``, each holding one online update."""

    kernel: Kernel
    body: list[ast.stmt]
    start: int
    end: int
    updates: list[OnlineUpdate]


@dataclass(frozen=True)
class ChunkPair:
    """One chunk's statement in the max pass (``first``, its max update at ``max_index`` reducing
    ``reduced``) and in the sum pass (``second``, its sum update at ``sum_index`` adding ``term``)."""

    first: ast.stmt
    max_index: int
    reduced: ast.expr
    second: ast.stmt
    sum_index: int
    term: ast.Call


@dataclass(frozen=True)
class TwoPass:
    """A max pass ``body[start:...]`` and the sum pass ``body[mid:end]`` over the same chunks."""

    kernel: Kernel
    body: list[ast.stmt]
    start: int
    mid: int
    end: int
    parts: list[ChunkPair]


@dataclass(frozen=True)
class WeightedPasses:
    """Attention's two-pass form: a max pass ``first`` (``run = tl.maximum(run, tl.max(R))`` at
    ``max_index`` of its body) and a later loop ``second`` over the same chunks whose weights
    ``p = exp(a - run)`` (or ``tl.where(c, exp(a - run), 0)``) feed accumulators ``X = X + T(p)``, ``T``
    linear in one weight (a decode attention's ``denom`` and ``acc``). ``insert_at`` is the first statement
    of ``second`` that reads ``run``; ``extras`` are the max pass's statements that ``second`` does not
    compute before it, as ``(target, value text)`` renamed to fresh names, and ``reduced`` the max's argument
    in those names."""

    kernel: Kernel
    first: ast.For
    second: ast.For
    run: str
    insert_at: int
    extras: tuple[tuple[str, str], ...]
    reduced: str
    weights: tuple[int, ...]
    accumulators: tuple[tuple[int, str, ast.expr], ...]
    exp_fn: str
    factor: str | None


def _assigned(stmts: Sequence[ast.stmt]) -> set[str]:
    return {n.id for st in stmts for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _read(nodes: Sequence[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _weight_exp(m: Module, value: ast.expr, run: str) -> ast.Call | None:
    """The exp call of a weight definition ``exp(a - run)`` / ``tl.where(c, exp(a - run), 0)``, with ``a``
    and ``c`` free of ``run``; None otherwise."""
    if tl_func(value, m.al) == "where" and isinstance(value, ast.Call) and len(value.args) == 3:
        cond, inner, other = value.args
        if not (isinstance(other, ast.Constant) and other.value == 0) or uses([cond], {run}):
            return None
        value = inner
    if not (isinstance(value, ast.Call) and _is_exp(m, value)):
        return None
    diff = _unscaled(value.args[0])
    if not (isinstance(diff, ast.BinOp) and isinstance(diff.op, ast.Sub) and name_of(diff.right) == run
            and not uses([diff.left], {run})):
        return None
    return value


def _linear_in(m: Module, node: ast.expr, weights: set[str]) -> int | None:
    """1 when ``node`` is linear in exactly one occurrence of a weight (products with weight-free factors,
    indexing, casts, ``tl.sum`` / ``tl.dot`` of a linear operand), 0 when it reads no weight, None otherwise."""
    if not uses([node], weights):
        return 0
    if isinstance(node, ast.Name):
        return 1
    if isinstance(node, ast.Subscript):
        return _linear_in(m, node.value, weights) if not uses([node.slice], weights) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        left, right = _linear_in(m, node.left, weights), _linear_in(m, node.right, weights)
        if isinstance(node.op, ast.Div):
            return left if right == 0 else None
        return 1 if {left, right} == {0, 1} else None
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and not uses(node.args, weights):
            return _linear_in(m, node.func.value, weights)
        func = tl_func(node, m.al)
        if func in ("sum", "dot") and not uses(node.keywords, weights):
            degrees = [_linear_in(m, a, weights) for a in node.args]
            known = [d for d in degrees if d is not None]
            return 1 if len(known) == len(degrees) and sorted(known) == [0] * (len(known) - 1) + [1] else None
    return None


def weighted_passes(m: Module, k: Kernel, body: list[ast.stmt], i: int, taken: set[str]) -> WeightedPasses | None:
    """The attention two-pass form starting at ``body[i]`` (see ``WeightedPasses``); None when the loops are
    not exactly that. Conservative: every statement of both loops is a plain assignment (the accumulators may
    be ``+=``), the max pass's names are not read after it but inside ``second`` (which recomputes them
    first), and nothing but the weights reads ``run`` inside ``second``. ``taken``: names not to reuse."""
    first = body[i]
    if not isinstance(first, ast.For) or first.orelse or _header(m, first) is None:
        return None
    parts = _two_pass_parts(m, first.body)
    if parts is None:
        return None
    max_index, run, reduced = parts
    pass1 = [st for x, st in enumerate(first.body) if x != max_index]
    if any(assign(st) is None for st in pass1) or uses(pass1, {run}):
        return None
    j = next((x for x in range(i + 1, len(body)) if _header(m, body[x]) == _header(m, first)), None)
    if j is None:
        return None
    second = body[j]
    between, after = body[i + 1:j], body[j + 1:]
    if not isinstance(second, ast.For) or any(assign(st) is None for st in between) or uses(between, {run}):
        return None
    names1 = _assigned(pass1)
    if _read(between) & names1 or _read(after) & (names1 - _assigned(second.body)):
        return None
    stmts = second.body
    insert_at = next((x for x, st in enumerate(stmts) if uses([st], {run})), None)
    if insert_at is None or insert_at == 0:
        return None
    pre, post = stmts[:insert_at], stmts[insert_at:]
    pre_assigns = [assign(st) for st in pre]
    if any(a is None for a in pre_assigns):
        return None
    pre_targets = [a[0] for a in pre_assigns if a is not None]
    if len(set(pre_targets)) != len(pre_targets):
        return None
    pre_text = {a[0]: m.src.seg(a[1]) for a in pre_assigns if a is not None}
    # a name of the max pass that pass 2 reads before assigning it would be pass 1's last value: not this form
    seen: set[str] = set()
    for st in stmts:
        if (_read([st]) & names1) - seen:
            return None
        seen |= _assigned([st])
    # the max pass's values in pass 2's names (shared when pass 2 computes the same), else fresh copies
    mapping: dict[str, str] = {}
    extras: list[tuple[str, str]] = []
    invariant = _read(pass1) - names1 - {run}
    if invariant & set(pre_targets) or _header(m, second) is None:
        return None
    used = set(taken)
    for st in pass1:
        target, value = assign(st)  # type: ignore[misc]
        text = _sub_names(m, value, mapping)
        if pre_text.get(target) == text and mapping.get(target, target) == target:
            mapping[target] = target  # pass 2 computes the same value under the same name before the insert
            continue
        fresh = unique_name(m.src.tree, f"{target}_max")
        while fresh in used:
            fresh = f"{fresh}_"
        used.add(fresh)
        extras.append((fresh, text))
        mapping[target] = fresh
    reduced_text = _sub_names(m, reduced, mapping)
    weights: list[int] = []
    weight_names: set[str] = set()
    accumulators: list[tuple[int, str, ast.expr]] = []
    exp_forms: set[tuple[str, str | None]] = set()
    for x, st in enumerate(post, start=insert_at):
        if uses([st], {run}):
            a = assign(st)
            call = _weight_exp(m, a[1], run) if a is not None else None
            if a is None or call is None or a[0] in weight_names:
                return None
            factor = _split_scale(call.args[0])[1]
            exp_forms.add((m.src.seg(call.func), m.src.seg(factor) if factor is not None else None))
            weights.append(x)
            weight_names.add(a[0])
            continue
        if not uses([st], weight_names):
            if _assigned([st]) & weight_names:
                return None
            continue
        if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name):
            acc, term = st.target.id, st.value
        else:
            a = assign(st)
            if a is None or not (isinstance(a[1], ast.BinOp) and isinstance(a[1].op, ast.Add)
                                 and name_of(a[1].left) == a[0]):
                return None
            acc, term = a[0], a[1].right
        if uses([term], {acc}) or _linear_in(m, term, weight_names) != 1:
            return None
        accumulators.append((x, acc, term))
    if not weights or not accumulators or len(exp_forms) != 1:
        return None
    accs = {a for _, a, _ in accumulators}
    for x, st in enumerate(stmts):
        if x not in {y for y, _, _ in accumulators} and uses([st], accs):
            return None  # an accumulator read or written elsewhere in the loop would see a rescaled value
    (exp_fn, scale_text), = exp_forms
    return WeightedPasses(k, first, second, run, insert_at, tuple(extras), reduced_text, tuple(weights),
                          tuple(accumulators), exp_fn, scale_text)


class OnlineSoftmax(Operator):
    """One pass over the column chunks with a running max and a rescaled running sum."""

    id = "online-softmax"
    feature = "online_softmax"
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
        "a max pass followed by a sum-of-exp pass over the same column chunks (two reads of the row), or by a "
        "pass of exp-weighted sums over the same key blocks (attention: K read twice)"
    )
    params = (Param("kernel"),)
    record = "code"

    # -- recognition
    def _regions(self, m: Module) -> list[OnlineRegion]:
        """Runs of consecutive chunk statements (loops / branches) each holding one online update of
        the same (m, s), whose other statements never read the statistics."""
        out = []
        for k in m.kernels:
            for body in bodies(k.node):
                i = 0
                while i < len(body):
                    run: list[OnlineUpdate] = []
                    j = i
                    while j < len(body) and _header(m, body[j]) is not None:
                        u = _online_update(m, body[j].body)  # type: ignore[attr-defined]
                        if u is None or (run and (u.m, u.s) != (run[0].m, run[0].s)):
                            break
                        run.append(u)
                        j += 1
                    if run and self._clean(m, body[i:j], run):
                        out.append(OnlineRegion(k, body, i, j, run))
                        i = j
                    else:
                        i += 1
        return out

    @staticmethod
    def _clean(m: Module, stmts: list[ast.stmt], ups: list[OnlineUpdate]) -> bool:
        for st, u in zip(stmts, ups, strict=True):
            head = [st.iter, st.target] if isinstance(st, ast.For) else [st.test]  # type: ignore[attr-defined]
            names = {u.m, u.s, u.new, u.sub}
            others = st.body[: u.start] + st.body[u.end :]  # type: ignore[attr-defined]
            if uses(head + others, names):
                return False
        return True

    def _two_pass(self, m: Module) -> list[TwoPass]:
        """A max pass followed (after only movable assignments) by a sum pass with the same chunk
        headers."""
        out = []
        for k in m.kernels:
            for body in bodies(k.node):
                for i in range(len(body)):
                    found = self._two_pass_at(m, body, i)
                    if found is not None:
                        out.append(TwoPass(k, body, i, *found))
        return out

    def _two_pass_at(self, m: Module, body: list[ast.stmt], i: int) -> tuple[int, int, list[ChunkPair]] | None:
        """(pass-2 start, pass-2 end, the chunk pairs) of a two-pass reduction whose max pass starts
        at ``body[i]``; None when there is none."""
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
        while mid < len(body) and assign(body[mid]) is not None and not uses([body[mid]], assigned1):
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
            if rest1 != rest2 or uses(others, {run, s_name}):
                return None
            parts_out.append(ChunkPair(st1, idx1, red, st2, su[0], su[2]))
        # the sum must start from a value set before pass 2 and not read in pass 1
        if s_name is None or uses([st for st, _, _ in p1], {s_name}):
            return None
        return mid, mid + len(p1), parts_out

    def _detect(self, m: Module) -> list[Anchor]:
        """Online updates (present); any other loop that rescales exponentials by a running max, as
        attention's key loop does (present, though simplify splits only row reductions); a max pass
        followed by a sum-of-exp pass (applicable)."""
        out = []
        regions = self._regions(m)
        for r in regions:
            k = r.kernel
            a = anchor("present", r.body[r.start], f"{k.name}: running max and rescaled sum over chunks", k)
            last = r.body[r.end - 1].end_lineno or a.end_line
            out.append(Anchor("present", a.start_line, last, a.description, k.name))
        covered = {id(n) for r in regions for st in r.body[r.start:r.end] for n in ast.walk(st)}
        for k in m.kernels:
            for loop in _running_max_loops(m, k):
                if id(loop) not in covered:
                    out.append(anchor("present", loop, f"{k.name}: a loop rescaling exponentials by a running "
                                      "max (simplify splits only row reductions)", k))
        for tp in self._two_pass(m):
            k = tp.kernel
            a = anchor("applicable", tp.body[tp.start], f"{k.name}: max pass then sum-of-exp pass", k)
            last = tp.body[tp.end - 1].end_lineno or a.end_line
            out.append(Anchor("applicable", a.start_line, last, a.description, k.name))
        for wp in self._weighted(m):
            k = wp.kernel
            a = anchor("applicable", wp.first, f"{k.name}: max pass then a pass of exp-weighted sums", k)
            out.append(Anchor("applicable", a.start_line, wp.second.end_lineno or a.end_line, a.description, k.name))
        return out

    # -- simplify: two passes
    def _simplify(self, m: Module) -> Rewrite | None:
        """Split each online region into a max pass (``m = tl.maximum(m, r)``) and a second pass
        accumulating ``s = s + sum(exp(x - m))`` against the final max."""
        edits = []
        for r in self._regions(m):
            body, i, j, ups = r.body, r.start, r.end, r.updates
            start, end = stmt_span(m, body[i], body[j - 1])
            pass1 = self._region_text(
                m, body[i:j], ups, lambda u, ind: f"{ind}{u.m} = {m.tl}.maximum({u.m}, {m.src.seg(u.r)})\n"
            )
            pass2 = self._region_text(
                m, body[i:j], ups, lambda u, ind: f"{ind}{u.s} = {u.s} + {_sub_names(m, u.t, {u.sub: u.m})}\n"
            )
            indent = m.src.indent_of(body[i].lineno)
            note = f"{indent}# second pass: sum of exponentials against the final max\n"
            edits.append(Edit(start, end, pass1 + note + pass2))
        return self._removed(m, edits)

    @staticmethod
    def _region_text(m: Module, stmts: list[ast.stmt], ups: list[OnlineUpdate], line: Any) -> str:
        start, end = stmt_span(m, stmts[0], stmts[-1])
        inner = []
        for st, u in zip(stmts, ups, strict=True):
            first, last = st.body[u.start], st.body[u.end - 1]  # type: ignore[attr-defined]
            ind = m.src.indent_of(first.lineno)
            s, e = stmt_span(m, first, last)
            inner.append(Edit(s - start, e - start, line(u, ind)))
        return apply_edits(m.src.text[start:end], inner)

    def _weighted(self, m: Module) -> list[WeightedPasses]:
        """Every attention two-pass form (``weighted_passes``) of the module's kernels."""
        out = []
        for k in m.kernels:
            for body in bodies(k.node):
                for i in range(len(body)):
                    found = weighted_passes(m, k, body, i, set())
                    if found is not None:
                        out.append(found)
        return out

    def _apply_weighted(self, m: Module, wp: WeightedPasses) -> Rewrite | None:
        """Fold the max pass into the weighted pass: before the first statement reading the max, the running
        max over this chunk (pass 1's values, shared with pass 2 where it computes them too), a guarded copy
        for the exponent, and the factor ``alpha`` that rescales every accumulator to the new max."""
        run, stmts = wp.run, wp.second.body
        new = unique_name(m.src.tree, f"{run}_new")
        safe = unique_name(m.src.tree, f"{run}_safe")
        alpha = unique_name(m.src.tree, "alpha")
        ind = m.src.indent_of(stmts[wp.insert_at].lineno)
        rescale = f"({run} - {safe}) * {wp.factor}" if wp.factor is not None else f"{run} - {safe}"
        head = "".join(f"{ind}{name} = {text}\n" for name, text in wp.extras)
        head += (f"{ind}{new} = {m.tl}.maximum({run}, {wp.reduced})\n"
                 f"{ind}{safe} = {m.tl}.where({new} == -float(\"inf\"), 0.0, {new})  # no -inf - -inf\n"
                 f"{ind}{alpha} = {wp.exp_fn}({rescale})\n")
        at = stmt_span(m, stmts[wp.insert_at], stmts[wp.insert_at])[0]
        edits = [Edit(*stmt_span(m, wp.first, wp.first), ""), Edit(at, at, head)]
        for x in wp.weights:
            value = stmts[x].value  # type: ignore[attr-defined]
            edits.append(Edit(*m.src.span(value), _sub_names(m, value, {run: safe})))
        for x, acc, term in wp.accumulators:
            edits.append(Edit(*stmt_span(m, stmts[x], stmts[x]),
                              f"{m.src.indent_of(stmts[x].lineno)}{acc} = {acc} * {alpha} + {m.src.seg(term)}\n"))
        end = stmt_span(m, stmts[-1], stmts[-1])[1]
        edits.append(Edit(end, end, f"{m.src.indent_of(stmts[-1].lineno)}{run} = {new}\n"))
        try:
            return self._edited(m, edits, {"kernel": wp.kernel.name}, "apply")
        except ValueError:  # overlapping edits
            return None

    def _apply(self, m: Module, kernel: str | None = None) -> Rewrite | None:
        """Fuse a max pass and the following sum-of-exp pass into one online pass; the subtracted max
        is guarded (``where(m_new == -inf, 0, m_new)``) so fully masked chunks give 0, not NaN.
        ``kernel`` restricts the fusion to that kernel. With the ``code`` simplify recorded, the
        expert's online update goes back exactly as written (guarded or not, its own names)."""
        found = [f for f in self._two_pass(m) if kernel is None or f.kernel.name == kernel]
        if not found:
            weighted = [w for w in self._weighted(m) if kernel is None or w.kernel.name == kernel]
            return self._apply_weighted(m, weighted[0]) if weighted else None
        tp = found[0]
        k, body, i, mid, end, parts = tp.kernel, tp.body, tp.start, tp.mid, tp.end, tp.parts
        run = _two_pass_parts(m, parts[0].first.body)[1]  # type: ignore[attr-defined,index]
        new = unique_name(m.src.tree, f"{run}_new")
        safe = unique_name(m.src.tree, f"{run}_safe")
        edits = []
        start1 = stmt_span(m, body[i], body[i])[0]
        # movable assignments between the passes (the sum's initial value) go before pass 1
        between = body[i + len(parts) : mid]
        if between:
            s, e = stmt_span(m, between[0], between[-1])
            moved = m.src.text[s:e]
            edits.append(Edit(s, e, ""))
            edits.append(Edit(start1, start1, moved))
        for part in parts:
            red, t = part.reduced, part.term
            mx = part.first.body[part.max_index]  # type: ignore[attr-defined]
            ind = m.src.indent_of(mx.lineno)
            exp_call = t.args[0]
            assert isinstance(exp_call, ast.Call), "the sum's argument is an exp call (_sum_update)"
            exp_fn = m.src.seg(exp_call.func)
            factor = _split_scale(exp_call.args[0])[1]
            rescale = f"({run} - {safe}) * {m.src.seg(factor)}" if factor is not None else f"{run} - {safe}"
            s_name = _sum_update(m, part.second.body, run)[1]  # type: ignore[attr-defined,index]
            text = (
                f"{ind}{new} = {m.tl}.maximum({run}, {m.src.seg(red)})\n"
                f"{ind}{safe} = {m.tl}.where({new} == -float(\"inf\"), 0.0, {new})  # no -inf - -inf\n"
                f"{ind}{s_name} = {s_name} * {exp_fn}({rescale}) + {_sub_names(m, t, {run: safe})}\n"
                f"{ind}{run} = {new}\n"
            )
            edits.append(Edit(*stmt_span(m, mx, mx), text))
        # pass 2 goes, with the comment lines right above it
        first = m.src.stmt_lines(body[mid])[0]
        while first > 1 and m.src.lines[first - 2].strip().startswith("#"):
            first -= 1
        edits.append(Edit(m.src.line_span(first, first)[0], stmt_span(m, body[mid], body[end - 1])[1], ""))
        try:
            return self._edited(m, edits, {"kernel": k.name}, "apply")
        except ValueError:  # overlapping edits
            return None
