"""Launch-configuration operators: autotune, tile-size, num-warps, pipelining, register-cap, grouped-order.

They edit the values of tunables where they are written (autotune configs, launch keywords, a local
int passed at the launch), so they work on any kernel whose tunables are literal somewhere.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, ClassVar

from klineage.schema import pyast
from klineage.transforms._source import (
    Edit,
    add_keyword,
    add_param,
    apply_edits,
    int_const,
    remove_keyword,
    remove_keywords,
    str_const,
)
from klineage.transforms._triton import (
    Kernel,
    accumulator_tile,
    arange_blocks,
    autotune_configs,
    config_dict,
    dotted,
    kwarg,
    launch_args,
    loop_step_names,
    loops,
    range_call,
    sets_register_cap,
    single_value,
    tl_func,
    unique_name,
)
from klineage.transforms.features import dot_loops, pid_derived
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import (
    Module,
    anchor,
    grid_tuple,
    has_dot,
    int_value,
    param_default,
    parse,
    reachable,
    reaches_dot,
)
from klineage.transforms.operators._grid import (
    grid_divs,
    grid_names,
    grid_shared,
    launch_values,
    meta_reads,
    pair_div,
    partitioned,
)
from klineage.transforms.operators._restore import (
    check_params,
    find_call,
    hunks,
    kw_insert,
    kw_record,
    require_list,
    rewrite_with_hunks,
    where,
)
from klineage.transforms.operators._roles import ROLES, kernel_roles, movable_params, role_params


def _has_load_loop(k: Kernel, m: Module) -> bool:
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


# ----------------------------------------------------------------------------------------- autotune


def _pinned_configs(m: Module, k: Kernel) -> list[list[tuple[str, str]]] | None:
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
        out = [_config_kwargs(m, c, {}) for c in cfgs]
        return None if any(o is None for o in out) else out  # type: ignore[return-value]
    if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs:
        gen = node.generators[0]
        cfg = node.elt
        if not (isinstance(cfg, ast.Call) and (dotted(cfg.func) or "").endswith("Config")):
            return None
        table = gen.iter
        if isinstance(table, ast.Name):
            table = table_env.get(table.id)  # type: ignore[assignment]
        try:
            rows = pyast.literal_eval(table) if table is not None else None
        except ValueError:
            return None
        if not isinstance(rows, (list, tuple)):
            return None
        targets = gen.target.elts if isinstance(gen.target, ast.Tuple) else [gen.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
        out = []
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


class Autotune(Operator):
    """``@triton.autotune`` over tile sizes / warps / stages, keyed on the problem shape."""

    id = "autotune"
    name = "Autotune launch configurations"
    intent = "Let Triton pick tile sizes, warps and stages per problem shape instead of one fixed launch."
    carrier = "the kernel's decorators (@triton.autotune with configs and key) and the launch keywords"
    anchor_predicate = "n_kernels >= 1 and not uses_autotune"
    anchor_description = "a kernel launched with literal tile sizes (constexpr keywords) and no autotuning"
    default_params: ClassVar[Mapping[str, Any]] = {"config": 0}

    def detect(self, source: str) -> list[Anchor]:
        """Autotuned kernels (present) and launched kernels with literal constexpr tiles (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k in m.kernels:
            if k.autotune is not None:
                out.append(anchor("present", k.autotune, f"{k.name} is autotuned", k))
            elif k in m.launched and self._tunables(m, k):
                out.append(anchor("applicable", k.node, f"{k.name} launches with fixed tile sizes", k))
        return out

    # -- simplify: pin one config
    def simplify(self, source: str, config: int = 0) -> Rewrite | None:
        """Remove ``@triton.autotune``; the chosen config (default the first) is pinned at every launch."""
        m = parse(source)
        if m is None:
            return None
        edits: list[Edit] = []
        removed: dict[str, Any] = {}
        for k in m.kernels:
            if k.autotune is None or any(
                kw.arg in ("reset_to_zero", "restore_value", "pre_hook", "post_hook")
                for kw in k.autotune.keywords
            ):
                continue
            cfgs = _pinned_configs(m, k)
            if cfgs is None or config >= len(cfgs):
                continue
            pinned = cfgs[config]
            key = kwarg(k.autotune, "key")
            removed[k.name] = {
                "configs": [dict(c) for c in cfgs],
                "key": m.src.seg(key) if key is not None else None,
            }
            lines = m.src.line_span(k.autotune.lineno, k.autotune.end_lineno or k.autotune.lineno)
            edits.append(Edit(lines[0], lines[1], ""))
            for la in m.launches_of(k):
                passed = set(launch_args(la, k)) | {kw.arg for kw in la.call.keywords if kw.arg}
                extra = [f"{n}={v}" for n, v in pinned if n not in passed]
                if la.helper is not None and self._helper_uses_autotuner(m, la.helper):
                    call = la.call
                    rest = [m.src.seg(a) for a in call.args[la.skip :]]
                    rest += [m.src.seg(kw) for kw in call.keywords] + extra
                    text = f"{la.kernel}[{m.src.seg(la.grid)}]({', '.join(rest)})"
                    edits.append(Edit(*m.src.span(call), text))
                else:
                    for e in extra:
                        edits.append(add_keyword(m.src, la.call, e))
                    # several extras on one call: merge into one edit
        if not edits:
            return None
        edits = _merge_appends(edits)
        params = {"config": config, "kernels": removed, "code": hunks(source, edits)}
        return self._rewrite(source, apply_edits(source, edits), params, "simplify")

    @staticmethod
    def _helper_uses_autotuner(m: Module, helper: str) -> bool:
        fn = next(f for f in m.src.tree.body if isinstance(f, ast.FunctionDef) and f.name == helper)
        return any(isinstance(n, ast.Attribute) and n.attr in ("fn", "configs") for n in ast.walk(fn))

    # -- apply
    def _tunables(self, m: Module, k: Kernel) -> dict[str, int]:
        """Constexpr tile params with one int value at every launch (literal or a local int) that a
        rewrite may move (``movable_params``: not a block that must cover a whole extent)."""
        out: dict[str, int] = {}
        tiles = set(arange_blocks(k, m.al)) & movable_params(m, k)
        for p in k.constexprs:
            if p not in tiles:
                continue
            vals = {int_value(s) for s in m.sites(k, p) if s.where in ("launch", "local")}
            if len(vals) == 1 and None not in vals:
                out[p] = vals.pop()  # type: ignore[assignment]
        return out

    def apply(
        self,
        source: str,
        config: int | None = None,
        kernels: dict[str, Any] | None = None,
        code: list[dict[str, Any]] | None = None,
        configs: list[dict[str, Any]] | None = None,
        key: list[str] | None = None,
        **params: Any,
    ) -> Rewrite | None:
        """Add ``@triton.autotune`` to each launched kernel with literal tile sizes; the tuned keywords
        leave the launches and the grid becomes a function of META (a grid written with the literal
        tile, ``triton.cdiv(M, 32)`` / ``(M + 31) // 32``, or through a host local, is rewritten to
        count with ``META[tile]``; when the literal cannot be paired with exactly one tile parameter the
        kernel is left alone, and with no kernel rewritten the result is None: never a wrong grid).

        Config sources, first that applies:
        - ``code`` (what simplify recorded): put back the expert's decorator(s) and launches exactly;
        - ``configs``: a portable config list in role terms (``roles.ROLES``), e.g.
          ``[{"tile_m": 128, "tile_n": 256, "tile_k": 64, "num_warps": 8, "num_stages": 3}]``; each
          role is mapped onto the kernel's own parameter (``tile_roles``); a role the kernel lacks, or
          whose parameter is not a literal at the launch, is ignored for that kernel; a tuned parameter
          a config leaves out keeps its current launch value; a config that breaks a
          ``tl.static_assert`` is dropped; kernel parameter names are accepted as keys too;
        - ``kernels`` (``{kernel: {"configs": [{name: value source}], "key": "[...]"}}``): the
          expert's config list and key for that kernel (keys the kernel lacks are dropped);
        - otherwise: the current launch config plus larger and smaller tile variants.
        ``key`` (kernel parameter names) overrides the autotune key (names the kernel lacks are
        dropped); ``config`` is the index of the config simplify pinned (checked against ``kernels``)."""
        check_params(self.id, params, ())
        if kernels is not None and not isinstance(kernels, dict):
            raise ValueError("autotune.apply: kernels must map kernel names to {'configs', 'key'}")
        if configs is not None and (
            not isinstance(configs, list) or not configs or not all(isinstance(c, dict) for c in configs)
        ):
            raise ValueError("autotune.apply: configs must be a non-empty list of dicts (role or param -> value)")
        if key is not None and (not isinstance(key, list) or not all(isinstance(x, str) for x in key)):
            raise ValueError("autotune.apply: key must be a list of kernel parameter names")
        if (
            config is not None
            and kernels is not None
            and any(config >= len(v.get("configs") or []) for v in kernels.values())
        ):
                raise ValueError(f"autotune.apply: config {config} is not one of the recorded configs")
        if require_list(self.id, "code", code) is not None:
            return rewrite_with_hunks(self, source, code, {"config": config, "kernels": kernels, "code": code})
        m = parse(source)
        if m is None:
            return None
        edits: list[Edit] = []
        for k in m.launched:
            if k.autotune is not None:
                continue
            given = (kernels or {}).get(k.name)
            got = self._kernel_edits(m, k, configs, given, key)
            if got is not None:
                edits += got
        if not edits:
            return None
        out = {"configs": configs, "key": key} if configs is not None else {}
        return self._rewrite(source, apply_edits(source, _merge_appends(edits)), out, "apply")

    def _plan_configs(
        self, m: Module, k: Kernel, role_configs: list[dict[str, Any]] | None, given: dict[str, Any] | None
    ) -> tuple[set[str], list[dict[str, str]]] | None:
        """The parameters to tune and the configs (name -> value source, meta keywords included)."""
        passed = {n for la in m.launches_of(k) for n in launch_args(la, k)}
        defaults = {
            p: v
            for p in k.constexprs
            if p not in passed and (v := int_const(param_default(k, p))) is not None
        }
        fixed = {**defaults, **self._fixed_constexprs(m, k)}
        tun = self._tunables(m, k)
        cex = set(k.constexprs)
        movable = movable_params(m, k)
        aranges = set(arange_blocks(k, m.al))
        if role_configs is not None:
            roles = kernel_roles(m, k)
            mapped: list[dict[str, Any]] = []
            for cfg in role_configs:
                d: dict[str, Any] = {}
                for name, value in cfg.items():
                    if name in _META:
                        d[name] = value
                    elif name in ROLES:
                        d.update({p: value for p in role_params(roles, name) if p in fixed and p in movable})
                    elif name in fixed and name in movable:
                        d[name] = value
                mapped.append(d)
            tuned = {p for d in mapped for p in d if p not in _META}
            if not tuned and not any(n in _META for d in mapped for n in d):
                return None  # nothing of the configs applies to this kernel
        elif given:
            mapped = [
                {n: _literal(v) for n, v in c.items() if n in _META or n in cex} for c in given.get("configs") or []
            ]
            tuned = {p for d in mapped for p in d if p not in _META} | set(tun)
        else:
            return (set(tun), []) if tun else None
        if not mapped:
            return None
        out: list[dict[str, str]] = []
        for d in mapped:
            full = {p: d.get(p, fixed.get(p)) for p in sorted(tuned, key=k.constexprs.index)}
            if any(v is None for v in full.values()):
                return None
            ints = {p: v for p, v in {**fixed, **full}.items() if isinstance(v, int) and not isinstance(v, bool)}
            if not _static_ok(k, m, ints) or not _pow2_ok(ints, aranges):
                continue
            full.update({n: v for n, v in d.items() if n in _META})
            text = {n: (str(v) if isinstance(v, _Raw) else repr(v)) for n, v in full.items()}
            if text not in out:
                out.append(text)
        return (tuned, out) if out else None

    def _kernel_edits(
        self,
        m: Module,
        k: Kernel,
        role_configs: list[dict[str, Any]] | None,
        given: dict[str, Any] | None,
        key: list[str] | None,
    ) -> list[Edit] | None:
        """The edits autotuning one kernel: decorator, launch keywords, grid; None when refused."""
        plan = self._plan_configs(m, k, role_configs, given)
        if plan is None:
            return None
        tuned, planned = plan
        lts = m.launches_of(k)
        if any(la.helper is not None or la.func is None for la in lts):
            return None
        # warps/stages literal at every launch join the configs
        meta: dict[str, int] = {}
        for name in ("num_warps", "num_stages"):
            vals = {int_const(kwarg(la.call, name)) for la in lts}
            if len(vals) == 1 and None not in vals:
                meta[name] = vals.pop()  # type: ignore[assignment]
        meta_set = {n for c in planned for n in c if n in _META}
        if any(kwarg(la.call, n) is not None and n not in meta for la in lts for n in meta_set):
            return None  # a launch computes warps/stages itself: do not override it silently
        local_names: dict[str, str] = {}  # local var -> param
        edits: list[Edit] = []
        for la in lts:
            args = launch_args(la, k)
            for p in tuned:
                v = args.get(p)
                if v is None and param_default(k, p) is not None:
                    continue  # left to its default at the launch: the configs set it
                if v is None or not any(kw.arg == p for kw in la.call.keywords):
                    return None  # passed positionally: leave it
                if isinstance(v, ast.Name):
                    local_names[v.id] = p
            edits += remove_keywords(m.src, la.call, {*tuned, *meta, *meta_set})
            grid_edit = self._meta_grid(m, k, la, local_names, tuned)
            if grid_edit is None:
                return None
            if grid_edit is not True:
                edits.append(grid_edit)  # type: ignore[arg-type]
            # a tuned local used anywhere else in host code would go stale
            uses = [
                n
                for n in ast.walk(la.func)  # type: ignore[arg-type]
                if isinstance(n, ast.Name) and n.id in local_names and isinstance(n.ctx, ast.Load)
            ]
            grid_nodes = set(map(id, ast.walk(la.grid))) | set(map(id, ast.walk(la.call)))
            gt = grid_tuple(m, la)
            if gt is not None:
                grid_nodes |= set(map(id, ast.walk(gt[0])))
            if any(id(u) not in grid_nodes for u in uses):
                return None
        if planned:
            cfg_texts = []
            for c in planned:
                full = {**{n: str(v) for n, v in meta.items()}, **c}
                cfg_texts.append(_config_text(full))
        else:
            fixed = self._fixed_constexprs(m, k)
            tun = {p: v for p, v in self._tunables(m, k).items() if p in tuned}
            cfg_texts = self._configs(
                tun, meta, has_dot(k, m), lambda var, k=k, fixed=fixed: _static_ok(k, m, {**fixed, **var})
            )
        kkey: Any = self._key(m, k)
        if key is not None:
            names = {p.name for p in k.params}
            kkey = [x for x in key if x in names] or kkey
        elif given and given.get("key") and role_configs is None:
            kkey = _Raw(given["key"])
        indent = m.src.indent_of(k.node.lineno)
        cfg_lines = "".join(f"{indent}        {m.triton}.Config({c}),\n" for c in cfg_texts)
        deco = (
            f"{indent}@{m.triton}.autotune(\n{indent}    configs=[\n{cfg_lines}{indent}    ],\n"
            f"{indent}    key={kkey!r},\n{indent})\n"
        )
        first = min([d.lineno for d in k.node.decorator_list])
        pos = m.src.line_span(first, first)[0]
        edits.append(Edit(pos, pos, deco))
        return edits

    @staticmethod
    def _fixed_constexprs(m: Module, k: Kernel) -> dict[str, int]:
        """Constexprs given one literal int at every launch (e.g. a BLOCK_N left out of the tuning)."""
        out: dict[str, int] = {}
        for p in k.constexprs:
            vals = {int_value(s) for s in m.sites(k, p) if s.where in ("launch", "local")}
            if len(vals) == 1 and None not in vals:
                out[p] = vals.pop()  # type: ignore[assignment]
        return out

    @staticmethod
    def _configs(
        tun: dict[str, int], meta: dict[str, int], dot: bool, ok: Any = lambda var: True
    ) -> list[str]:
        lo = 16
        variants = [dict(tun)]
        bigger = {p: min(v * 2, 256 if dot else 65536) for p, v in tun.items()}
        smaller = {p: max(v // 2, lo) for p, v in tun.items()}
        for var in (bigger, smaller):
            if var not in variants and ok(var):
                variants.append(var)
        out = []
        for i, var in enumerate(variants):
            d = ", ".join(f"{p!r}: {v}" for p, v in var.items())
            kws = dict(meta)
            if i == 1:
                kws["num_warps"] = max(meta.get("num_warps", 4), 8)
            extra = "".join(f", {n}={v}" for n, v in kws.items())
            out.append(f"{{{d}}}{extra}")
        return out

    @staticmethod
    def _key(m: Module, k: Kernel) -> list[str]:
        """Shape-like runtime parameters: not pointers, not strides, not constexpr, not tensors."""
        key = []
        for la in m.launches_of(k)[:1]:
            args = launch_args(la, k)
            run_params = {a.arg for a in la.func.args.args} if la.func else set()
            for p in k.params:
                if p.constexpr or p.name not in args:
                    continue
                low = p.name.lower()
                if "ptr" in low or "stride" in low or "eps" in low or "scale" in low:
                    continue
                v = args[p.name]
                if isinstance(v, ast.Name) and v.id in run_params:
                    continue
                if isinstance(v, ast.Constant) and isinstance(v.value, float):
                    continue
                if isinstance(v, ast.Name) and la.func is not None:
                    val = single_value(la.func, v.id)
                    if isinstance(val, ast.Call) and (dotted(val.func) or "").startswith("torch."):
                        continue
                key.append(p.name)
        return key

    @staticmethod
    def _meta_grid(m: Module, k: Kernel, la: Any, local_names: dict[str, str], tuned: set[str]) -> Edit | bool | None:
        """Rewrite the grid so it counts with ``META[tile]`` for every tuned tile: tuned host locals
        become ``META[...]`` and ceil-divisions by a literal tile paired with a tuned parameter
        (``_grid.pair_div``) become ``triton.cdiv(dim, META[...])``. True when nothing needs to change;
        None (refuse) when the grid cannot be read, divides by a constant it cannot pair, or would
        still not count with a tuned parameter that the program id partitions."""
        gt = grid_tuple(m, la)
        if gt is None:
            return None
        node, meta = gt
        divs = grid_divs(m, la)
        if divs is None:
            return None
        values = launch_values(m, k, la)
        must = partitioned(m, k) & tuned
        if grid_shared(la) and (must or divs or any(
            isinstance(n, ast.Name) and n.id in local_names for n in ast.walk(node)
        )):
            return None  # the grid is another launch's too
        repl: list[tuple[ast.AST, str]] = []
        counted: set[str] = set()
        meta_name = meta or "META"
        for div in divs:
            p = pair_div(m, k, la, div, values)
            if p is None:
                return None  # a literal tile the grid divides by that no parameter explains
            if p in tuned:
                repl.append((div.node, f"{m.triton}.cdiv({m.src.seg(div.dim)}, {meta_name}[{p!r}])"))
                counted.add(p)
        inside = {id(x) for r, _ in repl for x in ast.walk(r)}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in local_names and id(n) not in inside:
                repl.append((n, f"{meta_name}[{local_names[n.id]!r}]"))
                counted.add(local_names[n.id])
        if meta is not None:
            counted |= meta_reads(m, la)
        if not must <= counted:
            return None  # the grid would keep counting with the old tile
        if not repl:
            return True
        start, end = m.src.span(node)
        text = m.src.text[start:end]
        for r, new in sorted(repl, key=lambda t: m.src.span(t[0])[0], reverse=True):
            hs, he = m.src.span(r)
            text = text[: hs - start] + new + text[he - start :]
        if meta is not None:
            return Edit(start, end, text)
        return Edit(start, end, f"lambda META: {text}")


class _Raw(str):
    """A source fragment written as is by ``{!r}``."""

    def __repr__(self) -> str:
        return str(self)


def _literal(text: Any) -> Any:
    """A recorded config value (source text): an int when it is an int literal, else the text as is."""
    if isinstance(text, (int, bool)):
        return text
    try:
        value = pyast.literal_eval(str(text))
    except (ValueError, SyntaxError):
        return _Raw(str(text))
    return value if isinstance(value, int) and not isinstance(value, bool) else _Raw(str(text))


_META = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _config_text(cfg: dict[str, str]) -> str:
    """The arguments of ``triton.Config`` for a recorded ``{name: value source}`` config."""
    d = ", ".join(f"{k!r}: {v}" for k, v in cfg.items() if k not in _META)
    extra = "".join(f", {k}={v}" for k, v in cfg.items() if k in _META)
    return f"{{{d}}}{extra}"


_STATIC_NODES = (
    ast.Expression, ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Constant, ast.Load,
    ast.operator, ast.boolop, ast.unaryop, ast.cmpop,
)


def _static_ok(k: Kernel, m: Module, values: dict[str, int]) -> bool:
    """False when a ``tl.static_assert`` of the kernel, evaluated on ``values``, fails (e.g.
    ``BLOCK_M % BLOCK_N == 0`` for a smaller BLOCK_M); True when it holds or cannot be evaluated."""
    for call in ast.walk(k.node):
        if tl_func(call, m.al) != "static_assert" or not call.args:  # type: ignore[arg-type]
            continue
        expr = ast.Expression(call.args[0])  # type: ignore[attr-defined]
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


def _pow2_ok(values: dict[str, int], aranges: set[str]) -> bool:
    """``tl.arange`` extents must be powers of two: False when a value given to one is not."""
    return all(v > 0 and v & (v - 1) == 0 for p, v in values.items() if p in aranges)


def _merge_appends(edits: list[Edit]) -> list[Edit]:
    """Several insertions at the same offset become one (in order)."""
    out: dict[tuple[int, int], Edit] = {}
    for e in edits:
        key = (e.start, e.end)
        if key in out and e.start == e.end:
            out[key] = Edit(e.start, e.end, out[key].text + e.text)
        else:
            out[key] = e
    return list(out.values())


# ---------------------------------------------------------------------------------------- tile-size


def _tile_params(m: Module, k: Kernel, include_steps: bool) -> list[str]:
    steps = loop_step_names(k, m.al)
    return [p for p in arange_blocks(k, m.al) if include_steps or p not in steps]


class TileSize(Operator):
    """Larger output tiles (BLOCK_M/BLOCK_N) for tl.dot kernels."""

    id = "tile-size"
    name = "Larger tiles"
    intent = "Compute a larger output tile per program so each loaded operand is reused more often."
    carrier = "the tile-size constexpr values (autotune configs, launch keywords or the local ints)"
    anchor_predicate = "has_dot"
    anchor_description = "a tl.dot kernel whose output tile sizes are literal ints"
    default_params: ClassVar[Mapping[str, Any]] = {"factor": 2, "max_tile": 256}
    small = 32

    def _sites(self, m: Module, include_steps: bool, dot_only: bool = True) -> list[tuple[Kernel, Any]]:
        out = []
        for k in m.kernels:
            if dot_only and not has_dot(k, m):
                continue
            for p in _tile_params(m, k, include_steps):
                out += [(k, s) for s in m.sites(k, p) if int_value(s) is not None]
                d = param_default(k, p)
                if int_const(d) is not None:
                    from klineage.transforms._triton import Site

                    out.append((k, Site(p, d, "default", k.node)))  # type: ignore[arg-type]
        return out

    def detect(self, source: str) -> list[Anchor]:
        """Present where an output tile dimension is above 32; applicable where tiles are literal."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k, s in self._sites(m, include_steps=False):
            kind = "present" if (int_value(s) or 0) > self.small else "applicable"
            out.append(anchor(kind, s.node, f"{s.name}={int_value(s)} in {k.name}", k))
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Shrink every tile dimension (K steps included) above 32 to 32; a launch grid written with
        the literal tile is shrunk with it (refused when the literal cannot be paired)."""
        m = parse(source)
        if m is None:
            return None
        changes, sites = [], []
        for j, (k, s) in enumerate(self._sites(m, include_steps=True)):
            if (int_value(s) or 0) > self.small:
                changes.append((k, s, self.small))
                sites.append({"index": j, "name": s.name, "value": m.src.seg(s.node)})
        edits = _retile(m, changes)
        if not edits:
            return None
        return self._rewrite(
            source, apply_edits(source, edits), {"tile": self.small, "sites": sites}, "simplify"
        )

    def apply(
        self,
        source: str,
        factor: int = 2,
        max_tile: int = 256,
        sites: list[dict[str, Any]] | None = None,
        tile: int | None = None,
        tiles: dict[str, int] | None = None,
        **params: Any,
    ) -> Rewrite | None:
        """Multiply the output tile dimensions (not the K step) by ``factor``, capped at ``max_tile``;
        or, with ``tiles`` (role -> size, e.g. ``{"tile_m": 128, "tile_n": 128, "tile_k": 64}``;
        kernel parameter names are accepted too), set each role's parameter to that size wherever
        its value is written, in any kernel (row and elementwise blocks too; a role the kernel lacks
        is ignored; a kernel whose ``tl.static_assert`` the new sizes break is left alone).

        A launch grid written with the literal tile (``triton.cdiv(M, 32)``, ``(M + 31) // 32``) is
        rewritten to the new size; when the literal cannot be paired with exactly one tile parameter
        the kernel is left alone (never a wrong grid). With the ``sites`` simplify recorded, write
        back the expert's tile sizes where they were; ``tile`` (the size simplify shrank to) is
        accepted and only checked against the sites."""
        check_params(self.id, params, ())
        if tiles is not None and (
            not isinstance(tiles, dict)
            or not tiles
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in tiles.values())
        ):
            raise ValueError("tile-size.apply: tiles must map roles (or parameter names) to positive ints")
        m = parse(source)
        if m is None:
            return None
        if require_list(self.id, "sites", sites) is not None:
            all_sites = self._sites(m, include_steps=True)
            changes = []
            for rec in sites:  # type: ignore[union-attr]
                j = rec.get("index")
                if not isinstance(j, int) or not 0 <= j < len(all_sites) or all_sites[j][1].name != rec.get("name"):
                    return None
                kern, site = all_sites[j]
                if tile is not None and int_value(site) != tile:
                    return None
                value = int_const(pyast.parse(str(rec["value"]), mode="eval").body)
                changes.append((kern, site, value if value is not None else _Raw(str(rec["value"]))))
            edits = _retile(m, changes)
            if edits is None:
                return None
            return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "apply")
        changes = []
        if tiles is not None:
            for k, s in self._sites(m, include_steps=True, dot_only=False):
                roles = kernel_roles(m, k)
                new = tiles.get(s.name, tiles.get(roles.get(s.name, ""), None))
                if new is not None and int_value(s) != new and s.name in movable_params(m, k):
                    changes.append((k, s, new))
            by_kernel: dict[str, dict[str, int]] = {}
            for k, s, new in changes:
                by_kernel.setdefault(k.name, {})[s.name] = new
            bad = set()
            for k in m.kernels:
                if k.name in by_kernel:
                    fixed = Autotune._fixed_constexprs(m, k)
                    values = {**fixed, **by_kernel[k.name]}
                    if not _static_ok(k, m, values) or not _pow2_ok(by_kernel[k.name], set(arange_blocks(k, m.al))):
                        bad.add(k.name)
            changes = [c for c in changes if c[0].name not in bad]
        else:
            if factor < 2:
                return None
            for k, s in self._sites(m, include_steps=False):
                v = int_value(s) or 0
                new = max(v * factor, 2 * self.small)
                if v and new <= max_tile and s.name in movable_params(m, k):
                    changes.append((k, s, new))
        edits = _retile(m, changes)
        if not edits:
            return None
        out = {"tiles": tiles} if tiles is not None else {"factor": factor, "max_tile": max_tile}
        return self._rewrite(source, apply_edits(source, edits), out, "apply")


def _retile(m: Module, changes: list[tuple[Kernel, Any, Any]]) -> list[Edit] | None:
    """Edits setting each ``(kernel, site, new value)`` and the launch grids that count with those
    tiles; a kernel whose grid cannot follow (``_grid_follows``) keeps all its values. None when
    nothing is left to change."""
    edits: list[Edit] = []
    for k in {id(c[0]): c[0] for c in changes}.values():
        mine = [(s, new) for kk, s, new in changes if kk is k]
        grid_edits = _grid_follows(m, k, mine)
        if grid_edits is None:
            continue
        edits += [Edit(*m.src.span(s.node), str(new)) for s, new in mine] + grid_edits
    return edits or None


def _grid_follows(m: Module, k: Kernel, mine: list[tuple[Any, Any]]) -> list[Edit] | None:
    """Grid edits that keep every launch of ``k`` counting programs with the new tile sizes of
    ``mine`` (sites of ``k`` with their new values): a literal tile in a ceil-division of the grid
    is paired (``_grid.pair_div``) and rewritten; a host local that is both the grid's divisor and
    the launch argument changes with its site; a meta-function grid reads the tile itself. None
    (refuse) when a program-partitioned tile changes and a launch grid would not follow it, or the
    grid divides by a constant that pairs with no tile."""
    must_all = partitioned(m, k)
    out: list[Edit] = []
    for la in m.launches_of(k):
        args = launch_args(la, k)
        here: dict[str, Any] = {}
        for s, new in mine:
            if (s.where in ("launch", "local") and s.owner is la.call) or (
                s.where == "default" and s.name not in args
            ):
                here[s.name] = new
            elif s.where == "config":
                here[s.name] = None  # the autotuner sets it: the grid must read META
        if not here:
            continue
        if grid_shared(la) and must_all & set(here):
            return None  # the grid is another launch's too: it cannot follow this kernel's tile
        divs = grid_divs(m, la)
        if divs is None:
            if must_all & set(here):
                return None
            continue
        values = launch_values(m, k, la)
        counted: set[str] = set(meta_reads(m, la))
        for div in divs:
            p = pair_div(m, k, la, div, values)
            if p is None:
                return None
            if p not in here:
                continue
            passed = args.get(p)
            if isinstance(div.tile, ast.Name) and isinstance(passed, ast.Name) and passed.id == div.tile.id:
                counted.add(p)  # the same host local: it changes at its site
                continue
            new = here[p]
            if new is None:
                return None
            if div.form == "cdiv":
                out.append(Edit(*m.src.span(div.tile), str(new)))
            else:
                out.append(Edit(*m.src.span(div.node), f"({m.src.seg(div.dim)} + {int(new) - 1}) // {new}"))
            counted.add(p)
        for p in must_all & set(here):
            passed = args.get(p)
            if isinstance(passed, ast.Name) and passed.id in grid_names(m, la):
                counted.add(p)
        if not (must_all & set(here)) <= counted:
            return None
    return out


# ---------------------------------------------------------------------------------------- num-warps


class NumWarps(Operator):
    """Warps per program matched to the tile."""

    id = "num-warps"
    name = "Match warps to the tile"
    intent = "Set the warps per program from the tile size so wide rows and big tiles get enough threads."
    carrier = "num_warps at the launch or in the autotune configs"
    anchor_predicate = "n_kernels >= 1"
    anchor_description = "any kernel launch: num_warps set from the tile size (or changed from the default 4)"

    def _sites(self, m: Module) -> list[tuple[Kernel, ast.Call, ast.expr]]:
        out = []
        for k in m.launched:
            for cfg in autotune_configs(k.autotune, m.al, m.src.tree):
                v = kwarg(cfg, "num_warps")
                if v is not None:
                    out.append((k, cfg, v))
            for la in m.launches_of(k):
                v = kwarg(la.call, "num_warps")
                if v is not None:
                    out.append((k, la.call, v))
        return out

    def detect(self, source: str) -> list[Anchor]:
        """Explicit num_warps (present); launches without one (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = [
            anchor("present", call, f"num_warps={m.src.seg(v)} for {k.name}", k)
            for k, call, v in self._sites(m)
        ]
        with_sites = {k.name for k, _, _ in self._sites(m)}
        for k in m.launched:
            # "4" is Triton's default: adding it changes nothing, so it is no place to apply
            if k.name not in with_sites and self._warps_expr(m, k) not in (None, "4"):
                for la in m.launches_of(k):
                    out.append(
                        anchor("applicable", la.call, f"{k.name} launches with the default 4 warps", k)
                    )
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Drop every explicit num_warps (back to Triton's default of 4)."""
        m = parse(source)
        if m is None:
            return None
        edits, sites = [], []
        for k, call, _ in self._sites(m):
            e = remove_keyword(m.src, call, "num_warps")
            rec = kw_record(m.src, call, "num_warps")
            if e is None or rec is None or e in edits:
                continue
            edits.append(e)
            sites.append({**where(m, k, call), **rec})
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "simplify")

    def _set(self, m: Module, source: str, name: str, value: int, params: dict[str, Any]) -> Rewrite | None:
        """Set keyword ``name`` to ``value`` on every autotune config (or, for a kernel without
        autotune, every launch) of each launched kernel: replace a different literal, add it where
        absent, leave a computed value alone."""
        edits: list[Edit] = []
        for k in m.launched:
            calls = autotune_configs(k.autotune, m.al, m.src.tree) if k.autotune is not None else [
                la.call for la in m.launches_of(k) if la.helper is None
            ]
            for call in calls:
                v = kwarg(call, name)
                if v is None:
                    edits.append(add_keyword(m.src, call, f"{name}={value}"))
                elif int_const(v) is not None and int_const(v) != value:
                    edits.append(Edit(*m.src.span(v), str(value)))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, _merge_appends(edits)), params, "apply")

    def _restore_keywords(
        self, m: Module, source: str, name: str, sites: Any, params: dict[str, Any]
    ) -> Rewrite | None:
        edits = []
        for rec in sites:
            call = find_call(m, rec)
            e = kw_insert(m.src, call, name, rec) if call is not None else None
            if e is None:
                return None
            edits.append(e)
        return self._rewrite(source, apply_edits(source, _merge_appends(edits)), params, "apply")

    def _config_warps(self, m: Module, k: Kernel, cfg: ast.Call) -> int | None:
        d = config_dict(cfg)
        if d is None:
            return None
        vals = {str_const(key): int_const(v) for key, v in zip(d.keys, d.values, strict=True)}
        dot = has_dot(k, m)
        tiles = _tile_params(m, k, include_steps=False) if dot else arange_blocks(k, m.al)
        if not tiles or any(vals.get(p) is None for p in tiles):
            return None
        prod = 1
        for p in tiles:
            prod *= vals[p] or 1
        div, hi = (2048, 8) if dot else (256, 16)
        return max(4, min(hi, prod // div))

    def _warps_expr(self, m: Module, k: Kernel) -> str | None:
        """A host expression for the warps: ~elements per tile / 256 (row kernels, 4..16) or / 2048
        (dot kernels, 4..8)."""
        dot = reaches_dot(k, m)
        # a dot kernel's work per program is its accumulator tile (BLOCK_M x BLOCK_N for a GEMM,
        # BLOCK_M x HEAD_DIM for attention, also when loads go through tensor descriptors)
        tiles = (accumulator_tile(k, m.al) or _tile_params(m, k, include_steps=False)) if dot \
            else arange_blocks(k, m.al)
        if not tiles:
            return None
        la = m.launches_of(k)[0]
        args = launch_args(la, k)
        factors = []
        lits = 1
        for p in tiles:
            if p in args:
                v = int_const(args[p])
                if v is None and isinstance(args[p], ast.Name):
                    v = int_const(single_value(la.func, args[p].id))
                if v is not None:
                    lits *= v
                else:
                    factors.append(m.src.seg(args[p]))
            elif int_const(param_default(k, p)) is not None:
                lits *= int_const(param_default(k, p)) or 1
            else:
                return None
        div, hi = (2048, 8) if dot else (256, 16)
        if not factors:
            return str(max(4, min(hi, lits // div)))
        prod = " * ".join(factors + ([str(lits)] if lits != 1 else []))
        return f"max(4, min({hi}, {prod} // {div}))"

    def apply(
        self,
        source: str,
        num_warps: int | None = None,
        sites: list[dict[str, Any]] | None = None,
        warps: int | None = None,
        **params: Any,
    ) -> Rewrite | None:
        """Add ``num_warps`` (given, or computed from the tile) to launches that have none; with the
        ``sites`` simplify recorded, put back exactly the expert's num_warps on each launch / config.
        ``warps`` (the portable form) *sets* the warps of every launched kernel to that value: added
        where absent, replaced where a literal differs (a computed value is left alone)."""
        check_params(self.id, params, ())
        if warps is not None and (not isinstance(warps, int) or isinstance(warps, bool) or warps < 1
                                  or warps & (warps - 1)):
            raise ValueError(f"num-warps.apply: warps must be a power of two >= 1, got {warps!r}")
        m = parse(source)
        if m is None:
            return None
        if require_list(self.id, "sites", sites) is not None:
            return self._restore_keywords(m, source, "num_warps", sites, {"sites": sites})
        if warps is not None:
            return self._set(m, source, "num_warps", warps, {"warps": warps})
        with_sites = {k.name for k, _, _ in self._sites(m)}
        edits = []
        for k in m.launched:
            if k.name in with_sites:
                continue
            if k.autotune is not None:
                for cfg in autotune_configs(k.autotune, m.al, m.src.tree):
                    w = num_warps or self._config_warps(m, k, cfg)
                    if w is not None:
                        edits.append(add_keyword(m.src, cfg, f"num_warps={w}"))
                continue
            expr = str(num_warps) if num_warps else self._warps_expr(m, k)
            if expr is None or expr == "4":
                continue
            else:
                for la in m.launches_of(k):
                    edits.append(add_keyword(m.src, la.call, f"num_warps={expr}"))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"num_warps": num_warps}, "apply")


# --------------------------------------------------------------------------------------- pipelining


class Pipelining(Operator):
    """Software pipelining of loads in loops (num_stages)."""

    id = "pipelining"
    name = "Pipeline loop loads"
    intent = "Issue the loads of later loop iterations while the current one computes (num_stages > 1)."
    carrier = "num_stages at the launch, in autotune configs or on tl.range"
    anchor_predicate = "n_loops >= 1"
    anchor_description = "a loop of loads (K loop or column tiles) inside a kernel"

    def _sites(self, m: Module) -> list[tuple[Kernel, ast.Call, ast.expr]]:
        out = []
        for k in m.kernels:
            for cfg in autotune_configs(k.autotune, m.al, m.src.tree):
                if (v := kwarg(cfg, "num_stages")) is not None:
                    out.append((k, cfg, v))
            for la in m.launches_of(k):
                if (v := kwarg(la.call, "num_stages")) is not None:
                    out.append((k, la.call, v))
            for lp in loops(k.node):
                rc = range_call(lp, m.al)
                if rc is not None and (v := kwarg(rc, "num_stages")) is not None:
                    out.append((k, rc, v))
        return out

    def detect(self, source: str) -> list[Anchor]:
        """num_stages > 1 written somewhere (present); loops of loads without it (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k, call, v in self._sites(m):
            if (int_const(v) or 2) > 1:
                out.append(anchor("present", call, f"num_stages={m.src.seg(v)} for {k.name}", k))
        if not out:
            for k in m.launched:
                if _has_load_loop(k, m):
                    out.append(anchor("applicable", k.node, f"{k.name} has a loop of loads", k))
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Set every explicit num_stages to 1 (no multi-buffering)."""
        m = parse(source)
        if m is None:
            return None
        edits, sites = [], []
        for k, call, v in self._sites(m):
            if (int_const(v) or 2) > 1:
                edits.append(Edit(*m.src.span(v), "1"))
                sites.append({**where(m, k, call), "value": m.src.seg(v)})
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "simplify")

    def apply(
        self,
        source: str,
        num_stages: int | None = None,
        sites: list[dict[str, Any]] | None = None,
        stages: int | None = None,
        **params: Any,
    ) -> Rewrite | None:
        """Raise num_stages (default 4 for tl.dot K loops, 3 otherwise) where it is lower, or add it at
        the launches of kernels with a loop of loads; with the ``sites`` simplify recorded, write back
        the expert's num_stages value at each launch / config / ``tl.range``. ``stages`` (the portable
        form) *sets* num_stages on the launches / autotune configs of every launched kernel with a
        loop of loads (added where absent, a different literal replaced; ``tl.range(num_stages=)``
        knobs and computed values are left alone)."""
        check_params(self.id, params, ())
        if stages is not None and (not isinstance(stages, int) or isinstance(stages, bool) or stages < 1):
            raise ValueError(f"pipelining.apply: stages must be an int >= 1, got {stages!r}")
        m = parse(source)
        if m is None:
            return None
        if stages is not None and require_list(self.id, "sites", sites) is None:
            edits_s: list[Edit] = []
            for k in m.launched:
                if not _has_load_loop(k, m):
                    continue
                calls = autotune_configs(k.autotune, m.al, m.src.tree) if k.autotune is not None else [
                    la.call for la in m.launches_of(k) if la.helper is None
                ]
                for call in calls:
                    v = kwarg(call, "num_stages")
                    if v is None:
                        edits_s.append(add_keyword(m.src, call, f"num_stages={stages}"))
                    elif int_const(v) is not None and int_const(v) != stages:
                        edits_s.append(Edit(*m.src.span(v), str(stages)))
            if not edits_s:
                return None
            return self._rewrite(source, apply_edits(source, _merge_appends(edits_s)), {"stages": stages}, "apply")
        if require_list(self.id, "sites", sites) is not None:
            edits = []
            for rec in sites:  # type: ignore[union-attr]
                call = find_call(m, rec)
                v = kwarg(call, "num_stages") if call is not None else None
                if v is None:
                    return None
                edits.append(Edit(*m.src.span(v), str(rec["value"])))
            return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "apply")
        edits: list[Edit] = []
        sites = self._sites(m)
        for k in m.launched:
            if not _has_load_loop(k, m):
                continue
            target = num_stages or (4 if any(dot_loops(j, m.al) for j in reachable(k, m)) else 3)
            mine = [(c, v) for kk, c, v in sites if kk is k]
            if mine:
                edits += [
                    Edit(*m.src.span(v), str(target))
                    for _, v in mine
                    if int_const(v) is not None and (int_const(v) or 0) < target
                ]
            elif k.autotune is not None:
                edits += [
                    add_keyword(m.src, cfg, f"num_stages={target}")
                    for cfg in autotune_configs(k.autotune, m.al, m.src.tree)
                ]
            else:
                edits += [add_keyword(m.src, la.call, f"num_stages={target}") for la in m.launches_of(k)]
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"num_stages": num_stages}, "apply")


