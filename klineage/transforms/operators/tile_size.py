"""The tile-size operator: larger output tiles (BLOCK_M / BLOCK_N) for ``tl.dot`` kernels, with the
launch grids that count programs by those tiles rewritten to follow."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from klineage.schema import pyast
from klineage.transforms._module import Module
from klineage.transforms._source import Edit, int_const
from klineage.transforms._triton import Kernel, Site, arange_blocks, launch_args
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_int
from klineage.transforms.operators._common import anchor, has_dot, int_value, param_default
from klineage.transforms.operators._grid import (
    grid_divs,
    grid_names,
    grid_shared,
    launch_values,
    meta_reads,
    pair_div,
    partitioned,
)
from klineage.transforms.operators._roles import kernel_roles, movable_params
from klineage.transforms.operators._tuning import Raw, fixed_constexprs, pow2_ok, static_ok, tile_params


@dataclass(frozen=True)
class TileChange:
    """A new value (an int, or recorded source text) for one tile site of a kernel."""

    kernel: Kernel
    site: Site
    value: Any


class TileSize(Operator):
    """Larger output tiles (BLOCK_M/BLOCK_N) for tl.dot kernels."""

    id = "tile-size"
    name = "Larger tiles"
    intent = "Compute a larger output tile per program so each loaded operand is reused more often."
    carrier = "the tile-size constexpr values (autotune configs, launch keywords or the local ints)"
    anchor_predicate = "has_dot"
    anchor_description = "a tl.dot kernel whose output tile sizes are literal ints"
    default_params: ClassVar[Mapping[str, Any]] = {"factor": 2, "max_tile": 256}
    params = (
        Param("factor"),
        Param("max_tile"),
        Param("tile"),
        Param("tiles", lambda v: isinstance(v, dict) and bool(v) and all(is_int(x) and x > 0 for x in v.values()),
              "a dict of roles (or parameter names) to positive ints"),
    )
    record = "sites"
    small = 32

    @staticmethod
    def _sites(m: Module, include_steps: bool, dot_only: bool = True) -> list[tuple[Kernel, Site]]:
        """Where each tile parameter's int value is written (launch, local, config or default)."""
        out = []
        for k in m.kernels:
            if dot_only and not has_dot(k, m):
                continue
            for p in tile_params(m, k, include_steps):
                out += [(k, s) for s in m.sites(k, p) if int_value(s) is not None]
                d = param_default(k, p)
                if int_const(d) is not None:
                    out.append((k, Site(p, d, "default", k.node)))  # type: ignore[arg-type]
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """Present where an output tile dimension is above 32; applicable where tiles are literal."""
        out = []
        for k, s in self._sites(m, include_steps=False):
            kind = "present" if (int_value(s) or 0) > self.small else "applicable"
            out.append(anchor(kind, s.node, f"{s.name}={int_value(s)} in {k.name}", k))
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Shrink every tile dimension (K steps included) above 32 to 32; a launch grid written with
        the literal tile is shrunk with it (refused when the literal cannot be paired)."""
        changes, sites = [], []
        for j, (k, s) in enumerate(self._sites(m, include_steps=True)):
            if (int_value(s) or 0) > self.small:
                changes.append(TileChange(k, s, self.small))
                sites.append({"index": j, "name": s.name, "value": m.src.seg(s.node)})
        return self._edited(m, _retile(m, changes) or [], {"tile": self.small, "sites": sites}, "simplify")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """The expert's tile sizes written back at the recorded sites (``tile``, when given, must be
        the value found there)."""
        all_sites = self._sites(m, include_steps=True)
        tile = params.get("tile")
        changes = []
        for rec in recorded:
            j = rec.get("index")
            if not isinstance(j, int) or not 0 <= j < len(all_sites) or all_sites[j][1].name != rec.get("name"):
                return None
            kern, site = all_sites[j]
            if tile is not None and int_value(site) != tile:
                return None
            value = int_const(pyast.parse(str(rec["value"]), mode="eval").body)
            changes.append(TileChange(kern, site, value if value is not None else Raw(str(rec["value"]))))
        return _retile(m, changes)

    def _apply(
        self,
        m: Module,
        factor: int = 2,
        max_tile: int = 256,
        tile: int | None = None,
        tiles: dict[str, int] | None = None,
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
        changes = []
        if tiles is not None:
            for k, s in self._sites(m, include_steps=True, dot_only=False):
                roles = kernel_roles(m, k)
                new = tiles.get(s.name, tiles.get(roles.get(s.name, ""), None))
                if new is not None and int_value(s) != new and s.name in movable_params(m, k):
                    changes.append(TileChange(k, s, new))
            by_kernel: dict[str, dict[str, int]] = {}
            for c in changes:
                by_kernel.setdefault(c.kernel.name, {})[c.site.name] = c.value
            bad = set()
            for k in m.kernels:
                if k.name in by_kernel:
                    fixed = fixed_constexprs(m, k)
                    values = {**fixed, **by_kernel[k.name]}
                    if not static_ok(k, m, values) or not pow2_ok(by_kernel[k.name], set(arange_blocks(k, m.al))):
                        bad.add(k.name)
            changes = [c for c in changes if c.kernel.name not in bad]
        else:
            if factor < 2:
                return None
            for k, s in self._sites(m, include_steps=False):
                v = int_value(s) or 0
                new = max(v * factor, 2 * self.small)
                if v and new <= max_tile and s.name in movable_params(m, k):
                    changes.append(TileChange(k, s, new))
        out = {"tiles": tiles} if tiles is not None else {"factor": factor, "max_tile": max_tile}
        return self._edited(m, _retile(m, changes) or [], out, "apply")


def _retile(m: Module, changes: list[TileChange]) -> list[Edit] | None:
    """Edits setting each change's new value and the launch grids that count with those tiles; a
    kernel whose grid cannot follow (``_grid_follows``) keeps all its values. None when nothing is
    left to change."""
    edits: list[Edit] = []
    for k in {id(c.kernel): c.kernel for c in changes}.values():
        mine = [(c.site, c.value) for c in changes if c.kernel is k]
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
