"""Launch grids that count with a tile size: find them, pair them with the kernel's tile parameter,
and rewrite them when the tile changes, so that a tuning rewrite never leaves the grid behind.

A naive launch often writes the tile as a literal in the grid (``triton.cdiv(M, 32)``,
``(M + 31) // 32``) or through a host local (``BLOCK = 32; grid = (triton.cdiv(n, BLOCK),)``). When
an operator changes that tile (autotune configs, a larger tile), the grid must change with it, or the
launch runs the wrong number of programs (too many: wasted; too few: part of the output is never
written). Each literal is paired with the tile parameter whose program-partitioned offsets
(``pid * P + tl.arange(0, P)``) the kernel compares against the kernel argument bound to the host
dimension the grid divides (or that the kernel itself divides by ``P``: ``tl.cdiv(M, P)``). A literal
that pairs with no parameter, or with several, makes the rewrite refuse.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from klineage.transforms._module import Module
from klineage.transforms._source import int_const
from klineage.transforms._triton import (
    Kernel,
    Launch,
    block_shapes,
    launch_args,
    single_value,
    tl_func,
    triton_func,
)
from klineage.transforms.features import pid_derived
from klineage.transforms.operators._common import grid_tuple, param_default
from klineage.transforms.operators._roles import partitioned_params


@dataclass(frozen=True)
class GridDiv:
    """A ceil-division by a constant tile in a launch grid.

    ``node`` is the whole division, ``dim`` the host extent divided, ``tile`` the divisor node (an
    int literal, or a host Name bound once to one), ``value`` its value; ``form`` is ``"cdiv"``
    (``triton.cdiv(dim, tile)``) or ``"add"`` (``(dim + tile - 1) // tile``)."""

    node: ast.expr
    dim: ast.expr
    tile: ast.expr
    value: int
    form: str


def _int_of(node: ast.expr, la: Launch) -> int | None:
    """An int literal, or a host Name bound once to one (a local, or a module-level constant)."""
    v = int_const(node)
    if v is None and isinstance(node, ast.Name) and la.func is not None:
        v = int_const(single_value(la.func, node.id, la.module))
    return v


def grid_shared(la: Launch) -> bool:
    """True when the launch's grid is a host name whose binding (the one the launch sees) is read
    anywhere else (another launch, a print): a rewrite of that grid would change more than this
    launch."""
    if not isinstance(la.grid, ast.Name) or la.func is None:
        return False
    name, line = la.grid.id, la.call.lineno
    bindings = sorted(
        n.lineno
        for n in ast.walk(la.func)
        if (isinstance(n, ast.FunctionDef) and n.name == name and n is not la.func)
        or (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store))
    )
    lo = max((b for b in bindings if b < line), default=0)
    hi = min((b for b in bindings if b > line), default=float("inf"))
    loads = sum(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and lo < n.lineno < hi
        for n in ast.walk(la.func)
    )
    return loads > 1


def grid_expr(m: Module, la: Launch) -> tuple[ast.expr, str | None] | None:
    """The grid's tuple expression and its meta argument name (see ``grid_tuple``)."""
    return grid_tuple(m, la)


def grid_function(m: Module, la: Launch) -> ast.FunctionDef | ast.Lambda | None:
    """The meta function a grid is (a lambda, or the local ``def grid(meta)`` the launch sees), else None."""
    gt = grid_tuple(m, la)
    if gt is None or gt[1] is None or la.func is None:
        return None
    tup = gt[0]
    for n in ast.walk(la.func):
        if isinstance(n, (ast.Lambda, ast.FunctionDef)) and n is not la.func and any(x is tup for x in ast.walk(n)):
            return n
    return None


