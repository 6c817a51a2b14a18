"""The autotune operator: ``@triton.autotune`` over tile sizes / warps / stages, keyed on the shape.

``simplify`` pins one config at every launch and records the decorator it removed; ``apply`` adds
the decorator (the recorded one, a portable config list in role terms, or variants of the launch).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, ClassVar

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, add_keyword, int_const, remove_keywords
from klineage.transforms._triton import (
    Kernel,
    arange_blocks,
    dotted,
    kwarg,
    launch_args,
    pointer_param,
    single_value,
    tl_func,
)
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_records
from klineage.transforms.operators._common import anchor, grid_tuple, has_dot, merge_appends, param_default
from klineage.transforms.operators._configs import pinned_configs
from klineage.transforms.operators._grid import grid_divs, grid_shared, launch_values, meta_reads, pair_div, partitioned
from klineage.transforms.operators._roles import ROLES, kernel_roles, movable_params, role_params
from klineage.transforms.operators._tuning import (
    META,
    Raw,
    config_text,
    fixed_constexprs,
    literal,
    pow2_ok,
    static_ok,
)


class Autotune(Operator):
    """``@triton.autotune`` over tile sizes / warps / stages, keyed on the problem shape."""

    id = "autotune"
    feature = "uses_autotune"
    name = "Autotune launch configurations"
    intent = "Let Triton pick tile sizes, warps and stages per problem shape instead of one fixed launch."
    carrier = "the kernel's decorators (@triton.autotune with configs and key) and the launch keywords"
    anchor_predicate = "n_kernels >= 1 and not uses_autotune"
    anchor_description = "a kernel launched with literal tile sizes (constexpr keywords) and no autotuning"
    default_params: ClassVar[Mapping[str, Any]] = {"config": 0}
    params = (
        Param("config"),
        Param("kernels", lambda v: isinstance(v, dict), "a dict of kernel names to {'configs', 'key'}"),
        Param("configs", lambda v: isinstance(v, list) and bool(v) and is_records(v),
              "a non-empty list of dicts (role or param -> value)"),
        Param("key", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
              "a list of kernel parameter names"),
    )
    record = "code"
    echo = ("config", "kernels")

    def _detect(self, m: Module) -> list[Anchor]:
        """Autotuned kernels (present) and launched kernels with literal constexpr tiles (applicable)."""
        out = []
        for k in m.kernels:
            if k.autotune is not None:
                out.append(anchor("present", k.autotune, f"{k.name} is autotuned", k))
            elif k in m.launched and self._tunables(m, k):
                out.append(anchor("applicable", k.node, f"{k.name} launches with fixed tile sizes", k))
        return out

    def _simplify(self, m: Module, config: int = 0) -> Rewrite | None:
        """Remove ``@triton.autotune``; the chosen config (default the first) is pinned at every launch."""
        edits: list[Edit] = []
        removed: dict[str, Any] = {}
        for k in m.kernels:
            if k.autotune is None or any(  # restore_value only undoes the tuning runs: pinned, none are left
                kw.arg in ("reset_to_zero", "pre_hook", "post_hook") for kw in k.autotune.keywords
            ):
                continue
            cfgs = pinned_configs(m, k)
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
                    edits += [add_keyword(m.src, la.call, e) for e in extra]
        return self._removed(m, merge_appends(edits), config=config, kernels=removed)

    @staticmethod
    def _helper_uses_autotuner(m: Module, helper: str) -> bool:
        fn = next(f for f in m.src.tree.body if isinstance(f, ast.FunctionDef) and f.name == helper)
        return any(isinstance(n, ast.Attribute) and n.attr in ("fn", "configs") for n in ast.walk(fn))

    @staticmethod
    def _tunables(m: Module, k: Kernel) -> dict[str, int]:
        """Constexpr tile params with one int value at every launch (literal or a local int) that a
        rewrite may move (``movable_params``: not a block that must cover a whole extent)."""
        tiles = set(arange_blocks(k, m.al)) & movable_params(m, k)
        return {p: v for p, v in fixed_constexprs(m, k).items() if p in tiles}

    def check_params(self, params: Mapping[str, Any]) -> None:
        """The declared checks, and ``config`` must index the configs recorded in ``kernels``."""
        super().check_params(params)
        config, kernels = params.get("config"), params.get("kernels")
        if (
            config is not None
            and kernels is not None
            and any(config >= len(v.get("configs") or []) for v in kernels.values())
        ):
            raise ValueError(f"autotune.apply: config {config} is not one of the recorded configs")

    def _apply(
        self,
        m: Module,
        config: int | None = None,
        kernels: dict[str, Any] | None = None,
        configs: list[dict[str, Any]] | None = None,
        key: list[str] | None = None,
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
        return self._edited(m, merge_appends(edits), out, "apply")

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
        fixed = {**defaults, **fixed_constexprs(m, k)}
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
                    if name in META:
                        d[name] = value
                    elif name in ROLES:
                        d.update({p: value for p in role_params(roles, name) if p in fixed and p in movable})
                    elif name in fixed and name in movable:
                        d[name] = value
                mapped.append(d)
            tuned = {p for d in mapped for p in d if p not in META}
            if not tuned and not any(n in META for d in mapped for n in d):
                return None  # nothing of the configs applies to this kernel
        elif given:
            mapped = [
                {n: literal(v) for n, v in c.items() if n in META or n in cex} for c in given.get("configs") or []
            ]
            tuned = {p for d in mapped for p in d if p not in META} | set(tun)
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
            if not static_ok(k, m, ints) or not pow2_ok(ints, aranges):
                continue
            full.update({n: v for n, v in d.items() if n in META})
            text = {n: (str(v) if isinstance(v, Raw) else repr(v)) for n, v in full.items()}
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
        meta_set = {n for c in planned for n in c if n in META}
        always_set = {"num_warps", "num_stages", "num_ctas"}  # by every triton.Config, defaults included
        if any(kwarg(la.call, n) is not None and n not in meta for la in lts for n in always_set | meta_set):
            # a launch computes warps/stages itself: Triton refuses a launch keyword that the config also sets
            # (got multiple values), and overriding it silently would change what the launch chose
            return None
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
                cfg_texts.append(config_text(full))
        else:
            fixed = fixed_constexprs(m, k)
            tun = {p: v for p, v in self._tunables(m, k).items() if p in tuned}
            cfg_texts = self._configs(
                tun, meta, has_dot(k, m), lambda var, k=k, fixed=fixed: static_ok(k, m, {**fixed, **var})
            )
        kkey: Any = self._key(m, k)
        if key is not None:
            names = {p.name for p in k.params}
            kkey = [x for x in key if x in names] or kkey
        elif given and given.get("key") and role_configs is None:
            kkey = Raw(given["key"])
        indent = m.src.indent_of(k.node.lineno)
        cfg_lines = "".join(f"{indent}        {m.triton}.Config({c}),\n" for c in cfg_texts)
        # the autotuner runs the kernel once per config and timing repeat before the real call: memory the
        # kernel adds into must be put back after each of those runs, or the caller gets it added many times
        restore = accumulated_params(m, k)
        restored = f"{indent}    restore_value={restore!r},\n" if restore else ""
        deco = (
            f"{indent}@{m.triton}.autotune(\n{indent}    configs=[\n{cfg_lines}{indent}    ],\n"
            f"{indent}    key={kkey!r},\n{restored}{indent})\n"
        )
        first = min([d.lineno for d in k.node.decorator_list])
        pos = m.src.line_span(first, first)[0]
        edits.append(Edit(pos, pos, deco))
        return edits

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


_ATOMICS = frozenset({"atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
                      "atomic_or", "atomic_xor"})


def accumulated_params(m: Module, k: Kernel) -> list[str]:
    """Pointer parameters of ``k`` whose memory the kernel adds into rather than only writes: the target of a
    ``tl.atomic_*``, or a pointer both loaded from and stored to (read-modify-write), each address read back to
    the parameter it starts from (``pointer_param``). Every launch of such a kernel changes what the next one
    starts from: Triton's ``restore_value`` must put it back after each tuning run."""
    added: set[str] = set()
    loaded: set[str] = set()
    stored: set[str] = set()
    for node in ast.walk(k.node):
        name = tl_func(node, m.al)
        if not isinstance(node, ast.Call) or not node.args or name not in (*_ATOMICS, "load", "store"):
            continue
        base = pointer_param(k, node.args[0])
        param = k.param(base) if base is not None else None
        if param is None or param.constexpr:
            continue
        (added if name in _ATOMICS else loaded if name == "load" else stored).add(param.name)
    return sorted(added | (loaded & stored))
