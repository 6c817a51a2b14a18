"""Structural queries over a Triton candidate module: kernels, launches, tl calls, tunable constants.

Everything matches on structure (the ast), never on the variable names of a particular kernel: the
``triton`` / ``triton.language`` aliases are read from the imports, kernels are the functions whose
decorators end in ``jit``, launches are ``kernel[grid](...)`` calls, and tunables are found where
the value of a constexpr parameter is written (autotune configs, launch keywords, or a local int).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from klineage.transforms._source import Src, int_const, str_const


@dataclass(frozen=True)
class Aliases:
    """Local names of ``triton`` and ``triton.language``."""

    triton: frozenset[str] = frozenset({"triton"})
    tl: frozenset[str] = frozenset({"tl"})


def aliases(tree: ast.Module) -> Aliases:
    """Read the names under which triton and triton.language are imported."""
    tri: set[str] = set()
    tl: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "triton":
                    tri.add(a.asname or "triton")
                elif a.name == "triton.language":
                    if a.asname:
                        tl.add(a.asname)
                    else:
                        tri.add("triton")
        elif isinstance(node, ast.ImportFrom) and node.module == "triton":
            for a in node.names:
                if a.name == "language":
                    tl.add(a.asname or "language")
    return Aliases(frozenset(tri or {"triton"}), frozenset(tl or {"tl"}))


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def tl_func(call: ast.AST | None, al: Aliases) -> str | None:
    """For a call to ``tl.X(...)`` (or ``triton.language.X``), return ``X``; else None."""
    if not isinstance(call, ast.Call):
        return None
    name = dotted(call.func)
    if name is None or "." not in name:
        return None
    head, _, attr = name.rpartition(".")
    if head in al.tl or head in {f"{t}.language" for t in al.triton}:
        return attr
    return None


def tl_call(node: ast.AST | None, al: Aliases, *names: str) -> TypeGuard[ast.Call]:
    """True for a call ``tl.X(...)`` with ``X`` in ``names`` (any ``tl`` call when none are given): the
    test ``tl_func(node, al) in names`` that also tells the type checker ``node`` is an ``ast.Call``."""
    func = tl_func(node, al)
    return func is not None and (not names or func in names)


def triton_func(call: ast.AST, al: Aliases) -> str | None:
    """For a call to ``triton.X(...)`` return ``X``; else None."""
    if not isinstance(call, ast.Call):
        return None
    name = dotted(call.func)
    if name is None or "." not in name:
        return None
    head, _, attr = name.rpartition(".")
    return attr if head in al.triton else None


def is_tl_attr(node: ast.AST, al: Aliases, attr: str | None = None) -> bool:
    """True for ``tl.attr`` (e.g. ``tl.float32``, ``tl.constexpr``)."""
    name = dotted(node)
    if name is None or "." not in name:
        return False
    head, _, a = name.rpartition(".")
    ok_head = head in al.tl or head in {f"{t}.language" for t in al.triton}
    return ok_head and (attr is None or a == attr)


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    """Value of keyword ``name`` in a call, else None."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


@dataclass(frozen=True)
class Param:
    """One kernel parameter."""

    name: str
    constexpr: bool
    has_default: bool
    node: ast.arg


@dataclass
class Kernel:
    """A ``@triton.jit`` function with its decorators."""

    node: ast.FunctionDef
    jit: ast.expr
    autotune: ast.Call | None = None
    heuristics: ast.Call | None = None
    params: list[Param] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The function name."""
        return self.node.name

    def param(self, name: str) -> Param | None:
        """The parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        return None

    @property
    def constexprs(self) -> list[str]:
        """Names of constexpr parameters."""
        return [p.name for p in self.params if p.constexpr]


def _decorator_name(deco: ast.expr) -> str | None:
    target = deco.func if isinstance(deco, ast.Call) else deco
    return dotted(target)