def grid_divs(m: Module, la: Launch) -> list[GridDiv] | None:
    """Every ceil-division by a constant in the launch grid; None when the grid cannot be read, or
    when it divides by a constant some other way (``M // 32``, ``math.ceil(M / 32)``, or inside a
    host local the grid reads): such a grid is not understood and no tile may change under it."""
    gt = grid_expr(m, la)
    if gt is None:
        return None
    node, _meta = gt
    fn = grid_function(m, la)
    inner: set[str] = set()
    if isinstance(fn, ast.FunctionDef):
        # a meta function: its own locals count with meta; a constant division anywhere in it is
        # not rewritten here, so it is not understood
        inner = {x.id for x in ast.walk(fn) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}
        for x in ast.walk(fn):
            if (isinstance(x, ast.Call) and triton_func(x, m.al) == "cdiv" and len(x.args) == 2
                    and _int_of(x.args[1], la) is not None):
                return None
            if (isinstance(x, ast.BinOp) and isinstance(x.op, (ast.FloorDiv, ast.Div))
                    and _int_of(x.right, la) is not None):
                return None
    out: list[GridDiv] = []
    claimed: set[int] = set()
    for n in ast.walk(node):
        if id(n) in claimed:
            continue
        if isinstance(n, ast.Call) and triton_func(n, m.al) == "cdiv" and len(n.args) == 2:
            v = _int_of(n.args[1], la)
            if v is not None:
                out.append(GridDiv(n, n.args[0], n.args[1], v, "cdiv"))
                claimed |= {id(x) for x in ast.walk(n.args[1])}
            continue
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.FloorDiv, ast.Div, ast.Mod)):
            v = _int_of(n.right, la)
            if v is None:
                continue
            dim = _ceil_numerator(n.left, v, la) if isinstance(n.op, ast.FloorDiv) else None
            if dim is None:
                return None  # a floor or true division by a constant tile: not understood
            out.append(GridDiv(n, dim, n.right, v, "add"))
            claimed |= {id(x) for x in ast.walk(n.right)} | {id(x) for x in ast.walk(n.left)} - {
                id(x) for x in ast.walk(dim)
            }
    # a host local the grid reads that itself divides by a tile (tiles = cdiv(M, 32) * ...); a local that
    # divides by a constant no launch argument carries (N = two_n // 2: a packed layout) counts no tiles
    if la.func is not None:
        tiles = _launch_ints(la)
        for name in {x.id for x in ast.walk(node) if isinstance(x, ast.Name)} - inner:
            local = single_value(la.func, name)
            if local is not None and any(
                (isinstance(x, ast.Call) and triton_func(x, m.al) == "cdiv")
                or (isinstance(x, ast.BinOp) and isinstance(x.op, (ast.FloorDiv, ast.Div))
                    and (_int_of(x.right, la) is None or _int_of(x.right, la) in tiles))
                for x in ast.walk(local)
            ):
                return None
    return out


def _launch_ints(la: Launch) -> set[int]:
    """The int values the launch passes (literals, or host names bound once to one): its tile sizes among them."""
    values = [*la.call.args, *(kw.value for kw in la.call.keywords)]
    return {v for v in (_int_of(a, la) for a in values if not isinstance(a, ast.Starred)) if v is not None}


def _ceil_numerator(left: ast.expr, v: int, la: Launch) -> ast.expr | None:
    """``x`` of ``x + (v - 1)`` or ``x + v - 1``; None otherwise."""
    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and _int_of(left.right, la) == v - 1:
        return left.left
    if (
        isinstance(left, ast.BinOp)
        and isinstance(left.op, ast.Sub)
        and int_const(left.right) == 1
        and isinstance(left.left, ast.BinOp)
        and isinstance(left.left.op, ast.Add)
        and _int_of(left.left.right, la) == v
    ):
        return left.left.left
    return None


