"""The column-looped row kernels single-pass-row recognises (``looped_kernels``) and the
single-pass copy it writes of one (``single_pass_kernel``): the column loops unrolled for a column
block that covers the row, the repeated loads of the row merged into one."""

from __future__ import annotations

import ast
import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, Src, apply_edits, reindent
from klineage.transforms._triton import (
    Kernel,
    Launch,
    dotted,
    is_row_reduction,
    launch_args,
    range_call,
    single_value,
    tl_func,
    triton_func,
    unique_name,
)
from klineage.transforms.operators._dispatch import renamed_definition
from klineage.transforms.operators._statements import all_names

_SIDE_EFFECTS = {"store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg",
                 "atomic_and", "atomic_or", "atomic_xor", "device_print", "device_assert", "debug_barrier"}


# ------------------------------------------------------------------- the host dispatch (present)


@dataclass(frozen=True)
class Dispatch:
    """A host ``if next_power_of_2(n) <= MAX: <single-pass launch> else: <looped launch>`` in ``func``."""

    func: ast.FunctionDef
    node: ast.If
    single: str  # kernel launched for rows that fit
    looped: str  # kernel launched otherwise


def _is_pow2_call(m: Module, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        triton_func(node, m.al) == "next_power_of_2" or (dotted(node.func) or "").endswith("next_power_of_2")
    )


def dispatches(m: Module) -> list[Dispatch]:
    """The host dispatches between a single-pass and a looped kernel."""
    out: list[Dispatch] = []
    for la in m.launches:
        func = la.func
        if func is None:
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.If) or not node.orelse or any(d.node is node for d in out):
                continue
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                continue  # elif chains are not a two-way dispatch
            t = node.test
            if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.LtE, ast.Lt))):
                continue
            left = t.left
            if isinstance(left, ast.Name):
                v = single_value(func, left.id)
                left = v if v is not None else left
            if not _is_pow2_call(m, left):
                continue
            inside = {id(n) for s in node.body for n in ast.walk(s)}
            other = {id(n) for s in node.orelse for n in ast.walk(s)}
            a = [x.kernel for x in m.launches if id(x.call) in inside]
            b = [x.kernel for x in m.launches if id(x.call) in other]
            if len(set(a)) == 1 and len(set(b)) == 1 and a[0] != b[0]:
                out.append(Dispatch(func, node, a[0], b[0]))
    return out


# -------------------------------------------------------------- column-looped row kernels (applicable)


@dataclass(frozen=True)
class Looped:
    """A launched row kernel whose column loops ``apply`` can unroll into a single-pass copy."""

    kernel: Kernel
    launch: Launch
    body: list[ast.stmt]  # the statement list holding the column loops
    path: tuple[tuple[int, str], ...]  # how to reach ``body`` from the function body
    loops: tuple[ast.For, ...]
    n_param: str  # the column count (loop bound)
    block: str  # the column block constexpr (loop step)
    tails: tuple[ast.If | None, ...] = ()  # per loop: the tail branch of a full-chunk loop, else None


def _body_paths(fn: ast.FunctionDef) -> list[tuple[tuple[tuple[int, str], ...], list[ast.stmt]]]:
    out: list[tuple[tuple[tuple[int, str], ...], list[ast.stmt]]] = []

    def visit(body: list[ast.stmt], path: tuple[tuple[int, str], ...]) -> None:
        out.append((path, body))
        for i, st in enumerate(body):
            for attr in ("body", "orelse"):
                sub = getattr(st, attr, None)
                if isinstance(st, (ast.For, ast.While, ast.If, ast.With)) and isinstance(sub, list) and sub:
                    visit(sub, (*path, (i, attr)))

    visit(fn.body, ())
    return out


def _follow(fn: ast.FunctionDef, path: tuple[tuple[int, str], ...]) -> list[ast.stmt]:
    body = fn.body
    for i, attr in path:
        body = getattr(body[i], attr)
    return body


def _column_loop(m: Module, k: Kernel, st: ast.stmt) -> tuple[str, str] | None:
    """``for v in range(0, N, B)`` (or tl.range) with N a runtime parameter and B a constexpr one:
    (N, B)."""
    rc = range_call(st, m.al)
    if rc is None or len(rc.args) != 3 or not isinstance(st.target, ast.Name):  # type: ignore[attr-defined]
        return None
    lo, n, b = rc.args
    if not (isinstance(lo, ast.Constant) and lo.value == 0 and isinstance(n, ast.Name) and isinstance(b, ast.Name)):
        return None
    pn, pb = k.param(n.id), k.param(b.id)
    if pn is None or pb is None or pn.constexpr or not pb.constexpr or st.orelse:  # type: ignore[attr-defined]
        return None
    return n.id, b.id