def kernels(tree: ast.Module, al: Aliases | None = None) -> list[Kernel]:
    """All module-level ``@triton.jit`` functions (helpers included), in source order."""
    al = al or aliases(tree)
    out: list[Kernel] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        jit = autotune = heur = None
        for deco in node.decorator_list:
            name = _decorator_name(deco) or ""
            last = name.rpartition(".")[2]
            if last == "jit":
                jit = deco
            elif last == "autotune" and isinstance(deco, ast.Call):
                autotune = deco
            elif last == "heuristics" and isinstance(deco, ast.Call):
                heur = deco
        if jit is None:
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        n_default = len(args.defaults)
        params = []
        for i, a in enumerate(positional):
            params.append(
                Param(
                    a.arg,
                    a.annotation is not None and is_tl_attr(a.annotation, al, "constexpr"),
                    i >= len(positional) - n_default,
                    a,
                )
            )
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            params.append(
                Param(
                    a.arg,
                    a.annotation is not None and is_tl_attr(a.annotation, al, "constexpr"),
                    d is not None,
                    a,
                )
            )
        out.append(Kernel(node, jit, autotune, heur, params))
    return out


@dataclass(frozen=True)
class Launch:
    """A ``kernel[grid](args)`` call, or a call of a launch helper ``helper(kernel, grid, ..., *args)``.

    For a helper call, ``skip`` is the number of leading positional arguments that belong to the
    helper itself (the kernel's own arguments follow); ``helper`` names the helper function.
    ``module`` is the module holding the launch: host names resolve to its int constants
    (``single_value(la.func, name, la.module)``).
    """

    call: ast.Call
    kernel: str
    grid: ast.expr
    func: ast.FunctionDef | None
    stmt: ast.stmt | None
    skip: int = 0
    helper: str | None = None
    module: ast.Module | None = field(default=None, compare=False, repr=False)


def launch_helpers(tree: ast.Module, kernel_names: set[str]) -> dict[str, tuple[int, int, int]]:
    """Module functions that launch a kernel they receive as an argument:
    ``def h(kernel, grid, x, *args, **kw): kernel[grid](*args, **kw)`` (or ``kernel.fn[grid]``).
    Returns name -> (index of the kernel parameter, index of the grid parameter, number of named
    positional parameters)."""
    out: dict[str, tuple[int, int, int]] = {}
    for f in tree.body:
        if not isinstance(f, ast.FunctionDef) or f.name in kernel_names or f.args.vararg is None:
            continue
        names = [a.arg for a in [*f.args.posonlyargs, *f.args.args]]
        for node in ast.walk(f):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                base = node.func.value
                if isinstance(base, ast.Attribute) and base.attr == "fn":
                    base = base.value
                grid = node.func.slice
                if (
                    isinstance(base, ast.Name)
                    and base.id in names
                    and isinstance(grid, ast.Name)
                    and grid.id in names
                ):
                    out[f.name] = (names.index(base.id), names.index(grid.id), len(names))
                    break
    return out


def launches(tree: ast.Module, ks: list[Kernel]) -> list[Launch]:
    """Every launch of one of ``ks`` (direct or through a launch helper), with the enclosing function
    and statement."""
    names = {k.name for k in ks}
    helpers = launch_helpers(tree, {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} & names)
    out: list[Launch] = []
    seen: set[int] = set()
    for top in tree.body:
        func = top if isinstance(top, ast.FunctionDef) else None
        if func is not None and (func.name in names or func.name in helpers):
            continue
        for stmt in _walk_stmts([top]):
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call) or id(node) in seen:
                    continue
                if (
                    isinstance(node.func, ast.Subscript)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in names
                ):
                    seen.add(id(node))
                    out.append(Launch(node, node.func.value.id, node.func.slice, func, stmt, module=tree))
                elif isinstance(node.func, ast.Name) and node.func.id in helpers:
                    ki, gi, n_named = helpers[node.func.id]
                    if (
                        len(node.args) > max(ki, gi)
                        and isinstance(target := node.args[ki], ast.Name)
                        and target.id in names
                    ):
                        seen.add(id(node))
                        out.append(
                            Launch(node, target.id, node.args[gi], func, stmt, n_named, node.func.id, tree)
                        )
    return out


