"""Portable roles of tile constexprs: what a kernel's own tile names *mean*, so parameters transfer.

A lineage step records values under one kernel's names (``BLOCK_M``, ``ROWS``, ``BLOCK_SIZE``); a skill
must carry them in terms every kernel has. The roles, read from the structure of each ``@triton.jit``
function (never from its names, except the ``GROUP`` swizzle parameter, which has no structural
signature of its own):

- ``tile_m`` / ``tile_n``: first / second dimension of the ``tl.zeros((A, B))`` that a ``tl.dot``
  accumulates into (for an attention kernel ``tile_n`` is the head dimension);
- ``tile_k``: the step of the loop feeding ``tl.dot`` (``range(0, K, BLOCK_K)``, or a trip count
  ``tl.cdiv(K, BLOCK_K)``); for attention the key block;
- ``rows_per_program``: in a kernel without ``tl.dot``, the rows of a 2-D tile that the program id
  partitions (``pid * ROWS + tl.arange(0, ROWS)``) beside a column block;
- ``block_cols``: in a kernel without ``tl.dot``, a column block that the program id does not
  partition (``tl.arange(0, BLOCK)``, ``start + tl.arange(0, BLOCK)`` in a column loop);
- ``block``: the only block of a kernel without ``tl.dot``, partitioned by the program id (a 1-D
  elementwise kernel: ``pid * BLOCK + tl.arange(0, BLOCK)``);
- ``group_size_m``: a ``GROUP``-named constexpr of a ``tl.dot`` kernel (the program-id swizzle).

Helpers are read too: a jit function that takes its tile sizes as parameters gets roles of its own,
and a kernel that calls a helper inherits the helper's ``tile_k`` for the constexpr it passes there.
"""

from __future__ import annotations

import ast
from typing import Literal

from klineage.transforms._module import Module, parse
from klineage.transforms._triton import (
    Aliases,
    Kernel,
    accumulator_tile,
    arange_blocks,
    loop_step_names,
    loops,
    range_call,
    single_value,
    tl_call,
    tl_func,
)
from klineage.transforms.features import accumulators, pid_derived
from klineage.transforms.operators._common import reachable, reaches_dot

Role = Literal["tile_m", "tile_n", "tile_k", "rows_per_program", "block_cols", "block", "group_size_m"]

#: Every role ``tile_roles`` assigns, in a fixed order.
ROLES: tuple[str, ...] = ("tile_m", "tile_n", "tile_k", "rows_per_program", "block_cols", "block", "group_size_m")

#: Launch/config meta-parameters that are portable as they are (no role mapping needed).
META_PARAMS: tuple[str, ...] = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def tile_roles(source: str) -> dict[str, dict[str, str]]:
    """For every ``@triton.jit`` function of ``source`` (helpers included), its tile constexprs
    mapped to roles (``ROLES``): ``{kernel: {param: role}}``. Constexprs with no recognisable role
    (flags, head dims that are not an accumulator dimension, ...) are left out; a kernel with none
    maps to ``{}``. Pure: reads the source only. ValueError when the source does not parse."""
    m = parse(source)
    if m is None:
        raise ValueError("tile_roles: the source does not parse as Python")
    return {k.name: kernel_roles(m, k) for k in m.kernels}


