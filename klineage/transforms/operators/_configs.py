"""Reading an ``@triton.autotune`` decorator's config list as written: ``pinned_configs``."""

from __future__ import annotations

import ast

from klineage.schema import pyast
from klineage.transforms._module import Module
from klineage.transforms._source import str_const
from klineage.transforms._triton import Kernel, config_dict, dotted, kwarg


def pinned_configs(m: Module, k: Kernel) -> list[list[tuple[str, str]]] | None:
    """Each config of an autotune decorator as ``[(name, value source)]``: a literal list of
    ``triton.Config``, or a zero-argument module function returning one (optionally a comprehension
    over a literal table). None when the configs are computed some other way."""
    assert k.autotune is not None
    node = kwarg(k.autotune, "configs") or (k.autotune.args[0] if k.autotune.args else None)
    table_env: dict[str, ast.expr] = {}
    if isinstance(node, ast.Name):
        unpacked = _unpacked_config_call(m, node.id)
        if unpacked is not None:
            node, table_env = unpacked
            return _configs_from_node(m, node, table_env)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        fn = next(
            (f for f in m.src.tree.body if isinstance(f, ast.FunctionDef) and f.name == node.func.id), None
        )
        rets = [r for r in ast.walk(fn) if isinstance(r, ast.Return)] if fn else []
        node = rets[0].value if len(rets) == 1 else None
        if fn is not None:
            table_env = _function_locals(fn)
    elif isinstance(node, ast.Name):
        node = next(
            (
                s.value
                for s in m.src.tree.body
                if isinstance(s, ast.Assign)
                and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)
                and s.targets[0].id == node.id
            ),
            None,
        )
    return _configs_from_node(m, node, table_env)


def _function_locals(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    """Top-level ``name = value`` statements of a function body."""
    return {
        st.targets[0].id: st.value
        for st in fn.body
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
    }


def _unpacked_config_call(m: Module, name: str) -> tuple[ast.expr, dict[str, ast.expr]] | None:
    """``NAME, OTHER = helper()`` at module level with ``helper`` a zero-argument module function
    whose single ``return`` is a tuple: the tuple element bound to ``NAME`` and the function's
    locals (a config table built by a function, e.g. configs plus the head dims each is meant for)."""
    for st in m.src.tree.body:
        if not (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Tuple)
            and isinstance(st.value, ast.Call)
            and isinstance(st.value.func, ast.Name)
            and not st.value.args
            and not st.value.keywords
        ):
            continue
        names = [t.id if isinstance(t, ast.Name) else None for t in st.targets[0].elts]
        if name not in names:
            continue
        fn = next(
            (f for f in m.src.tree.body if isinstance(f, ast.FunctionDef) and f.name == st.value.func.id), None
        )
        if fn is None or fn.args.args or fn.args.vararg or fn.args.kwonlyargs:
            return None
        rets = [r for r in ast.walk(fn) if isinstance(r, ast.Return)]
        if len(rets) != 1 or not isinstance(rets[0].value, ast.Tuple):
            return None
        elts = rets[0].value.elts
        if len(elts) != len(names):
            return None
        return elts[names.index(name)], _function_locals(fn)
    return None


def _configs_from_node(
    m: Module, node: ast.expr | None, table_env: dict[str, ast.expr]
) -> list[list[tuple[str, str]]] | None:
    """Configs of a literal list of ``triton.Config`` or of a comprehension over a literal table."""
    if isinstance(node, (ast.List, ast.Tuple)):
        cfgs = [c for c in node.elts if isinstance(c, ast.Call) and (dotted(c.func) or "").endswith("Config")]
        if len(cfgs) != len(node.elts) or not cfgs:
            return None
        found = [_config_kwargs(m, c, {}) for c in cfgs]
        kwargs = [o for o in found if o is not None]
        return kwargs if len(kwargs) == len(found) else None
    if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs:
        gen = node.generators[0]
        cfg = node.elt
        if not (isinstance(cfg, ast.Call) and (dotted(cfg.func) or "").endswith("Config")):
            return None
        table: ast.expr | None = gen.iter
        if isinstance(table, ast.Name):
            table = table_env.get(table.id)
        try:
            rows = pyast.literal_eval(table) if table is not None else None
        except ValueError:
            return None
        if not isinstance(rows, (list, tuple)):
            return None
        targets = gen.target.elts if isinstance(gen.target, ast.Tuple) else [gen.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
        out: list[list[tuple[str, str]]] = []
        for row in rows:
            values = row if isinstance(gen.target, ast.Tuple) else (row,)
            if len(values) != len(targets):
                return None
            env = {t.id: repr(v) for t, v in zip(targets, values, strict=True)}  # type: ignore[attr-defined]
            kws = _config_kwargs(m, cfg, env)
            if kws is None:
                return None
            out.append(kws)
        return out
    return None


def _config_kwargs(m: Module, cfg: ast.Call, env: dict[str, str]) -> list[tuple[str, str]] | None:
    def text(v: ast.expr) -> str | None:
        if isinstance(v, ast.Name) and v.id in env:
            return env[v.id]
        if env and any(isinstance(n, ast.Name) and n.id in env for n in ast.walk(v)):
            return None
        return m.src.seg(v)

    d = config_dict(cfg)
    if d is None:
        return None
    out = []
    for key, v in zip(d.keys, d.values, strict=True):
        name, t = str_const(key), text(v)
        if name is None or t is None:
            return None
        out.append((name, t))
    for kw in cfg.keywords:
        if kw.arg in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
            t = text(kw.value)
            if t is None:
                return None
            out.append((kw.arg, t))
        elif kw.arg not in ("kwargs",):
            return None  # pre_hook and friends: do not guess
    return out
