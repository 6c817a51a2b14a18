"""Portable parameters: what a lineage step's expert values mean on another kernel.

A lineage records each step's parameters as the walker saw them: edits at sites of the expert's own
source (byte offsets, kernel names). Those do not transfer. What transfers is the *value* in role terms
— the expert ran 8 warps, 3 stages, tiles of 128×256×64, these autotune configurations — read from the
step's two kernel versions by ``transforms.portable.portable_params`` and given to the operators'
portable parameters (``configs=``, ``tiles=``, ``warps=``, ``stages=``, ``group_size_m=``, ...).
"""

from __future__ import annotations

from typing import Any

from klineage.agent.lineages import LineageStep
from klineage.transforms.portable import OPERATOR_KEYS, portable_params


def step_parameters(step: LineageStep) -> dict[str, Any]:
    """``apply`` keyword arguments that carry this step's expert values to a new kernel; {} when the
    step has no portable values (the operator's defaults are used) or its sources are not recorded."""
    keys = OPERATOR_KEYS.get(step.operator, ())
    if not keys or not step.expert_source or not step.simplified_source:
        return {}
    try:
        found = portable_params(step.operator, step.expert_source, step.simplified_source)
    except ValueError:
        return {}
    return {k: found[k] for k in keys if k in found}
