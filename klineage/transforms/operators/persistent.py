"""The persistent operator: a grid of about one program per SM looping over output tiles."""

from __future__ import annotations

from klineage.transforms.operators._persistent import PersistentLoop


class Persistent(PersistentLoop):
    """Persistent tl.dot kernels: grid = #SMs, programs loop over output tiles."""

    id = "persistent"
    feature = "persistent"
    name = "Persistent tile loop"
    intent = (
        "Launch about one program per SM and let each loop over output tiles, amortizing launch and prologue."
    )
    carrier = (
        "the kernel body wrapped in a tile loop strided by tl.num_programs, and the grid min(tiles, SMs)"
    )
    anchor_predicate = "has_dot and not persistent"
    anchor_description = "a tl.dot kernel with one program per output tile on a 1-D grid"
    dot = True
    work_name = "num_tiles"
    programs_per_sm = 1
