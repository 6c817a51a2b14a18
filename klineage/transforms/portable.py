"""Parameters of a lineage step in portable terms: read from the two sources of the step.

A lineage step records site-specific edits (which character span changed), which mean nothing on
another kernel. ``portable_params`` reads the values the expert side of a step sets, in role terms
(``roles.ROLES``) and launch meta-parameters, so a skill can apply them elsewhere through the
operators' portable parameters (``Autotune.apply(configs=)``, ``TileSize.apply(tiles=)``,
``NumWarps.apply(warps=)``, ``Pipelining.apply(stages=)``, ``GroupedOrder.apply(group_size_m=)``,
``RegisterCap.apply(maxnreg=)``, ``EvictionHints``' policies).
"""

from __future__ import annotations

import ast
from typing import Any

from klineage.schema import pyast
from klineage.transforms._module import Module, parse
from klineage.transforms._source import int_const, str_const
from klineage.transforms._triton import autotune_configs, kwarg, single_value, tl_func
from klineage.transforms.operators._common import param_default
from klineage.transforms.operators._configs import pinned_configs
from klineage.transforms.operators._roles import ROLES, kernel_roles
from klineage.transforms.registry import operator_ids

#: The portable keys each operator's parameters are read into (other operators have none).
OPERATOR_KEYS: dict[str, tuple[str, ...]] = {
    "autotune": ("configs",),
    "tile-size": ("tiles",),
    "num-warps": ("warps",),
    "pipelining": ("stages",),
    "grouped-order": ("group_size_m",),
    "register-cap": ("maxnreg",),
    "eviction-hints": ("eviction_policies",),
}


def _value(text: str) -> Any:
    """A config value's source text as a Python literal when it is one, else the text."""
    try:
        return pyast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _role_configs(m: Module) -> list[dict[str, Any]]:
    """Every autotune config of the module in role terms (parameters without a role dropped), in
    order, without duplicates."""
    out: list[dict[str, Any]] = []
    for k in m.kernels:
        if k.autotune is None:
            continue
        roles = kernel_roles(m, k)
        pinned = pinned_configs(m, k)
        if pinned is None:
            continue
        for cfg in pinned:
            d: dict[str, Any] = {}
            for name, text in cfg:
                if name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
                    d[name] = _value(text)
                elif name in roles:
                    d[roles[name]] = _value(text)
            if d and d not in out:
                out.append(d)
    return out


