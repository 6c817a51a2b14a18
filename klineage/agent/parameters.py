"""Portable parameters: what a lineage step's expert values mean on another kernel.

A lineage records each step's parameters as the walker saw them: edits at sites of the expert's own
source (byte offsets, kernel names). Those do not transfer. What transfers is the *value* in role terms
— the expert ran 8 warps, 3 stages, tiles of 128×256×64, these autotune configurations — read from the
step's two kernel versions by ``transforms.portable.portable_params`` and given to the operators'
portable parameters (``configs=``, ``tiles=``, ``warps=``, ``stages=``, ``group_size_m=``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from klineage.agent.lineages import LineageStep
from klineage.transforms.portable import OPERATOR_KEYS, portable_params
from klineage.transforms.registry import get_operator


def step_parameters(step: LineageStep) -> dict[str, Any]:
    """``apply`` keyword arguments that carry this step's expert values to a new kernel; {} when the
    step has no portable values (the operator's defaults are used) or its sources are not recorded.

    A value the expert computes on the host from its launch (``num_warps = _warps_for(tile_bytes)``:
    ``portable_params`` lists such expressions as ``*_exprs``) is a rule of the tile, not a constant:
    its largest literal was right for the expert's widest tile only, so it is not carried and the
    operator's own tile-scaled default applies. (Seen on the H100: a row expert's 16 warps, put
    on a GELU·mul whose program covers 512 elements, cost 35 %.)"""
    declared = {p.name for p in get_operator(step.operator).params}
    # only what ``apply`` takes: eviction-hints' portable description (``eviction_policies``) is no parameter of
    # it, and carrying it made every eviction-hints lineage step fail to materialize (a TypeError the planner
    # reads as "does not apply")
    keys = tuple(k for k in OPERATOR_KEYS.get(step.operator, ()) if k in declared)
    if not keys or not step.expert_source or not step.simplified_source:
        return {}
    try:
        found = portable_params(step.operator, step.expert_source, step.simplified_source)
    except ValueError:
        return {}
    return {k: found[k] for k in keys if k in found and f"{k}_exprs" not in found}


#: Which dim role each role-term tile covers.
TILE_ROLES = {"tile_m": "rows", "tile_n": "cols", "tile_k": "reduce"}
#: The smallest tile a config is clipped to (``tl.dot`` needs 16 on each side).
MIN_TILE = 16
#: Most configurations one autotune move carries (each is timed per shape by the autotuner).
MAX_CONFIGS = 12


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def fit_to_grid(configs: Sequence[Mapping[str, Any]], shapes: Sequence[Mapping[str, Any]],
                roles: Mapping[str, str]) -> list[dict[str, Any]]:
    """The expert's configurations, then each one with its tiles clipped to every grid shape's extents.

    A tile wider than its dim (rounded up to a power of two, at least ``MIN_TILE``) only computes masked
    lanes: an expert tuned on large matrices carries 128×256 tiles that waste most of a 128×128 batch
    element. The clipped variant keeps the rest of the configuration (warps at most 4 once the output
    tile is 64×64 or less, where 8 warps have too little to share). Originals come first, duplicates are
    dropped, at most ``MAX_CONFIGS`` are kept. A config or shape without role-term tiles passes as is."""
    out: list[dict[str, Any]] = []

    def add(config: Mapping[str, Any]) -> None:
        if dict(config) not in out and len(out) < MAX_CONFIGS:
            out.append(dict(config))

    for config in configs:
        add(config)
    for config in configs:
        for shape in shapes:
            clipped = dict(config)
            for tile, role in TILE_ROLES.items():
                sizes = [v for d, v in shape.items()
                         if roles.get(d) == role and isinstance(v, int) and not isinstance(v, bool)]
                if tile in clipped and sizes:
                    clipped[tile] = min(int(clipped[tile]), max(MIN_TILE, _next_pow2(sizes[0])))
            if clipped.get("tile_m", 128) * clipped.get("tile_n", 128) <= 64 * 64 and "num_warps" in clipped:
                clipped["num_warps"] = min(int(clipped["num_warps"]), 4)
            add(clipped)
    return out


#: Pipeline depths a re-tune tries around each configuration (Hopper's shared memory holds 2 to 5 stages
#: of the tiles the experts use).
STAGE_RANGE = (2, 5)


def config_neighborhood(configs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first half of the configurations (``MAX_CONFIGS // 2``: the ones listed first, as experts list
    their best first) as they are, then each with one pipeline stage more and one fewer (within
    ``STAGE_RANGE``), then with the warps doubled and halved (4 to 16), duplicates dropped, at most
    ``MAX_CONFIGS``: one validator call lets the autotuner try the neighbours of what it picks from today,
    after a structural change (fewer masks, a different accumulator) moved the kernel's best point."""
    out: list[dict[str, Any]] = []
    base = list(configs)[:MAX_CONFIGS // 2]

    def add(config: Mapping[str, Any]) -> None:
        if dict(config) not in out and len(out) < MAX_CONFIGS:
            out.append(dict(config))

    for config in base:
        add(config)
    for config in base:
        stages = config.get("num_stages")
        if isinstance(stages, int) and not isinstance(stages, bool):
            for s in (stages + 1, stages - 1):
                if STAGE_RANGE[0] <= s <= STAGE_RANGE[1]:
                    add({**config, "num_stages": s})
    for config in base:
        warps = config.get("num_warps")
        if isinstance(warps, int) and not isinstance(warps, bool):
            for w in (warps * 2, warps // 2):
                if 4 <= w <= 16:
                    add({**config, "num_warps": w})
    return out