# ------------------------------------------------------------------------------------- register-cap

_REGISTERS_PER_SM = 65536
_MIN_REGISTER_CAP = 96
"""Below this a tensor-core kernel's accumulator and operand fragments spill: no cap is proposed."""


def register_cap(num_warps: int) -> int | None:
    """The ``maxnreg`` (a multiple of 8) that lets one more program of ``num_warps`` warps share an SM
    than the registers allow without a cap (8 warps: 128, two programs instead of one; 4 warps: 168,
    three instead of two); None when that cap is below ``_MIN_REGISTER_CAP``."""
    if num_warps < 1:
        raise ValueError(f"num_warps must be positive, got {num_warps}")
    threads = 32 * num_warps
    alone = min(256, _REGISTERS_PER_SM // threads)  # registers per thread a program may take uncapped
    programs = _REGISTERS_PER_SM // (alone * threads)
    cap = _REGISTERS_PER_SM // ((programs + 1) * threads) // 8 * 8
    return cap if cap >= _MIN_REGISTER_CAP else None


def _config_calls(m: Module) -> list[ast.Call]:
    """Every ``triton.Config(...)`` call of the module (wherever the config list is built)."""
    return [
        n
        for n in ast.walk(m.src.tree)
        if isinstance(n, ast.Call) and (dotted(n.func) or "").rpartition(".")[2] == "Config"
    ]


def _literal_warps(call: ast.Call, host: ast.FunctionDef | None) -> int | None:
    """The warps a config or launch asks for: a literal, a host local bound once to one (``host``: the
    function holding the launch), or Triton's default of 4 when unset; None when not known."""
    node = kwarg(call, "num_warps")
    if node is None:
        return 4
    warps = int_const(node)
    if warps is None and isinstance(node, ast.Name) and host is not None:
        warps = int_const(single_value(host, node.id))
    return warps


class RegisterCap(Operator):
    """A register cap (maxnreg) that fits one more program of a tensor-core kernel on each SM."""

    id = "register-cap"
    name = "Cap registers for one more program per SM"
    intent = (
        "Cap the registers per thread (maxnreg) so a second program of a tensor-core kernel fits on each "
        "SM: one program's softmax or epilogue then runs while the other's MMAs do."
    )
    carrier = "maxnreg in the autotune configs or at the launch"
    anchor_predicate = "has_dot and not register_cap"
    anchor_description = "a launched tl.dot kernel whose warps per program are known and no maxnreg"
    default_params: ClassVar[Mapping[str, Any]] = {"maxnreg": None}

    def _sites(self, m: Module) -> list[ast.Call]:
        launches = [la.call for k in m.kernels for la in m.launches_of(k)]
        return [c for c in (*_config_calls(m), *launches) if sets_register_cap(c)]

    def _additions(self, m: Module, maxnreg: int | None) -> list[tuple[Kernel, ast.Call, int]]:
        """(kernel, config or launch call, cap) for each place ``apply`` adds a cap: the configs of an
        autotuned dot kernel, else its launches; warps from a literal (Triton's default 4 when unset)."""
        out: list[tuple[Kernel, ast.Call, int]] = []
        for k in m.launched:
            if not reaches_dot(k, m):
                continue
            if k.autotune is not None:
                targets = [(c, None) for c in autotune_configs(k.autotune, m.al, m.src.tree)]
            else:
                targets = [(la.call, la.func) for la in m.launches_of(k) if la.helper is None]
            for call, host in targets:
                warps = _literal_warps(call, host)
                cap = maxnreg or (register_cap(warps) if warps else None)
                if cap is not None and kwarg(call, "maxnreg") is None:
                    out.append((k, call, cap))
        return out

    def detect(self, source: str) -> list[Anchor]:
        """maxnreg set in a config or launch (present); dot kernels apply would cap (applicable)."""
        m = parse(source)
        if m is None:
            return []
        sites = self._sites(m)
        if sites:
            return [anchor("present", c, f"maxnreg={m.src.seg(kwarg(c, 'maxnreg'))}") for c in sites]
        return [
            anchor("applicable", call, f"{k.name}: maxnreg={cap} fits one more program per SM", k)
            for k, call, cap in self._additions(m, None)
        ]

    def simplify(self, source: str) -> Rewrite | None:
        """Remove every maxnreg from configs and launches (registers back to the compiler's choice)."""
        m = parse(source)
        if m is None:
            return None
        edits = [e for c in self._sites(m) if (e := remove_keyword(m.src, c, "maxnreg")) is not None]
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"code": hunks(source, edits)}, "simplify")

    def apply(
        self, source: str, maxnreg: int | None = None, code: list[dict[str, Any]] | None = None, **params: Any
    ) -> Rewrite | None:
        """Add ``maxnreg`` (given, or ``register_cap`` of the warps) to each config of an autotuned dot
        kernel, or to its launches; with the ``code`` simplify recorded, put back the expert's caps."""
        check_params(self.id, params, ())
        if maxnreg is not None and (not isinstance(maxnreg, int) or not 16 <= maxnreg <= 255):
            raise ValueError(f"register-cap.apply: maxnreg must be an int in 16..255, got {maxnreg!r}")
        if require_list(self.id, "code", code) is not None:
            return rewrite_with_hunks(self, source, code, {"maxnreg": maxnreg, "code": code})
        m = parse(source)
        if m is None or self._sites(m):
            return None
        edits = [add_keyword(m.src, call, f"maxnreg={cap}") for _, call, cap in self._additions(m, maxnreg)]
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"maxnreg": maxnreg}, "apply")


