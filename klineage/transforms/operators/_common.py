"""Shared pieces of the operators: parsing a candidate once, anchors, value-site edits."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, int_const
from klineage.transforms._triton import Kernel, Launch, Site, single_value, tl_func
from klineage.transforms.operator import Anchor


def has_dot(k: Kernel, m: Module) -> bool:
    """True when the kernel's own body calls ``tl.dot`` (not counting jit helpers it calls)."""
    return any(tl_func(n, m.al) == "dot" for n in ast.walk(k.node))


def reachable(k: Kernel, m: Module) -> list[Kernel]:
    """The kernel and every jit function of the module it calls, at any depth (attention kernels
    often keep the QK^T / PV loop in a helper)."""
    by_name = {j.name: j for j in m.kernels}
    out, todo = [k], [k]
    while todo:
        cur = todo.pop()
        for n in ast.walk(cur.node):
            name = n.func.id if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) else None
            if name in by_name and all(name != j.name for j in out):
                out.append(by_name[name])
                todo.append(by_name[name])
    return out


def reaches_dot(k: Kernel, m: Module) -> bool:
    """True when the kernel or a jit function it calls (``reachable``) calls ``tl.dot``."""
    return any(has_dot(j, m) for j in reachable(k, m))


def anchor(kind: str, node: ast.AST, description: str, kernel: Kernel | None = None) -> Anchor:
    """An anchor spanning a node's lines."""
    start = getattr(node, "lineno", 1)
    for deco in getattr(node, "decorator_list", []):
        start = min(start, deco.lineno)
    end = getattr(node, "end_lineno", start) or start
    return Anchor(kind, start, end, description, kernel.name if kernel else None)  # type: ignore[arg-type]


def int_value(site: Site) -> int | None:
    """The int literal written at a site, else None."""
    return int_const(site.node)


def param_default(kernel: Kernel, name: str) -> ast.expr | None:
    """The default value node of a kernel parameter, else None."""
    args = kernel.node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(positional, defaults, strict=True):
        if a.arg == name:
            return d
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if a.arg == name:
            return d
    return None


def grid_tuple(m: Module, launch: Launch) -> tuple[ast.expr, str | None] | None:
    """The grid as a tuple/list expression and the name of its meta argument (None for a plain
    tuple): follows a local name to a tuple, a lambda, or a local ``def grid(meta): return (...)``."""
    g = launch.grid
    if isinstance(g, ast.Name) and launch.func is not None:
        v = single_value(launch.func, g.id)
        if v is not None:
            g = v
        else:
            # the def the launch sees: the last one of that name above it (each branch may have its own)
            defs = [n for n in ast.walk(launch.func) if isinstance(n, ast.FunctionDef) and n.name == g.id
                    and n is not launch.func and n.lineno < launch.call.lineno]
            node = max(defs, key=lambda n: n.lineno) if defs else None
            if node is not None:
                rets = [r for r in ast.walk(node) if isinstance(r, ast.Return)]
                if node.args.args and len(rets) == 1 and isinstance(rets[0].value, (ast.Tuple, ast.List)):
                    return rets[0].value, node.args.args[0].arg
                return None
    if isinstance(g, ast.Lambda) and g.args.args:
        if isinstance(g.body, (ast.Tuple, ast.List)):
            return g.body, g.args.args[0].arg
        return None
    if isinstance(g, (ast.Tuple, ast.List)):
        return g, None
    return None


def sm_names(m: Module, func: ast.FunctionDef | None) -> set[str]:
    """Local names (and module constants) whose value is an SM count: an expression mentioning
    ``multi_processor_count`` directly or through a module-level helper function."""
    helpers = {
        f.name
        for f in m.src.tree.body
        if isinstance(f, ast.FunctionDef)
        and any(isinstance(n, ast.Attribute) and n.attr == "multi_processor_count" for n in ast.walk(f))
    }

    def is_sm(expr: ast.AST, known: set[str]) -> bool:
        for n in ast.walk(expr):
            if isinstance(n, ast.Attribute) and n.attr == "multi_processor_count":
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers:
                return True
            if isinstance(n, ast.Name) and n.id in known:
                return True
        return False

    out: set[str] = set()
    scopes: list[ast.AST] = [m.src.tree] + ([func] if func is not None else [])
    for _ in range(3):
        for scope in scopes:
            body = scope.body if isinstance(scope, (ast.Module, ast.FunctionDef)) else []
            nodes = ast.walk(scope) if isinstance(scope, ast.FunctionDef) else iter(body)
            for n in nodes:
                if (
                    isinstance(n, ast.Assign)
                    and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name)
                    and is_sm(n.value, out)
                ):
                    out.add(n.targets[0].id)
    return out


def merge_appends(edits: list[Edit]) -> list[Edit]:
    """Several insertions at the same offset become one (in order); of two replacements of the same
    span the later wins."""
    out: dict[tuple[int, int], Edit] = {}
    for e in edits:
        key = (e.start, e.end)
        if key in out and e.start == e.end:
            out[key] = Edit(e.start, e.end, out[key].text + e.text)
        else:
            out[key] = e
    return list(out.values())