def _tile_values(m: Module, configs: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Role -> distinct int values written for it (the role ``configs``, then literal configs,
    launches, locals, defaults), in order."""
    out: dict[str, list[int]] = {}
    for c in configs:
        for role, v in c.items():
            if role in ROLES and isinstance(v, int) and not isinstance(v, bool) and v not in out.setdefault(role, []):
                out[role].append(v)
    for k in m.kernels:
        for p, role in kernel_roles(m, k).items():
            vals = [int_const(s.node) for s in m.sites(k, p)]
            if not vals:
                vals = [int_const(param_default(k, p))]
            for v in vals:
                if v is not None and v not in out.setdefault(role, []):
                    out[role].append(v)
    return {r: v for r, v in out.items() if v}


def _meta_values(m: Module, name: str, configs: list[dict[str, Any]]) -> list[int]:
    """Distinct int values of ``num_warps`` / ``num_stages`` / ``maxnreg`` in the autotune configs
    (``configs``, already read), on literal configs and launches (and, for stages,
    ``tl.range(num_stages=)``), in that order."""
    out: list[int] = [c[name] for c in configs if isinstance(c.get(name), int)]
    calls: list[ast.Call] = []
    for k in m.kernels:
        calls += autotune_configs(k.autotune, m.al, m.src.tree)
        calls += [la.call for la in m.launches_of(k)]
        if name == "num_stages":
            calls += [n for n in ast.walk(k.node) if tl_func(n, m.al) == "range"]  # type: ignore[misc]
    hosts = {id(la.call): la for k in m.kernels for la in m.launches_of(k)}
    for c in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        node = kwarg(c, name)
        la = hosts.get(id(c))
        if isinstance(node, ast.Name) and la is not None and la.func is not None:
            node = single_value(la.func, node.id, la.module) or node
        out += _branch_ints(node)
    return list(dict.fromkeys(out))


def _branch_ints(node: ast.AST | None) -> list[int]:
    """An int literal, or the int literals a conditional expression (``8 if w >= 2048 else 4``,
    nested) can give; [] for anything else."""
    if isinstance(node, ast.IfExp):
        a, b = _branch_ints(node.body), _branch_ints(node.orelse)
        return a + b if a and b else []
    v = int_const(node)
    return [] if v is None else [v]


def _meta_exprs(m: Module, name: str) -> list[str]:
    """Source text of the ``name=`` values at launches that are not an int (computed on the host)."""
    out: list[str] = []
    for k in m.kernels:
        for la in m.launches_of(k):
            node = kwarg(la.call, name)
            if node is None or int_const(node) is not None:
                continue
            if isinstance(node, ast.Name) and int_const(single_value(la.func, node.id, la.module)) is not None:
                continue
            text = m.src.seg(node)
            if isinstance(node, ast.Name) and (v := single_value(la.func, node.id, la.module)) is not None:
                text = m.src.seg(v)
            if text not in out:
                out.append(text)
    return out


def _group_sizes(m: Module) -> list[int]:
    out: list[int] = []
    for k in m.kernels:
        for p, role in kernel_roles(m, k).items():
            if role != "group_size_m":
                continue
            vals = [int_const(s.node) for s in m.sites(k, p)] + [int_const(param_default(k, p))]
            out += [v for v in vals if v is not None and v not in out]
    return out


def _eviction(m: Module) -> list[dict[str, str]]:
    """``{"op": "load"|"store", "policy": ...}`` for each distinct eviction policy in the kernels."""
    out: list[dict[str, str]] = []
    for k in m.kernels:
        for n in ast.walk(k.node):
            f = tl_func(n, m.al)
            if f in ("load", "store"):
                pol = str_const(kwarg(n, "eviction_policy"))  # type: ignore[arg-type]
                rec = {"op": f, "policy": pol}
                if pol and rec not in out:
                    out.append(rec)  # type: ignore[arg-type]
    return out


def kernel_params(source: str) -> dict[str, Any]:
    """Every portable parameter a source sets: ``configs`` (autotune configs in role terms),
    ``tiles`` (role -> first value written) with ``tile_values`` (role -> every distinct value),
    ``warps`` / ``stages`` / ``maxnreg`` / ``group_size_m`` (the largest int value written, with
    ``*_values`` lists; values a launch computes on the host are given as source text in
    ``warps_exprs`` / ``stages_exprs`` / ``maxnreg_exprs``, the int branches of a conditional
    counting as values), ``eviction_policies``. Keys with nothing written are left out. ValueError
    when the source does not parse."""
    m = parse(source)
    if m is None:
        raise ValueError("kernel_params: the source does not parse as Python")
    out: dict[str, Any] = {}
    configs = _role_configs(m)
    if configs:
        out["configs"] = configs
    tiles = _tile_values(m, configs)
    if tiles:
        out["tiles"] = {r: v[0] for r, v in tiles.items() if r != "group_size_m"}
        out["tile_values"] = {r: v for r, v in tiles.items() if r != "group_size_m"}
        if not out["tiles"]:
            del out["tiles"], out["tile_values"]
    for key, name in (("warps", "num_warps"), ("stages", "num_stages"), ("maxnreg", "maxnreg")):
        vals = _meta_values(m, name, configs)
        if vals:
            out[key] = max(vals)
            out[f"{key}_values"] = vals
        exprs = _meta_exprs(m, name)
        if exprs:
            out[f"{key}_exprs"] = exprs
    groups = _group_sizes(m)
    if groups:
        out["group_size_m"] = max(groups)
        out["group_size_m_values"] = groups
    ev = _eviction(m)
    if ev:
        out["eviction_policies"] = ev
    return out


def portable_params(operator_id: str, before: str, after: str) -> dict[str, Any]:
    """The parameters of one lineage step in portable terms, read from the expert side ``before``
    (which has the optimization) and the simplified side ``after`` (which lacks it): for each key
    the operator sets (``OPERATOR_KEYS``) the value in ``before`` — for ``tiles`` those of the
    kernels whose tile values differ between the two sides (all kernels when none differ), each with its
    ``*_values`` list where there is one. Operators without portable parameters give ``{}``.
    ValueError for an unknown operator id or a source that does not parse."""
    if operator_id not in operator_ids():
        raise ValueError(f"portable_params: unknown operator {operator_id!r}")
    keys = OPERATOR_KEYS.get(operator_id, ())
    if not keys:
        return {}
    pb = kernel_params(before)
    if parse(after) is None:
        raise ValueError("portable_params: the simplified source does not parse as Python")
    out: dict[str, Any] = {}
    for key in keys:
        if key not in pb:
            continue
        if key == "tiles":
            vals = _changed_tiles(before, after) or pb["tile_values"]
            out["tiles"] = {r: v[0] for r, v in vals.items()}
            out["tile_values"] = vals
            continue
        out[key] = pb[key]
        if f"{key}_values" in pb:
            out[f"{key}_values"] = pb[f"{key}_values"]
    for key in keys:
        if f"{key}_exprs" in pb:
            out[f"{key}_exprs"] = pb[f"{key}_exprs"]
    return out


def _kernel_tile_values(source: str) -> dict[tuple[str, str], tuple[str, list[Any]]]:
    """(kernel, param) -> (role, every value written for it in order: each autotune config's, then
    the launch / local / default sites)."""
    m = parse(source)
    if m is None:
        raise ValueError("portable_params: a source does not parse as Python")
    out: dict[tuple[str, str], tuple[str, list[Any]]] = {}
    for k in m.kernels:
        roles = kernel_roles(m, k)
        pinned = pinned_configs(m, k) if k.autotune is not None else None
        for p, role in roles.items():
            if role == "group_size_m":
                continue
            vals: list[Any] = [_value(dict(c).get(p, "None")) for c in pinned or []]
            vals += [int_const(s.node) for s in m.sites(k, p) if s.where != "config" or pinned is None]
            vals.append(int_const(param_default(k, p)))
            out[(k.name, p)] = (role, vals)
    return out


def _changed_tiles(before: str, after: str) -> dict[str, list[int]]:
    """Role -> distinct int values (in order) of the tile parameters of every kernel whose tile values
    differ between the two sources, read from ``before``."""
    vb, va = _kernel_tile_values(before), _kernel_tile_values(after)
    changed = {kern for (kern, p), (_, vals) in vb.items() if (kern, p) not in va or va[(kern, p)][1] != vals}
    out: dict[str, list[int]] = {}
    for (kern, _p), (role, vals) in vb.items():
        if kern not in changed:
            continue
        for v in vals:
            if isinstance(v, int) and not isinstance(v, bool) and v not in out.setdefault(role, []):
                out[role].append(v)
    return {r: v for r, v in out.items() if v}
