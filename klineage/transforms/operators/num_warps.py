"""The num-warps operator: warps per program matched to the tile (launch keyword or autotune configs)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, add_keyword, int_const, remove_keyword, str_const
from klineage.transforms._triton import (
    Kernel,
    accumulator_tile,
    arange_blocks,
    autotune_configs,
    config_dict,
    kwarg,
    launch_args,
    single_value,
)
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_int
from klineage.transforms.operators._common import anchor, has_dot, merge_appends, param_default, reaches_dot
from klineage.transforms.operators._restore import kw_record, restore_keywords, where
from klineage.transforms.operators._tuning import set_keyword, tile_params


class NumWarps(Operator):
    """Warps per program matched to the tile."""

    id = "num-warps"
    name = "Match warps to the tile"
    intent = "Set the warps per program from the tile size so wide rows and big tiles get enough threads."
    carrier = "num_warps at the launch or in the autotune configs"
    anchor_predicate = "n_kernels >= 1"
    anchor_description = "any kernel launch: num_warps set from the tile size (or changed from the default 4)"
    params = (
        Param("num_warps"),
        Param("warps", lambda v: is_int(v) and v >= 1 and not v & (v - 1), "a power of two >= 1"),
    )
    record = "sites"

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

    def _detect(self, m: Module) -> list[Anchor]:
        """Explicit num_warps (present); launches without one (applicable)."""
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

    def _absent_reason(self, m: Module) -> str | None:
        """The launched kernels whose warps computed from the tile are Triton's default (4): adding
        ``num_warps=4`` would change nothing. None when another reason applies."""
        with_sites = {k.name for k, _, _ in self._sites(m)}
        default = [k.name for k in m.launched if k.name not in with_sites and self._warps_expr(m, k) == "4"]
        if not default or self._detect(m):
            return None
        return (f"the warps computed from the tile of {', '.join(default)} are Triton's default (4): "
                "num_warps=4 would change nothing")

    def _simplify(self, m: Module) -> Rewrite | None:
        """Drop every explicit num_warps (back to Triton's default of 4)."""
        edits, sites = [], []
        for k, call, _ in self._sites(m):
            e = remove_keyword(m.src, call, "num_warps")
            rec = kw_record(m.src, call, "num_warps")
            if e is None or rec is None or e in edits:
                continue
            edits.append(e)
            sites.append({**where(m, k, call), **rec})
        return self._edited(m, edits, {"sites": sites}, "simplify")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """The expert's num_warps keyword put back on each recorded launch / config."""
        edits = restore_keywords(m, "num_warps", recorded)
        return None if edits is None else merge_appends(edits)

    def _config_warps(self, m: Module, k: Kernel, cfg: ast.Call) -> int | None:
        d = config_dict(cfg)
        if d is None:
            return None
        vals = {str_const(key): int_const(v) for key, v in zip(d.keys, d.values, strict=True)}
        dot = has_dot(k, m)
        tiles = tile_params(m, k, include_steps=False) if dot else arange_blocks(k, m.al)
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
        tiles = (accumulator_tile(k, m.al) or tile_params(m, k, include_steps=False)) if dot \
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
                if v is None and isinstance(arg := args[p], ast.Name):
                    v = int_const(single_value(la.func, arg.id, la.module))
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

    def _apply(self, m: Module, num_warps: int | None = None, warps: int | None = None) -> Rewrite | None:
        """Add ``num_warps`` (given, or computed from the tile) to launches that have none; with the
        ``sites`` simplify recorded, put back exactly the expert's num_warps on each launch / config.
        ``warps`` (the portable form) *sets* the warps of every launched kernel to that value: added
        where absent, replaced where a literal differs (a computed value is left alone)."""
        if warps is not None:
            edits = set_keyword(m, m.launched, "num_warps", warps)
            return self._edited(m, merge_appends(edits), {"warps": warps}, "apply")
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
            if expr is not None and expr != "4":
                edits += [add_keyword(m.src, la.call, f"num_warps={expr}") for la in m.launches_of(k)]
        return self._edited(m, edits, {"num_warps": num_warps}, "apply")