def role_params(roles: dict[str, str], role: str) -> list[str]:
    """The parameters of one kernel's role map (a value of ``tile_roles``) that play ``role``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    return [p for p, r in roles.items() if r == role]


def kernel_roles(m: Module, k: Kernel) -> dict[str, str]:
    """The role map of one kernel of a parsed module (see ``tile_roles``)."""
    cex = set(k.constexprs)
    out: dict[str, str] = {}
    if reaches_dot(k, m):
        dims = _dot_accumulator(k, m.al) or accumulator_tile(k, m.al)
        for p, role in zip(dims[:2], ("tile_m", "tile_n"), strict=False):
            if p in cex and p not in out:
                out[p] = role
        for p in _dot_steps(m, k):
            if p in cex and p not in out:
                out[p] = "tile_k"
        for p in k.constexprs:
            if "GROUP" in p.upper() and p not in out and p not in arange_blocks(k, m.al):
                out[p] = "group_size_m"
        return out
    blocks = arange_blocks(k, m.al)
    parts = partitioned_params(k, m.al)
    if len(blocks) == 1 and blocks[0] in parts:
        return {blocks[0]: "block"}
    for p in blocks:
        out[p] = "rows_per_program" if p in parts else "block_cols"
    return out


def movable_params(m: Module, k: Kernel) -> set[str]:
    """Constexprs whose value a tuning rewrite may change without changing what the kernel computes,
    given that the launch grid follows (``_grid``): tiles the program id partitions, steps of loops
    (the loop covers the extent with any step), and the group-size swizzle. A block that must cover
    a whole extent in one piece (a single-pass row, a head dimension) is not movable."""
    roles = kernel_roles(m, k)
    group = {p for p, r in roles.items() if r == "group_size_m"}
    return partitioned_params(k, m.al) | loop_step_names(k, m.al) | set(_dot_steps(m, k)) | group


def partitioned_params(k: Kernel, al: Aliases) -> set[str]:
    """Constexprs that the program id partitions: ``P`` multiplied by a program-id-derived value
    (``pid * P``, ``pid_m * BLOCK_M + tl.arange(...)``, ``(start_m + 1) * BLOCK_M``), the tile
    parameters a launch grid must count with. A loop that starts at ``pid_k * P`` and steps by a
    multiple of ``P`` (split-k's interleaved slices, ``range(pid_k * P, K, P * SPLIT)``) covers its
    extent with any ``P``: the grid counts slices there, not tiles of ``P``."""
    derived = pid_derived(k.node, al)
    cex = set(k.constexprs)
    out: set[str] = set()
    interleaved: set[int] = set()  # ids of the start products of such loops
    for loop in loops(k.node):
        rc = range_call(loop, al)
        if rc is None or len(rc.args) < 3:
            continue
        start, step = rc.args[0], rc.args[2]
        step_names = {x.id for x in ast.walk(step) if isinstance(x, ast.Name)}
        if isinstance(start, ast.BinOp) and isinstance(start.op, ast.Mult) and any(
                isinstance(side, ast.Name) and side.id in step_names for side in (start.left, start.right)):
            interleaved.add(id(start))
    for n in ast.walk(k.node):
        if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)) or id(n) in interleaved:
            continue
        sides = (n.left, n.right)
        for this, other in (sides, sides[::-1]):
            if isinstance(this, ast.Name) and this.id in cex and _pid_valued(other, derived, al):
                out.add(this.id)
    return out


def _pid_valued(node: ast.AST, derived: set[str], al: Aliases) -> bool:
    return any(
        (isinstance(x, ast.Name) and x.id in derived) or tl_func(x, al) == "program_id" for x in ast.walk(node)
    )


def _dot_accumulator(k: Kernel, al: Aliases) -> list[str]:
    """Constexpr dims of the ``tl.zeros`` initialising the first accumulator a ``tl.dot`` adds into."""
    cex = set(k.constexprs)
    for acc in accumulators(k, al):
        init = single_value(k.node, acc)
        if init is None:  # reassigned in the loop: the first plain assignment before it
            inits = [
                st.value
                for st in ast.walk(k.node)
                if isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == acc
                and tl_func(st.value, al) == "zeros"
            ]
            init = inits[0] if inits else None
        if not tl_call(init, al, "zeros") or not init.args:
            continue
        shape = init.args[0]
        if isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) == 2:
            dims = [e.id if isinstance(e, ast.Name) and e.id in cex else "" for e in shape.elts]
            if all(dims):
                return dims
    return []


def _loop_step(loop: ast.AST, k: Kernel, al: Aliases) -> str | None:
    """The constexpr a loop steps by: ``range(a, b, P)``, or a trip count ``tl.cdiv(X, P)`` (inline or
    through a kernel local bound once)."""
    rc = range_call(loop, al)
    if rc is None:
        return None
    cex = set(k.constexprs)
    if len(rc.args) >= 3 and isinstance(rc.args[2], ast.Name) and rc.args[2].id in cex:
        return rc.args[2].id
    bounds = rc.args[:2] if len(rc.args) >= 2 else rc.args[:1]
    for b in bounds:
        for expr in (b, single_value(k.node, b.id) if isinstance(b, ast.Name) else None):
            if expr is None:
                continue
            for n in ast.walk(expr):
                if tl_func(n, al) == "cdiv" and len(n.args) == 2:  # type: ignore[attr-defined]
                    d = n.args[1]  # type: ignore[attr-defined]
                    if isinstance(d, ast.Name) and d.id in cex:
                        return d.id
    return None


def _dot_steps(m: Module, k: Kernel) -> list[str]:
    """Constexprs stepping the innermost loop around a ``tl.dot`` in this kernel, or passed to a helper whose
    own such loop steps by the parameter they are bound to."""
    out: list[str] = []

    def feeds_dot(loop: ast.AST) -> bool:
        return any(tl_func(n, m.al) == "dot" for n in ast.walk(loop))

    for loop in loops(k.node):
        # the innermost loop around the dot (a persistent loop over tiles also contains it)
        if feeds_dot(loop) and not any(feeds_dot(inner) for inner in loops(loop) if inner is not loop):
            step = _loop_step(loop, k, m.al)
            if step is not None and step not in out:
                out.append(step)
    if out:
        return out
    helpers = {j.name: j for j in reachable(k, m) if j is not k}
    for call in ast.walk(k.node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in helpers):
            continue
        helper = helpers[call.func.id]
        inner = _dot_steps(m, helper)
        bound = _call_binding(call, helper)
        for p in inner:
            arg = bound.get(p)
            if isinstance(arg, ast.Name) and arg.id in k.constexprs and arg.id not in out:
                out.append(arg.id)
    return out


def _call_binding(call: ast.Call, fn: Kernel) -> dict[str, ast.expr]:
    """Helper parameter name -> the expression a call passes for it."""
    out: dict[str, ast.expr] = {}
    for p, a in zip(fn.params, call.args, strict=False):
        if isinstance(a, ast.Starred):
            break
        out[p.name] = a
    for kw in call.keywords:
        if kw.arg is not None:
            out[kw.arg] = kw.value
    return out
