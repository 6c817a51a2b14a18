"""The operator library: one module per operator family; ``OPERATORS`` lists an instance of each."""

from klineage.transforms.operators.arith import DotAccumulate, Exp2, Fp32Accumulate, Rsqrt
from klineage.transforms.operators.control import MaskElision, MultiRow, Persistent, RowPersistent
from klineage.transforms.operators.epilogue import EpilogueFusion
from klineage.transforms.operators.hints import ContiguityHints, EvictionHints, Int64Offsets
from klineage.transforms.operators.rows import SinglePassRow
from klineage.transforms.operators.softmax import CausalSkip, OnlineSoftmax
from klineage.transforms.operators.splitk import SplitK
from klineage.transforms.operators.tuning import (
    Autotune,
    GroupedOrder,
    NumWarps,
    Pipelining,
    RegisterCap,
    TileSize,
)

OPERATORS = (
    Autotune(),
    TileSize(),
    NumWarps(),
    Pipelining(),
    RegisterCap(),
    GroupedOrder(),
    EpilogueFusion(),
    SplitK(),
    Persistent(),
    RowPersistent(),
    MaskElision(),
    MultiRow(),
    ContiguityHints(),
    EvictionHints(),
    Int64Offsets(),
    Exp2(),
    Rsqrt(),
    Fp32Accumulate(),
    DotAccumulate(),
    OnlineSoftmax(),
    CausalSkip(),
    SinglePassRow(),
)

__all__ = ["OPERATORS"]
