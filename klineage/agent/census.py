"""How much of the GPU a kernel's grid fills, and the plan order that follows when it fills too little.

A kernel that launches fewer programs than the GPU has SMs leaves the rest idle however well each program
runs: on the H100 (2026-12-06) the naive column sum launched 8 programs on the 100000 x 1000 shape and
reached 0.11x vendor, and the moves the lineages rank first there (warps, pipelining: 0.12x, 0.14x) left
that untouched, while split-k (more programs over the same data) took the kernel from 0.15x to 0.34x.
That is the GPU's arithmetic, not a lineage's: it holds on any kernel.

``grid_fill`` is the geometric mean over the grid's shapes of min(1, programs / SMs) from the launch
census (``klineage.validator.launch_census``: the candidate's ``run`` on fake tensors, launching nothing,
in a worker process). ``by_parallelism`` reorders a plan when the kernel's fill is under ``UNDERFILLED``:
moves whose candidate raises the fill by at least ``FILL_STEP`` go first (most fill first), moves that
lower it by as much go last, the rest keep their order. A kernel that fills the GPU keeps its plan as it
is. ``GridCensus`` holds one problem's census, cached by kernel text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from klineage.agent.moves import Move, materialize
from klineage.schema.ids import kernel_sha

#: SMs assumed when no GPU is visible: the H100 SXM and the H200 both have 132.
DEFAULT_SM_COUNT = 132
#: Below this fill (geomean of min(1, programs / SMs) over the grid) parallelism moves come first.
UNDERFILLED = 0.5
#: A move counts as raising (lowering) the fill when it multiplies (divides) it by at least this.
FILL_STEP = 1.5

Census = Callable[[Path, Sequence[Mapping[str, Any]], str, int, Sequence[str]], list[list[int | None]]]


def visible_sm_count() -> int:
    """The SM count of the first visible GPU, or ``DEFAULT_SM_COUNT`` without one."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).multi_processor_count)
    except Exception:
        pass
    return DEFAULT_SM_COUNT


def grid_fill(programs: Sequence[int | None], sm_count: int) -> float | None:
    """Geometric mean over the shapes with a count of min(1, programs / ``sm_count``); None when no shape
    has one."""
    known = [p for p in programs if p]
    if not known or sm_count <= 0:
        return None
    return math.exp(sum(math.log(min(1.0, p / sm_count)) for p in known) / len(known))


def underfilled(fill: float | None) -> bool:
    """Whether a kernel of grid fill ``fill`` leaves most SMs idle (unknown fill: no)."""
    return fill is not None and fill < UNDERFILLED


def by_parallelism(moves: Sequence[Move], current: float | None, fills: Mapping[str, float | None]
                   ) -> list[Move]:
    """``moves`` reordered for a kernel of fill ``current`` (see the module docstring); ``fills`` maps a
    move's key to the fill of its candidate (absent or None: unknown, the move keeps its place)."""
    if current is None or not underfilled(current):
        return list(moves)
    raising: list[tuple[float, int, Move]] = []
    keep: list[Move] = []
    lowering: list[Move] = []
    for i, move in enumerate(moves):
        fill = fills.get(move.key())
        if fill is not None and fill >= current * FILL_STEP:
            why = (f"the kernel's grid fills {current:.0%} of the SMs (geomean over the grid); this move "
                   f"fills {fill:.0%}")
            raising.append((-fill, i, replace(move, why=f"{why}; {move.why}" if move.why else why)))
        elif fill is not None and fill * FILL_STEP <= current:
            lowering.append(move)
        else:
            keep.append(move)
    return [m for _, _, m in sorted(raising, key=lambda t: (t[0], t[1]))] + keep + lowering


@dataclass
class GridCensus:
    """The launch census of one problem's grid (``shapes``, ``dtype``), cached by kernel text; ``run`` is
    ``klineage.validator.launch_census.census_in_worker`` unless a caller gives another."""

    reference: Path
    shapes: tuple[Mapping[str, Any], ...]
    dtype: str
    sm_count: int = DEFAULT_SM_COUNT
    run: Census | None = None
    _fills: dict[str, float | None] = field(default_factory=dict)
    _made: dict[tuple[str, str], str | None] = field(default_factory=dict)
    failed: str | None = None

    def fills(self, sources: Sequence[str]) -> list[float | None]:
        """``grid_fill`` of each source (one worker call for those not counted yet; all None once the
        census has failed, the reason in ``failed``)."""
        todo = list(dict.fromkeys(s for s in sources if kernel_sha(s) not in self._fills))
        if todo and self.failed is None:
            from klineage.validator.launch_census import census_in_worker

            run: Census = self.run if self.run is not None else census_in_worker
            try:
                counted = run(self.reference, self.shapes, self.dtype, self.sm_count, todo)
            except Exception as exc:
                self.failed = str(exc)[:300]
            else:
                for source, programs in zip(todo, counted, strict=True):
                    self._fills[kernel_sha(source)] = grid_fill(programs, self.sm_count)
        return [self._fills.get(kernel_sha(s)) for s in sources]

    def order(self, source: str, moves: Sequence[Move]) -> list[Move]:
        """``moves`` on ``source`` by ``by_parallelism``: the census of the moves' candidates is taken only
        when the kernel underfills the GPU."""
        (current,) = self.fills([source])
        if not underfilled(current):
            return list(moves)
        sha = kernel_sha(source)
        made: dict[str, str] = {}
        for move in moves:
            key = (sha, move.key())
            if key not in self._made:
                result = materialize(source, move)
                self._made[key] = result.source if result is not None else None
            if self._made[key] is not None:
                made[move.key()] = self._made[key]  # type: ignore[assignment]
        keys = list(made)
        fills = dict(zip(keys, self.fills([made[k] for k in keys]), strict=True))
        return by_parallelism(moves, current, fills)
