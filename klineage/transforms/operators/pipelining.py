"""The pipelining operator: software pipelining of the loads in loops (``num_stages``)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, add_keyword, int_const
from klineage.transforms._triton import Kernel, autotune_configs, kwarg, loops, range_call
from klineage.transforms.features import dot_loops
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_int
from klineage.transforms.operators._common import anchor, merge_appends, reachable
from klineage.transforms.operators._restore import find_call, where
from klineage.transforms.operators._tuning import has_load_loop, set_keyword


class Pipelining(Operator):
    """Software pipelining of loads in loops (num_stages)."""

    id = "pipelining"
    name = "Pipeline loop loads"
    intent = "Issue the loads of later loop iterations while the current one computes (num_stages > 1)."
    carrier = "num_stages at the launch, in autotune configs or on tl.range"
    anchor_predicate = "n_loops >= 1"
    anchor_description = "a loop of loads (K loop or column tiles) inside a kernel"
    params = (Param("num_stages"), Param("stages", lambda v: is_int(v) and v >= 1, "an int >= 1"))
    record = "sites"

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

    def _detect(self, m: Module) -> list[Anchor]:
        """num_stages > 1 written somewhere (present); loops of loads without it (applicable)."""
        out = []
        for k, call, v in self._sites(m):
            if (int_const(v) or 2) > 1:
                out.append(anchor("present", call, f"num_stages={m.src.seg(v)} for {k.name}", k))
        if not out:
            for k in m.launched:
                if has_load_loop(k, m):
                    out.append(anchor("applicable", k.node, f"{k.name} has a loop of loads", k))
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Set every explicit num_stages to 1 (no multi-buffering)."""
        edits, sites = [], []
        for k, call, v in self._sites(m):
            if (int_const(v) or 2) > 1:
                edits.append(Edit(*m.src.span(v), "1"))
                sites.append({**where(m, k, call), "value": m.src.seg(v)})
        return self._edited(m, edits, {"sites": sites}, "simplify")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """The expert's num_stages value written back at each recorded launch / config / ``tl.range``."""
        edits = []
        for rec in recorded:
            call = find_call(m, rec)
            v = kwarg(call, "num_stages") if call is not None else None
            if v is None:
                return None
            edits.append(Edit(*m.src.span(v), str(rec["value"])))
        return edits

    def _apply(self, m: Module, num_stages: int | None = None, stages: int | None = None) -> Rewrite | None:
        """Raise num_stages (default 4 for tl.dot K loops, 3 otherwise) where it is lower, or add it at
        the launches of kernels with a loop of loads; with the ``sites`` simplify recorded, write back
        the expert's num_stages value at each launch / config / ``tl.range``. ``stages`` (the portable
        form) *sets* num_stages on the launches / autotune configs of every launched kernel with a
        loop of loads (added where absent, a different literal replaced; ``tl.range(num_stages=)``
        knobs and computed values are left alone)."""
        if stages is not None:
            looped = [k for k in m.launched if has_load_loop(k, m)]
            edits_s = merge_appends(set_keyword(m, looped, "num_stages", stages))
            return self._edited(m, edits_s, {"stages": stages}, "apply")
        edits: list[Edit] = []
        found = self._sites(m)
        for k in m.launched:
            if not has_load_loop(k, m):
                continue
            target = num_stages or (4 if any(dot_loops(j, m.al) for j in reachable(k, m)) else 3)
            mine = [(c, v) for kk, c, v in found if kk is k]
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
        return self._edited(m, edits, {"num_stages": num_stages}, "apply")
