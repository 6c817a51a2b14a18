"""Portable parameters: what a lineage step's recorded values mean on another kernel.

A lineage records each step's parameters as the walker saw them: edits at sites of the expert's own
source (byte offsets, kernel names). Those do not transfer. What transfers is the *value* in role terms:
the expert ran 8 warps, 3 stages, tiles of 128×256×64, these autotune configurations. This module reads
those values from a step's record and turns them into ``apply`` parameters for a new kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from klineage.agent.lineages import LineageStep

#: Launch meta-parameters an autotune config carries beside its constexprs.
META_KEYS = ("num_warps", "num_stages", "maxnreg", "num_ctas")


def _ints(values: list[Any]) -> list[int]:
    out = []
    for v in values:
        try:
            out.append(int(str(v).strip()))
        except ValueError:
            continue
    return out


def site_value(step: LineageStep) -> int | None:
    """The largest integer literal the step recorded at its sites (warps, stages): the expert's value."""
    sites = step.params.get("sites") or []
    values = _ints([s.get("value") for s in sites if isinstance(s, Mapping)])
    return max(values) if values else None


def recorded_configs(step: LineageStep) -> list[dict[str, Any]]:
    """An autotune step's recorded configurations in role terms where the expert's own tile roles are
    known, else under the expert's names (each value an int when it is one)."""
    try:
        from klineage.transforms.roles import tile_roles
    except ImportError:  # until role inference exists, configs cannot be carried across kernels
        return []

    kernels = step.params.get("kernels") or {}
    roles: dict[str, dict[str, str]] = {}
    if step.expert_source:
        try:
            roles = tile_roles(step.expert_source)
        except SyntaxError:
            roles = {}
    out: list[dict[str, Any]] = []
    for kernel, record in kernels.items():
        names = roles.get(kernel, {})
        for cfg in record.get("configs") or []:
            converted: dict[str, Any] = {}
            for name, value in cfg.items():
                ints = _ints([value])
                if name in META_KEYS:
                    if ints:
                        converted[name] = ints[0]
                elif name in names and ints:
                    converted[names[name]] = ints[0]
            if any(k not in META_KEYS for k in converted) and converted not in out:
                out.append(converted)
    return out


def step_parameters(step: LineageStep) -> dict[str, Any]:
    """``apply`` keyword arguments that carry this step's expert values to a new kernel; {} when the
    step's values do not transfer (the operator's defaults are used)."""
    op = step.operator
    if op == "num-warps":
        value = site_value(step)
        return {"num_warps": value} if value else {}
    if op == "pipelining":
        value = site_value(step)
        return {"num_stages": value} if value else {}
    if op == "grouped-order":
        value = site_value(step)
        return {"group_size": value} if value else {}
    if op == "autotune":
        configs = recorded_configs(step)
        return {"configs": configs} if configs else {}
    return {}