def _full_chunk_loop(m: Module, k: Kernel, body: list[ast.stmt], i: int) -> tuple[str, str, ast.If] | None:
    """``for v in range(0, NF, B)`` over the full chunks, NF assigned once as ``(N // B) * B``, followed
    by its tail ``if NF < N:`` (no else): (N, B, the tail branch). With B >= N the loop runs at most once
    and the tail, masked, covers the whole row."""
    st = body[i]
    rc = range_call(st, m.al)
    if rc is None or len(rc.args) != 3 or not isinstance(st.target, ast.Name) or st.orelse:  # type: ignore[attr-defined]
        return None
    lo, nf, b = rc.args
    if not (isinstance(lo, ast.Constant) and lo.value == 0 and isinstance(nf, ast.Name) and isinstance(b, ast.Name)):
        return None
    pb = k.param(b.id)
    if k.param(nf.id) is not None or pb is None or not pb.constexpr:
        return None
    v = single_value(k.node, nf.id)
    if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult) and isinstance(v.right, ast.Name)
            and v.right.id == b.id and isinstance(v.left, ast.BinOp) and isinstance(v.left.op, ast.FloorDiv)
            and isinstance(v.left.left, ast.Name) and isinstance(v.left.right, ast.Name)
            and v.left.right.id == b.id):
        return None
    n = v.left.left.id
    pn = k.param(n)
    if pn is None or pn.constexpr or i + 1 >= len(body):
        return None
    tail = body[i + 1]
    t = tail.test if isinstance(tail, ast.If) else None
    if not (isinstance(tail, ast.If) and not tail.orelse and isinstance(t, ast.Compare) and len(t.ops) == 1
            and isinstance(t.ops[0], ast.Lt) and isinstance(t.left, ast.Name) and t.left.id == nf.id
            and isinstance(t.comparators[0], ast.Name) and t.comparators[0].id == n):
        return None
    if any(isinstance(x, ast.Name) and x.id == nf.id and isinstance(x.ctx, ast.Store) for x in ast.walk(tail)):
        return None
    return n, b.id, tail


def looped_kernels(m: Module) -> list[Looped]:
    """Launched row kernels that loop over their row's columns and are not dispatched to already."""
    dispatched = {n for d in dispatches(m) for n in (d.single, d.looped)}
    out = []
    for k in m.launched:
        if k.name in dispatched or k.autotune is not None or k.heuristics is not None:
            continue
        if len(k.node.decorator_list) != 1:
            continue
        if not is_row_reduction(k, m.al):
            continue
        las = m.launches_of(k)
        if len(las) != 1 or las[0].helper is not None:
            continue
        la = las[0]
        if not (isinstance(la.stmt, ast.Expr) and la.stmt.value is la.call) or la.func is None:
            continue
        found = None
        for path, body in _body_paths(k.node):
            hits: list[tuple[ast.For, tuple[str, str], ast.If | None]] = []
            for i, st in enumerate(body):
                if not isinstance(st, ast.For):  # a column loop is a for loop (range_call)
                    continue
                if (cl := _column_loop(m, k, st)) is not None:
                    hits.append((st, cl, None))
                elif (fc := _full_chunk_loop(m, k, body, i)) is not None:
                    hits.append((st, fc[:2], fc[2]))
            if hits:
                if found is not None:
                    found = None
                    break
                found = (path, body, hits)
        if found is None:
            continue
        path, body, hits = found
        if len({cl for _, cl, _ in hits}) != 1:
            continue
        n_param, block = hits[0][1]
        loops_ = tuple(st for st, _, _ in hits)
        tails = tuple(tail for _, _, tail in hits)
        # every other loop stepping by the block (one over the full chunks without its tail) refuses
        others = [
            lp for lp in ast.walk(k.node)
            if isinstance(lp, (ast.For, ast.While)) and lp not in loops_
            and block in all_names([lp.iter if isinstance(lp, ast.For) else lp.test])
        ]
        if others or not self_contained(loops_) or any(loads_2d_tiles(lp, m) for lp in loops_):
            continue
        args = launch_args(la, k)
        if block not in args or n_param not in args:
            continue
        if not _simple_host(args[n_param]) or all_names([la.grid]) & all_names([args[block]]) - {"triton"}:
            continue
        out.append(Looped(k, la, body, path, loops_, n_param, block, tails))
    return out


