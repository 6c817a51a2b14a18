"""The operator library: one module per operator family; ``OPERATORS`` lists an instance of each."""

from klineage.transforms.operators.tuning import Autotune, GroupedOrder, NumWarps, Pipelining, TileSize

OPERATORS = (Autotune(), TileSize(), NumWarps(), Pipelining(), GroupedOrder())

__all__ = ["OPERATORS"]