def _walk_stmts(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Yield the simple statements under ``body`` in order, descending into compound statements."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.If, ast.For, ast.While, ast.With)):
            for attr in ("body", "orelse"):
                yield from _walk_stmts(getattr(stmt, attr, []))
        else:
            yield stmt


def pointer_param(kernel: Kernel, ptr: ast.expr) -> str | None:
    """The parameter a pointer expression starts from: the leftmost operand of its arithmetic
    (``x_ptr + row * stride + cols``), followed through the kernel's single-name assignments
    (``ptrs = out_ptr + offs``); None when it does not start from a parameter."""
    params = {p.name for p in kernel.params}
    assigns = {
        st.targets[0].id: st.value
        for st in ast.walk(kernel.node)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
    }
    node: ast.AST = ptr
    for _ in range(8):
        while isinstance(node, ast.BinOp):
            node = node.left
        if isinstance(node, ast.Name):
            if node.id in params:
                return node.id
            if node.id in assigns:
                node = assigns[node.id]
                continue
        return None
    return None


def launch_args(launch: Launch, kernel: Kernel) -> dict[str, ast.expr]:
    """Map kernel parameter names to the expressions a launch passes (positional and keyword)."""
    out: dict[str, ast.expr] = {}
    positional = list(kernel.params)
    for p, a in zip(positional, launch.call.args[launch.skip :], strict=False):
        if isinstance(a, ast.Starred):
            break
        out[p.name] = a
    for kw in launch.call.keywords:
        if kw.arg is not None:
            out[kw.arg] = kw.value
    return out


def _target_value(target: ast.expr, value: ast.expr | None, name: str) -> ast.expr | bool | None:
    """What an assignment ``target = value`` binds to ``name``: the value expression (the matching
    element when a tuple/list target is unpacked from a tuple/list literal of the same length, at any
    depth), None when ``name`` is bound but its value is not resolvable (a starred target, lengths
    that differ, an unpacked call), False when ``target`` does not bind ``name``."""
    if isinstance(target, ast.Name):
        return value if target.id == name else False
    if isinstance(target, ast.Starred):
        return None if _target_value(target.value, None, name) is not False else False
    if not isinstance(target, (ast.Tuple, ast.List)):
        return False
    elts: list[ast.expr | None]
    if (
        isinstance(value, (ast.Tuple, ast.List))
        and len(value.elts) == len(target.elts)
        and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
    ):
        elts = list(value.elts)
    else:
        elts = [None] * len(target.elts)
    found = [got for t, v in zip(target.elts, elts, strict=True) if (got := _target_value(t, v, name)) is not False]
    if not found:
        return False
    return found[0] if len(found) == 1 else None  # ``name, name = ...``: not one value


def _binds(node: ast.AST, name: str) -> bool:
    """True when an ``Assign`` / ``AugAssign`` / ``AnnAssign`` statement binds ``name`` (a plain
    target, or an element of a tuple/list target)."""
    if isinstance(node, ast.Assign):
        return any(_target_value(t, None, name) is not False for t in node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return _target_value(node.target, None, name) is not False
    return False


def assigned_value(stmt: ast.stmt, name: str) -> ast.expr | None:
    """The expression a plain ``=`` statement gives ``name``: its value for ``name = value``, the
    matching element for ``a, name, c = x, value, z`` (a tuple/list target unpacked from a tuple/list
    of the same length); None for any other statement (a starred target, lengths that differ, an
    augmented or annotated assignment, a chained ``a = b = value`` whose value other names share)."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    found = _target_value(stmt.targets[0], stmt.value, name)
    return found if isinstance(found, ast.expr) else None


def local_assignments(func: ast.FunctionDef | None, name: str) -> list[ast.Assign]:
    """All statements in a function that assign ``name`` (``name = ...``, ``name += ...``,
    ``name: T = ...``, or ``name`` as an element of a tuple/list target: ``a, name = ...``)."""
    if func is None:
        return []
    return [node for node in ast.walk(func) if _binds(node, name)]  # type: ignore[misc]


def _module_int(module: ast.Module, func: ast.FunctionDef | None, name: str) -> ast.expr | None:
    """The int literal a module-level ``name`` is bound to when ``func`` (the host function reading
    it) never binds ``name`` itself and the module binds it exactly once, by a plain ``=`` at its top
    level (``BLOCK = 512``, or an element of ``BM, BN = 64, 64``); else None."""
    if func is not None:
        args = func.args
        own = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
        if name in own or any(
            isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(func)
        ):
            return None
    if any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(module)):
        return None  # some function rebinds it
    if sum(_bound_name(node) == name for node in _module_scope(module)) != 1:
        return None
    top = [st for st in module.body if _binds(st, name)]
    value = assigned_value(top[0], name) if len(top) == 1 else None
    return value if value is not None and int_const(value) is not None else None


def _bound_name(node: ast.AST) -> str | None:
    """The name a node binds in its scope (a stored Name, a def or class, an import), else None."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return node.id
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.alias):
        return node.asname or node.name.partition(".")[0]
    return None


def _module_scope(module: ast.Module) -> Iterator[ast.AST]:
    """The nodes of a module's own scope: function and class definitions are yielded but their
    bodies (and lambdas and comprehensions, scopes of their own) are not entered."""
    todo: list[ast.AST] = list(module.body)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo += node.decorator_list
        elif not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo += ast.iter_child_nodes(node)


def single_value(
    func: ast.FunctionDef | None, name: str, module: ast.Module | None = None
) -> ast.expr | None:
    """The value of a local assigned exactly once (plain ``=``; an element of a tuple/list target
    unpacked from a tuple/list literal of the same length counts), else None. With ``module`` (the
    host function's module), a name ``func`` never binds resolves to a module-level constant bound
    exactly once to an int literal (``BLOCK = 512`` at the top of the file)."""
    assigns = local_assignments(func, name)
    if len(assigns) == 1:
        return assigned_value(assigns[0], name)
    if not assigns and module is not None:
        return _module_int(module, func, name)
    return None


def autotune_configs(call: ast.Call | None, al: Aliases, tree: ast.Module | None = None) -> list[ast.Call]:
    """The ``triton.Config(...)`` calls of an autotune decorator's configs: a literal list, or (with
    ``tree``) a module-level name bound to one or a zero-argument module function returning one."""
    if call is None:
        return []
    cfgs = kwarg(call, "configs")
    if cfgs is None and call.args:
        cfgs = call.args[0]
    if tree is not None and isinstance(cfgs, ast.Call) and isinstance(cfgs.func, ast.Name) and not cfgs.args:
        fn = next((f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == cfgs.func.id), None)
        rets = [r for r in ast.walk(fn) if isinstance(r, ast.Return)] if fn else []
        cfgs = rets[0].value if len(rets) == 1 else cfgs
    elif tree is not None and isinstance(cfgs, ast.Name):
        cfgs = next(
            (
                st.value
                for st in tree.body
                if isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == cfgs.id
            ),
            cfgs,
        )
    if cfgs is None:
        return []
    return [
        n
        for n in ast.walk(cfgs)
        if isinstance(n, ast.Call) and (dotted(n.func) or "").rpartition(".")[2] == "Config"
    ]


def sets_register_cap(call: ast.Call) -> bool:
    """True when the call (an autotune config or a launch) passes ``maxnreg`` with a value other than None."""
    v = kwarg(call, "maxnreg")
    return v is not None and not (isinstance(v, ast.Constant) and v.value is None)


def config_dict(cfg: ast.Call) -> ast.Dict | None:
    """The kwargs dict literal of a ``triton.Config``."""
    d = cfg.args[0] if cfg.args else kwarg(cfg, "kwargs")
    return d if isinstance(d, ast.Dict) else None


@dataclass(frozen=True)
class Site:
    """A place where the value of a tunable (a constexpr or num_warps/num_stages) is written.

    ``node`` is the value expression; ``where`` is "config", "launch", "local" or "range".
    """

    name: str
    node: ast.expr
    where: str
    owner: ast.AST


def value_sites(src: Src, kernel: Kernel, name: str, al: Aliases) -> list[Site]:
    """Where the value of ``name`` (constexpr param, ``num_warps`` or ``num_stages``) is written.

    Looks at autotune configs (dict entries / Config keywords), launches of the kernel (keyword or
    positional), and, when a launch passes a host name, that variable's single assignment (an element
    of a tuple assignment included) or the module-level int constant it names (``single_value``).
    """
    out: list[Site] = []
    meta = name in ("num_warps", "num_stages", "num_ctas", "maxnreg")
    for cfg in autotune_configs(kernel.autotune, al, src.tree):
        if meta:
            v = kwarg(cfg, name)
            if v is not None:
                out.append(Site(name, v, "config", cfg))
        else:
            d = config_dict(cfg)
            if d is not None:
                for k, v in zip(d.keys, d.values, strict=True):
                    if str_const(k) == name:
                        out.append(Site(name, v, "config", cfg))
    kp = kernel.param(name)
    for launch in launches(src.tree, [kernel]):
        if meta:
            v = kwarg(launch.call, name)
        else:
            v = launch_args(launch, kernel).get(name) if kp is not None else None
        if v is None:
            continue
        if isinstance(v, ast.Name):
            local = single_value(launch.func, v.id, launch.module)
            if local is not None:
                out.append(Site(name, local, "local", launch.call))
                continue
        out.append(Site(name, v, "launch", launch.call))
    return out


def kernel_calls(kernel: Kernel, al: Aliases, func: str) -> list[ast.Call]:
    """All ``tl.func(...)`` calls in a kernel body."""
    return [n for n in ast.walk(kernel.node) if tl_call(n, al, func)]


#: ``tl`` calls that make a block pointer or a tensor descriptor, with the positions of their ``shape`` and
#: ``block_shape`` arguments when given positionally.
_BLOCK_MAKERS: dict[str, tuple[int, int]] = {"make_block_ptr": (1, 4), "make_tensor_descriptor": (1, 3)}


def block_shapes(kernel: Kernel, al: Aliases, makers: Sequence[str] = tuple(_BLOCK_MAKERS)
                 ) -> list[tuple[list[ast.expr], list[ast.expr]]]:
    """``(shape, block_shape)`` of every ``tl.make_block_ptr`` / ``tl.make_tensor_descriptor`` (of ``makers``)
    in a kernel whose two are written as lists or tuples (keywords or positions), in source order: the blocks
    such a pointer loads, bounded by the shape as a mask would bound them."""
    out: list[tuple[list[ast.expr], list[ast.expr]]] = []
    calls = sorted((n for n in ast.walk(kernel.node) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        func = tl_func(call, al) or ""
        where = _BLOCK_MAKERS.get(func) if func in makers else None
        if where is None:
            continue
        shape = kwarg(call, "shape") or (call.args[where[0]] if len(call.args) > where[0] else None)
        block = kwarg(call, "block_shape") or (call.args[where[1]] if len(call.args) > where[1] else None)
        if isinstance(shape, (ast.List, ast.Tuple)) and isinstance(block, (ast.List, ast.Tuple)):
            out.append((list(shape.elts), list(block.elts)))
    return out


def arange_blocks(kernel: Kernel, al: Aliases) -> list[str]:
    """Constexpr params that size a tile, in first-use order: the end of ``tl.arange(0, P)``, or a dimension
    of the ``block_shape`` of a block pointer (a kernel written with ``tl.make_block_ptr`` may never call
    ``tl.arange``). Tensor-descriptor kernels are left to their own readers (``accumulator_tile``, the
    tensor-descriptors operator): their tiles as found before stay what the committed walks replay."""
    out: list[str] = []
    cex = set(kernel.constexprs)
    ends: list[tuple[int, int, ast.expr]] = []
    for call in ast.walk(kernel.node):
        if tl_call(call, al, "arange") and len(call.args) == 2:
            ends.append((call.lineno, call.col_offset, call.args[1]))
    for _, block in block_shapes(kernel, al, ("make_block_ptr",)):
        ends += [(d.lineno, d.col_offset, d) for d in block]
    for _, _, end in sorted(ends, key=lambda e: (e[0], e[1])):
        if isinstance(end, ast.Name) and end.id in cex and end.id not in out:
            out.append(end.id)
    return out


def accumulator_tile(kernel: Kernel, al: Aliases) -> list[str]:
    """Constexpr params that give the shape of the highest-rank ``tl.zeros((P, Q), ...)`` whose
    dimensions are all constexpr params (the first in source order among equals): the accumulator
    tile, also of kernels that never call ``tl.arange`` on it (tensor-descriptor loads take offsets,
    not index vectors). Running statistics such as ``tl.zeros([BLOCK_M])`` rank lower."""
    cex = set(kernel.constexprs)
    best: list[str] = []
    calls = sorted((n for n in ast.walk(kernel.node) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        if tl_func(call, al) != "zeros" or not call.args:
            continue
        shape = call.args[0]
        if isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) > len(best) and all(
            isinstance(e, ast.Name) and e.id in cex for e in shape.elts
        ):
            best = [e.id for e in shape.elts]  # type: ignore[attr-defined]
    return best


#: ``tl`` functions that reduce a tile along an axis.
REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum"})


def tl_names(node: ast.AST, al: Aliases) -> set[str]:
    """The ``tl`` functions called anywhere inside a node."""
    return {f for n in ast.walk(node) if (f := tl_func(n, al)) is not None}


def is_row_reduction(kernel: Kernel, al: Aliases) -> bool:
    """True for a kernel that reduces tiles (``tl.sum``/``tl.max``/...), indexes its work by
    ``tl.program_id`` and calls no ``tl.dot``: one reduction per row (softmax, norms, losses)."""
    names = tl_names(kernel.node, al)
    return bool(names & REDUCTIONS) and "dot" not in names and "program_id" in names


def loops(node: ast.AST) -> list[ast.For | ast.While]:
    """All loops inside a node."""
    return [n for n in ast.walk(node) if isinstance(n, (ast.For, ast.While))]


def range_call(loop: ast.AST, al: Aliases) -> ast.Call | None:
    """The ``range(...)`` / ``tl.range(...)`` / ``tl.static_range(...)`` iterator of a for loop."""
    if not isinstance(loop, ast.For) or not isinstance(loop.iter, ast.Call):
        return None
    name = dotted(loop.iter.func) or ""
    if name == "range" or tl_func(loop.iter, al) in ("range", "static_range"):
        return loop.iter
    return None


def loop_step_names(kernel: Kernel, al: Aliases) -> set[str]:
    """Names used as the step of a ``range`` in the kernel (e.g. BLOCK_K in ``range(0, K, BLOCK_K)``),
    plus constexprs appearing in ``tl.cdiv(K, BLOCK_K)`` loop bounds."""
    out: set[str] = set()
    for loop in loops(kernel.node):
        rc = range_call(loop, al)
        if rc is None:
            continue
        if len(rc.args) >= 3 and isinstance(rc.args[2], ast.Name):
            out.add(rc.args[2].id)
        for a in rc.args[:2]:
            for n in ast.walk(a):
                if (
                    isinstance(n, ast.Call)
                    and tl_func(n, al) == "cdiv"
                    and len(n.args) == 2
                    and isinstance(n.args[1], ast.Name)
                ):
                    out.add(n.args[1].id)
    return out


def program_id_axis(call: ast.AST, al: Aliases) -> int | None:
    """Axis of a ``tl.program_id(axis)`` call (default 0), else None."""
    if tl_func(call, al) != "program_id":
        return None
    assert isinstance(call, ast.Call)
    node = call.args[0] if call.args else kwarg(call, "axis")
    return 0 if node is None else int_const(node)


def unique_name(tree: ast.AST, base: str) -> str:
    """``base`` or ``base_2``, ... so that it clashes with no name or argument in the tree."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    used |= {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    if base not in used:
        return base
    i = 2
    while f"{base}_{i}" in used:
        i += 1
    return f"{base}_{i}"