def loads_2d_tiles(loop: ast.AST, m: Module) -> bool:
    """The loop loads 2-D tiles (a pointer broadcast with ``[:, None]`` / ``[None, :]``): rows of a column
    sum, keys × head dim of decode attention, several rows at once. Unrolled, the block would be a whole
    2-D extent in registers, not one row: single-pass-row is for kernels that read one row per program."""
    def broadcast(node: ast.AST) -> bool:
        return any(isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Tuple)
                   and any(isinstance(e, ast.Constant) and e.value is None for e in x.slice.elts)
                   for x in ast.walk(node))

    assigned: dict[str, list[ast.AST]] = {}  # a pointer made in a local first: one level of names
    for n in ast.walk(loop):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            assigned.setdefault(n.targets[0].id, []).append(n.value)
    for n in ast.walk(loop):
        if isinstance(n, ast.Call) and tl_func(n, m.al) == "load" and n.args:
            ptr = n.args[0]
            names = [x.id for x in ast.walk(ptr) if isinstance(x, ast.Name)]
            if broadcast(ptr) or any(broadcast(v) for name in names for v in assigned.get(name, [])):
                return True
    return False


def self_contained(loops_: tuple[ast.For, ...]) -> bool:
    """No break/continue, and the loop variable is never assigned in the body."""
    for lp in loops_:
        var = lp.target.id  # type: ignore[attr-defined]
        for n in ast.walk(lp):
            if isinstance(n, (ast.Break, ast.Continue)):
                return False
            if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Store) and n is not lp.target:
                return False
    return True


def _simple_host(node: ast.expr) -> bool:
    """A host expression with no calls (safe to evaluate once more for the dispatch)."""
    return not any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Lambda)) for n in ast.walk(node))


def _atom(node: ast.AST) -> bool:
    return isinstance(node, (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript))


# ---------------------------------------------------------------------- building the single-pass copy


def _at_zero_text(m: Module, body: list[ast.stmt], var: str, indent: str) -> str:
    """Statements ``body`` with ``var`` at 0, reindented to ``indent``: ``var + e`` / ``e + var`` /
    ``e - var`` become ``e``, any other ``var`` becomes ``0``."""
    first, last = m.src.stmt_lines(body[0])[0], m.src.stmt_lines(body[-1])[1]
    start, end = m.src.line_span(first, last)
    edits = []
    done: set[int] = set()
    for st in body:
        for n in ast.walk(st):
            if not (isinstance(n, ast.Name) and n.id == var) or id(n) in done:
                continue
            parent = m.src.parent(n)
            keep = None
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add):
                keep = parent.right if parent.left is n else parent.left
            elif isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Sub) and parent.right is n:
                keep = parent.left
            if keep is not None and not (isinstance(keep, ast.Name) and keep.id == var):
                text = m.src.seg(keep)
                s, e = m.src.span(parent)  # type: ignore[arg-type]
                edits.append(Edit(s - start, e - start, text if _atom(keep) else f"({text})"))
            else:
                s, e = m.src.span(n)
                edits.append(Edit(s - start, e - start, "0"))
            done.add(id(n))
    text = apply_edits(m.src.text[start:end], edits)
    return reindent(text, m.src.indent_of(body[0].lineno), indent)


def _unrolled_loop_text(m: Module, lp: ast.For, tail: ast.If | None = None) -> str:
    """A column loop run once at offset 0, at the loop's indentation: its body with the loop variable
    at 0; for a full-chunk loop, its tail branch with the full-chunk bound at 0 instead (the masked
    tail then covers the whole row, whether or not the block equals the column count)."""
    if tail is not None:
        rc = range_call(lp, m.al)
        bound = rc.args[1] if rc is not None else None
        assert isinstance(bound, ast.Name), "a full-chunk loop's bound is a name (_full_chunk_loop)"
        return _at_zero_text(m, tail.body, bound.id, m.src.indent_of(lp.lineno))
    return _at_zero_text(m, lp.body, lp.target.id, m.src.indent_of(lp.lineno))  # type: ignore[attr-defined]


