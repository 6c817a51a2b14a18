"""Shared pieces of the launch-configuration operators (autotune, tile-size, num-warps, pipelining):
config values as source text, the checks a new tile size must pass, the tunables of a kernel."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from klineage.schema import pyast
from klineage.transforms._module import Module
from klineage.transforms._source import Edit, add_keyword, int_const
from klineage.transforms._triton import (
    Kernel,
    arange_blocks,
    autotune_configs,
    kwarg,
    loop_step_names,
    loops,
    tl_call,
    tl_func,
)
from klineage.transforms.operators._common import int_value, reachable

META = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""The keywords of ``triton.Config`` that are launch settings rather than kernel parameters."""


class Raw(str):
    """A source fragment written as is by ``{!r}``."""

    def __repr__(self) -> str:
        return str(self)


def literal(text: Any) -> Any:
    """A recorded config value (source text): an int when it is an int literal, else the text as is."""
    if isinstance(text, (int, bool)):
        return text
    try:
        value = pyast.literal_eval(str(text))
    except (ValueError, SyntaxError):
        return Raw(str(text))
    return value if isinstance(value, int) and not isinstance(value, bool) else Raw(str(text))


def config_text(cfg: dict[str, str]) -> str:
    """The arguments of ``triton.Config`` for a recorded ``{name: value source}`` config."""
    d = ", ".join(f"{k!r}: {v}" for k, v in cfg.items() if k not in META)
    extra = "".join(f", {k}={v}" for k, v in cfg.items() if k in META)
    return f"{{{d}}}{extra}"


_STATIC_NODES = (
    ast.Expression, ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Constant, ast.Load,
    ast.operator, ast.boolop, ast.unaryop, ast.cmpop,
)


def static_ok(k: Kernel, m: Module, values: dict[str, int]) -> bool:
    """False when a ``tl.static_assert`` of the kernel, evaluated on ``values``, fails (e.g.
    ``BLOCK_M % BLOCK_N == 0`` for a smaller BLOCK_M); True when it holds or cannot be evaluated."""
    for call in ast.walk(k.node):
        if not tl_call(call, m.al, "static_assert") or not call.args:
            continue
        expr = ast.Expression(call.args[0])
        if not all(isinstance(n, _STATIC_NODES) for n in ast.walk(expr)):
            continue
        names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
        if not names <= set(values):
            continue
        try:
            if not eval(compile(expr, "<static_assert>", "eval"), {"__builtins__": {}}, dict(values)):
                return False
        except (ArithmeticError, TypeError, ValueError):
            return False
    return True


def pow2_ok(values: dict[str, int], aranges: set[str]) -> bool:
    """``tl.arange`` extents must be powers of two: False when a value given to one is not."""
    return all(v > 0 and v & (v - 1) == 0 for p, v in values.items() if p in aranges)


def has_load_loop(k: Kernel, m: Module) -> bool:
    """A loop with loads in the kernel or in a jit function it calls (what num_stages pipelines)."""
    return any(
        any(
            tl_func(n, m.al) == "load"
            or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load")
            for n in ast.walk(lp)
        )
        for j in reachable(k, m)
        for lp in loops(j.node)
    )


def tile_params(m: Module, k: Kernel, include_steps: bool) -> list[str]:
    """The kernel's ``tl.arange`` block parameters, without the loop steps (K) unless ``include_steps``."""
    steps = loop_step_names(k, m.al)
    return [p for p in arange_blocks(k, m.al) if include_steps or p not in steps]


def fixed_constexprs(m: Module, k: Kernel) -> dict[str, int]:
    """Constexprs given one literal int at every launch (e.g. a BLOCK_N left out of the tuning)."""
    out: dict[str, int] = {}
    for p in k.constexprs:
        vals = {int_value(s) for s in m.sites(k, p) if s.where in ("launch", "local")}
        if len(vals) == 1 and None not in vals:
            out[p] = vals.pop()  # type: ignore[assignment]
    return out


def set_keyword(m: Module, kernels: Iterable[Kernel], name: str, value: int) -> list[Edit]:
    """Edits setting keyword ``name`` to ``value`` on every autotune config (or, for a kernel without
    autotune, every launch not made through a helper) of ``kernels``: a different literal is
    replaced, an absent one added, a computed value left alone."""
    edits: list[Edit] = []
    for k in kernels:
        calls = autotune_configs(k.autotune, m.al, m.src.tree) if k.autotune is not None else [
            la.call for la in m.launches_of(k) if la.helper is None
        ]
        for call in calls:
            v = kwarg(call, name)
            if v is None:
                edits.append(add_keyword(m.src, call, f"{name}={value}"))
            elif int_const(v) is not None and int_const(v) != value:
                edits.append(Edit(*m.src.span(v), str(value)))
    return edits