def tile_evidence(m: Module, k: Kernel) -> set[tuple[str, str]]:
    """``(tile param, kernel argument)`` pairs: the param's program-partitioned offsets
    (``pid * P + tl.arange(0, P)``) are compared against the argument (``offs < M``), or the kernel
    divides the argument by the param (``tl.cdiv(M, P)``)."""
    derived = pid_derived(k.node, m.al)
    parts = partitioned_params(k, m.al)
    runtime = {p.name for p in k.params if not p.constexpr}
    offsets: dict[str, set[str]] = {}
    for st in ast.walk(k.node):
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            continue
        for p in parts:
            has_range = any(
                tl_func(x, m.al) == "arange"
                and len(x.args) == 2  # type: ignore[attr-defined]
                and isinstance(x.args[1], ast.Name)  # type: ignore[attr-defined]
                and x.args[1].id == p  # type: ignore[attr-defined]
                for x in ast.walk(st.value)
            )
            has_pid = any(isinstance(x, ast.Name) and x.id in derived for x in ast.walk(st.value)) or any(
                tl_func(x, m.al) == "program_id" for x in ast.walk(st.value)
            )
            if has_range and has_pid:
                offsets.setdefault(p, set()).add(st.targets[0].id)
    out: set[tuple[str, str]] = set()
    for n in ast.walk(k.node):
        if isinstance(n, ast.Compare):
            left = {x.id for x in ast.walk(n.left) if isinstance(x, ast.Name)}
            for p, names in offsets.items():
                if left & names:
                    out |= {(p, c.id) for c in n.comparators if isinstance(c, ast.Name) and c.id in runtime}
        elif tl_func(n, m.al) == "cdiv" and len(n.args) == 2:  # type: ignore[attr-defined]
            a, b = n.args  # type: ignore[attr-defined]
            if isinstance(a, ast.Name) and a.id in runtime and isinstance(b, ast.Name) and b.id in parts:
                out.add((b.id, a.id))
    # a block pointer or tensor descriptor bounds its blocks by its shape, as a mask would: shape=[M, ...]
    # with block_shape=[BLOCK_M, ...]
    for shape, block in block_shapes(k, m.al):
        for d, b in zip(shape, block, strict=False):
            if isinstance(d, ast.Name) and d.id in runtime and isinstance(b, ast.Name) and b.id in parts:
                out.add((b.id, d.id))
    return out


def _same(a: ast.expr, b: ast.expr, la: Launch) -> bool:
    """Two host expressions denote the same value (equal text, or one a local bound once to the other)."""
    if ast.dump(a) == ast.dump(b):
        return True
    for x, y in ((a, b), (b, a)):
        if isinstance(x, ast.Name) and la.func is not None:
            v = single_value(la.func, x.id, la.module)
            if v is not None and ast.dump(v) == ast.dump(y):
                return True
    return False


def pair_div(m: Module, k: Kernel, la: Launch, div: GridDiv, values: dict[str, int]) -> str | None:
    """The tile parameter a grid division counts with: the unique param with evidence
    (``tile_evidence``) against a kernel argument bound to the divided host extent whose current value
    (``values``: param -> int at this launch) equals the divisor; None when none or several."""
    args = launch_args(la, k)
    found = {
        p
        for p, arg in tile_evidence(m, k)
        if arg in args and _same(args[arg], div.dim, la) and values.get(p) == div.value
    }
    return found.pop() if len(found) == 1 else None


def launch_values(m: Module, k: Kernel, la: Launch) -> dict[str, int]:
    """Constexpr params with an int value at this launch (literal, a local bound once to one, or the
    parameter's default)."""
    args = launch_args(la, k)
    out: dict[str, int] = {}
    for p in k.constexprs:
        v = _int_of(args[p], la) if p in args else int_const(param_default(k, p))
        if v is not None:
            out[p] = v
    return out


def meta_reads(m: Module, la: Launch) -> set[str]:
    """Params a meta-function grid reads (``meta["BLOCK_M"]``); empty for a plain tuple grid."""
    gt = grid_expr(m, la)
    if gt is None or gt[1] is None:
        return set()
    node, meta = gt
    fn = grid_function(m, la)
    if isinstance(fn, ast.FunctionDef):
        node = fn  # type: ignore[assignment]
    return {
        x.slice.value
        for x in ast.walk(node)
        if isinstance(x, ast.Subscript)
        and isinstance(x.value, ast.Name)
        and x.value.id == meta
        and isinstance(x.slice, ast.Constant)
        and isinstance(x.slice.value, str)
    }


def grid_names(m: Module, la: Launch) -> set[str]:
    """Host names the grid expression reads."""
    gt = grid_expr(m, la)
    if gt is None:
        return set()
    return {x.id for x in ast.walk(gt[0]) if isinstance(x, ast.Name)}


def partitioned(m: Module, k: Kernel) -> set[str]:
    """Tile params the launch grid must count with (see ``roles.partitioned_params``)."""
    return partitioned_params(k, m.al)
