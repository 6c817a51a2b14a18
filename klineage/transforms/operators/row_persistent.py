"""The row-persistent operator: a grid sized by occupancy, programs striding over rows."""

from __future__ import annotations

from klineage.transforms.operators._persistent import PersistentLoop


class RowPersistent(PersistentLoop):
    """Row kernels whose programs loop over rows."""

    id = "row-persistent"
    feature = "persistent"
    name = "Row-persistent grid"
    intent = (
        "Size the grid by occupancy and let each program stride over rows instead of one program per row."
    )
    carrier = (
        "the kernel body wrapped in a row loop strided by tl.num_programs, and the grid min(rows, SMs x k)"
    )
    anchor_predicate = "not has_dot and not persistent"
    anchor_description = "a row or elementwise kernel with one program per row/block on a 1-D grid"
    dot = False
    work_name = "num_rows"
    programs_per_sm = 4