# ------------------------------------------------------------------------------------ grouped-order


class GroupedOrder(Operator):
    """GROUP_SIZE_M program-id swizzle for L2 reuse."""

    id = "grouped-order"
    name = "Grouped tile order"
    intent = (
        "Launch output tiles in groups of GROUP_SIZE_M rows so concurrent programs share A and B "
        "panels in L2."
    )
    carrier = "the program-id to tile mapping at the top of the kernel and the GROUP_SIZE_M constexpr"
    anchor_predicate = "has_dot and not grouped_order"
    anchor_description = "a 2-D tiled tl.dot kernel mapping program ids to tiles row-major"
    default_params: ClassVar[Mapping[str, Any]] = {"group_size": 8}

    def _group_params(self, m: Module, k: Kernel) -> list[str]:
        return [p for p in k.constexprs if "GROUP" in p.upper()]

    def _sites(self, m: Module, k: Kernel) -> list[tuple[str, ast.expr]]:
        out = []
        for p in self._group_params(m, k):
            out += [(p, s.node) for s in m.sites(k, p) if int_value(s) is not None]
            d = param_default(k, p)
            if int_const(d) is not None:
                out.append((p, d))  # type: ignore[arg-type]
        return out

    def _rowmajor(self, m: Module, k: Kernel) -> tuple[list[ast.stmt], ast.Assign, ast.Assign] | None:
        """``x = P // Q`` and ``y = P % Q`` (same body, P from program_id), or two program_id axes."""
        derived = pid_derived(k.node, m.al)
        for body in [k.node.body] + [lp.body for lp in loops(k.node)]:
            divs: dict[tuple[str, str], ast.Assign] = {}
            mods: dict[tuple[str, str], ast.Assign] = {}
            pids: dict[int, ast.Assign] = {}
            for st in body:
                if not (
                    isinstance(st, ast.Assign)
                    and len(st.targets) == 1
                    and isinstance(st.targets[0], ast.Name)
                ):
                    continue
                v = st.value
                if (
                    isinstance(v, ast.BinOp)
                    and isinstance(v.left, ast.Name)
                    and isinstance(v.right, ast.Name)
                    and (v.left.id in derived)
                ):
                    if isinstance(v.op, ast.FloorDiv):
                        divs[(v.left.id, v.right.id)] = st
                    elif isinstance(v.op, ast.Mod):
                        mods[(v.left.id, v.right.id)] = st
                if isinstance(v, ast.Call) and tl_func(v, m.al) == "program_id":
                    axis = int_const(v.args[0]) if v.args else int_const(kwarg(v, "axis"))
                    if axis in (0, 1):
                        pids[axis] = st
            for key, st in divs.items():
                if key in mods:
                    return body, st, mods[key]
            if 0 in pids and 1 in pids:
                return body, pids[0], pids[1]
        return None

    def detect(self, source: str) -> list[Anchor]:
        """GROUP constexpr set above 1 (present); a row-major tile mapping in a dot kernel (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = []
        for k in m.kernels:
            if not has_dot(k, m):
                continue
            sites = self._sites(m, k)
            if any((int_const(v) or 0) > 1 for _, v in sites):
                out += [anchor("present", v, f"{p}={m.src.seg(v)} in {k.name}", k) for p, v in sites]
            elif sites:
                out += [anchor("applicable", v, f"{p}=1 in {k.name}", k) for p, v in sites]
            elif k in m.launched and self._gemm_like(m, k) and (rm := self._rowmajor(m, k)) is not None:
                out.append(anchor("applicable", rm[1], f"row-major tile order in {k.name}", k))
        return out

    def simplify(self, source: str) -> Rewrite | None:
        """Set GROUP_SIZE to 1 everywhere it is written: the swizzle degenerates to row-major order."""
        m = parse(source)
        if m is None:
            return None
        edits, sites = [], []
        for k in m.kernels:
            for j, (p, v) in enumerate(self._sites(m, k)):
                if (int_const(v) or 0) > 1:
                    edits.append(Edit(*m.src.span(v), "1"))
                    sites.append({"kernel": k.name, "index": j, "name": p, "value": m.src.seg(v)})
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"sites": sites}, "simplify")

    def apply(
        self,
        source: str,
        group_size: int = 8,
        sites: list[dict[str, Any]] | None = None,
        group_size_m: int | None = None,
        **params: Any,
    ) -> Rewrite | None:
        """Raise a GROUP_SIZE of 1 to ``group_size``, or insert the swizzle in place of a row-major
        ``pid // n`` / ``pid % n`` mapping (``tl.swizzle2d`` for a 2-D grid); with the ``sites``
        simplify recorded, write back the expert's group size at each of them. ``group_size_m`` (the
        role name) is the same as ``group_size`` and wins when both are given."""
        check_params(self.id, params, ())
        if group_size_m is not None:
            group_size = group_size_m
        if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
            raise ValueError(f"grouped-order.apply: group size must be an int >= 1, got {group_size!r}")
        m = parse(source)
        if m is None:
            return None
        if require_list(self.id, "sites", sites) is not None:
            edits_r = []
            for rec in sites:  # type: ignore[union-attr]
                k = next((k for k in m.kernels if k.name == rec.get("kernel")), None)
                ks = self._sites(m, k) if k is not None else []
                j = rec.get("index")
                if not isinstance(j, int) or not 0 <= j < len(ks) or ks[j][0] != rec.get("name"):
                    return None
                edits_r.append(Edit(*m.src.span(ks[j][1]), str(rec["value"])))
            return self._rewrite(source, apply_edits(source, edits_r), {"sites": sites}, "apply")
        edits: list[Edit] = []
        for k in m.kernels:
            if not has_dot(k, m):
                continue
            sites = self._sites(m, k)
            if sites:
                edits += [Edit(*m.src.span(v), str(group_size)) for _, v in sites if int_const(v) == 1]
                continue
            if k not in m.launched or not self._gemm_like(m, k):
                continue
            rm = self._rowmajor(m, k)
            if rm is None:
                continue
            _body, first, second = rm
            g = unique_name(m.src.tree, "GROUP_SIZE_M")
            tl = m.tl
            xm, xn = first.targets[0].id, second.targets[0].id  # type: ignore[attr-defined]
            indent = m.src.indent_of(first.lineno)
            if isinstance(first.value, ast.Call):  # two program_id axes
                later = max(first, second, key=lambda s: s.lineno)
                pos = m.src.line_span(later.end_lineno or later.lineno, later.end_lineno or later.lineno)[1]
                edits.append(
                    Edit(
                        pos,
                        pos,
                        f"{indent}{xm}, {xn} = {tl}.swizzle2d({xm}, {xn}, {tl}.num_programs(0), "
                        f"{tl}.num_programs(1), {g})\n",
                    )
                )
            else:
                pid = first.value.left.id  # type: ignore[attr-defined]
                q = first.value.right.id  # type: ignore[attr-defined]
                names = {
                    b: unique_name(m.src.tree, b)
                    for b in ("num_pid_in_group", "group_id", "first_pid_m", "group_size_m", "num_pid_m")
                }
                npm = self._num_pid_m(m, k, q)
                pre = ""
                if npm is None:
                    npm = names["num_pid_m"]
                    pre = f"{indent}{npm} = {tl}.num_programs(0) // {q}\n"
                block = (
                    pre + f"{indent}{names['num_pid_in_group']} = {g} * {q}\n"
                    f"{indent}{names['group_id']} = {pid} // {names['num_pid_in_group']}\n"
                    f"{indent}{names['first_pid_m']} = {names['group_id']} * {g}\n"
                    f"{indent}{names['group_size_m']} = min({npm} - {names['first_pid_m']}, {g})\n"
                    f"{indent}{xm} = {names['first_pid_m']} + ({pid} % {names['group_size_m']})\n"
                    f"{indent}{xn} = ({pid} % {names['num_pid_in_group']}) // {names['group_size_m']}\n"
                )
                a = m.src.line_span(first.lineno, first.end_lineno or first.lineno)
                b = m.src.line_span(second.lineno, second.end_lineno or second.lineno)
                if b[0] == a[1]:
                    edits.append(Edit(a[0], b[1], block))
                else:
                    edits += [Edit(a[0], a[1], block), Edit(b[0], b[1], "")]
            edits.append(add_param(m.src, k.node, f"{g}: {tl}.constexpr = {group_size}"))
        if not edits:
            return None
        return self._rewrite(source, apply_edits(source, edits), {"group_size": group_size}, "apply")

    @staticmethod
    def _gemm_like(m: Module, k: Kernel) -> bool:
        return bool(dot_loops(k, m.al)) and sum(1 for n in ast.walk(k.node) if tl_func(n, m.al) == "dot") == 1

    @staticmethod
    def _num_pid_m(m: Module, k: Kernel, q: str) -> str | None:
        cdivs = [
            st.targets[0].id
            for st in k.node.body
            if isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and tl_func(st.value, m.al) == "cdiv"
        ]
        others = [c for c in cdivs if c != q]
        return others[0] if len(others) == 1 and q in cdivs else None