class _Canon:
    """Value keys of the names of one straight-line statement list: two expressions with the same
    key compute the same value (same text over names holding the same values, loads of the same
    addresses with no store in between)."""

    def __init__(self, al: Any) -> None:
        self.al = al
        self.env: dict[str, str] = {}
        self.epoch = 0
        self.fresh = itertools.count()

    def key(self, node: ast.AST) -> str | None:
        """The key of an expression; None when it has side effects or calls outside triton.language."""
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                f = tl_func(n, self.al)
                method = isinstance(n.func, ast.Attribute) and n.func.attr == "to"
                builtin = isinstance(n.func, ast.Name) and n.func.id in ("float", "int")
                if (f is None and not method and not builtin) or f in _SIDE_EFFECTS:
                    return None
            if isinstance(n, (ast.NamedExpr, ast.Lambda, ast.Await, ast.Yield)):
                return None
        return self._canon(node)

    def _canon(self, node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            return self.env.get(node.id, f"outer:{node.id}")
        parts = [type(node).__name__]
        if isinstance(node, ast.Call) and tl_func(node, self.al) == "load":
            parts.append(f"epoch{self.epoch}")
        for field_name, value in ast.iter_fields(node):
            if field_name == "ctx":
                continue
            if isinstance(value, ast.AST):
                parts.append(f"{field_name}={self._canon(value)}")
            elif isinstance(value, list):
                items = (self._canon(v) if isinstance(v, ast.AST) else repr(v) for v in value)
                parts.append(f"{field_name}=[{','.join(items)}]")
            else:
                parts.append(f"{field_name}={value!r}")
        text = "(" + " ".join(parts) + ")"
        return text if len(text) < 200 else "#" + hashlib.sha256(text.encode()).hexdigest()[:24]

    def clobber(self, st: ast.stmt) -> None:
        """Forget what the names ``st`` assigns stood for (they get fresh canonical names)."""
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                self.env[n.id] = f"fresh{next(self.fresh)}"
            if isinstance(n, ast.Call) and (tl_func(n, self.al) in _SIDE_EFFECTS or tl_func(n, self.al) is None):
                self.epoch += 1


def _merge_row_loads(text: str, path: tuple[tuple[int, str], ...], start_index: int, al: Any, tl: str) -> str:
    """In the function ``text``, drop the statements of the straight-line list at ``path`` (from
    ``start_index`` on) that recompute a value a name already holds, and load each row address once:
    the first load goes to a new name, later ones reuse it (``tl.where(mask, row, other)`` when their
    ``other`` differs)."""
    src = Src(text)
    fn = src.tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    body = _follow(fn, path)
    canon = _Canon(al)
    drop: list[ast.stmt] = []
    groups: dict[str, list[tuple[ast.stmt, ast.Call]]] = {}
    for i, st in enumerate(body):
        target = None
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            target = st.targets[0].id
        key = canon.key(st.value) if target is not None else None  # type: ignore[attr-defined]
        if target is None or key is None:
            canon.clobber(st)
            continue
        if i >= start_index and canon.env.get(target) == key:
            drop.append(st)
            continue
        for n in ast.walk(st.value):  # type: ignore[attr-defined]
            if isinstance(n, ast.Call) and tl_func(n, al) == "load" and n.args:
                mask = next((kw.value for kw in n.keywords if kw.arg == "mask"), None)
                lk = canon._canon(n.args[0]) + "|" + (canon._canon(mask) if mask is not None else "-")
                lk += f"|epoch{canon.epoch}"
                if len(n.args) == 1 and all(kw.arg in ("mask", "other", "eviction_policy", "cache_modifier")
                                            for kw in n.keywords):
                    groups.setdefault(lk, []).append((st, n))
        canon.env[target] = key
    edits: list[Edit] = []
    for st in drop:
        edits.append(Edit(*src.line_span(*src.stmt_lines(st)), ""))
    used = set()
    for members in groups.values():
        members = [(st, c) for st, c in members if st not in drop]
        if len(members) < 2:
            continue
        st0, c0 = members[0]
        base = st0.targets[0].id  # type: ignore[attr-defined]
        name = unique_name(src.tree, f"row_{base}")
        while name in used:
            name += "_"
        used.add(name)
        other0 = next((src.seg(kw.value) for kw in c0.keywords if kw.arg == "other"), None)
        ind = src.indent_of(st0.lineno)
        line0 = src.line_span(st0.lineno, st0.lineno)[0]
        edits.append(Edit(line0, line0, f"{ind}{name} = {src.seg(c0)}\n"))
        for _st, c in members:
            mask = next((kw.value for kw in c.keywords if kw.arg == "mask"), None)
            other = next((src.seg(kw.value) for kw in c.keywords if kw.arg == "other"), None)
            if mask is not None and other is not None and other != other0:
                new = f"{tl}.where({src.seg(mask)}, {name}, {other})"
            else:
                new = name
            edits.append(Edit(*src.span(c), new))
    return apply_edits(text, edits)


def single_pass_kernel(m: Module, lp: Looped, name: str) -> str:
    """The source of the single-pass copy of a looped kernel (no trailing blank line)."""
    k = lp.kernel
    start, end = m.src.line_span(*m.src.stmt_lines(k.node))
    base = start
    edits = []
    head = m.src.text[base:end]
    first_loop = lp.loops[0]
    for loop, tail in itertools.zip_longest(lp.loops, lp.tails):
        s, e = m.src.line_span(*m.src.stmt_lines(loop))
        edits.append(Edit(s - base, e - base, _unrolled_loop_text(m, loop, tail)))
        if tail is not None:
            first, last = m.src.line_span(*m.src.stmt_lines(tail))
            edits.append(Edit(first - base, last - base, ""))
    text = renamed_definition(apply_edits(head, edits), k.name, name)
    index = lp.body.index(first_loop)
    # where the unrolled statements start, in the new function: same list, same index
    return _merge_row_loads(text, lp.path, index, m.al, m.tl).rstrip("\n") + "\n"
