"""The operator library: one module per operator; ``OPERATORS`` lists an instance of each, in the
registry's fixed order (``registry.operator_ids``)."""

from klineage.transforms.operators.autotune import Autotune
from klineage.transforms.operators.causal_skip import CausalSkip
from klineage.transforms.operators.contiguity_hints import ContiguityHints
from klineage.transforms.operators.dot_accumulate import DotAccumulate
from klineage.transforms.operators.epilogue_fusion import EpilogueFusion
from klineage.transforms.operators.eviction_hints import EvictionHints
from klineage.transforms.operators.exp2 import Exp2
from klineage.transforms.operators.fp32_accumulate import Fp32Accumulate
from klineage.transforms.operators.grouped_order import GroupedOrder
from klineage.transforms.operators.int64_offsets import Int64Offsets
from klineage.transforms.operators.mask_elision import MaskElision
from klineage.transforms.operators.multi_row import MultiRow
from klineage.transforms.operators.num_warps import NumWarps
from klineage.transforms.operators.online_softmax import OnlineSoftmax
from klineage.transforms.operators.persistent import Persistent
from klineage.transforms.operators.pipelining import Pipelining
from klineage.transforms.operators.register_cap import RegisterCap
from klineage.transforms.operators.row_persistent import RowPersistent
from klineage.transforms.operators.rsqrt import Rsqrt
from klineage.transforms.operators.single_pass_row import SinglePassRow
from klineage.transforms.operators.split_k import SplitK
from klineage.transforms.operators.tensor_descriptors import TensorDescriptors
from klineage.transforms.operators.tile_size import TileSize

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
    TensorDescriptors(),
)

__all__ = ["OPERATORS"]
