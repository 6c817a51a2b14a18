"""What each optimization requires of a kernel, provides to it and conflicts with, as kernel features.

A contract is stated in the names of ``kernel_features`` (plus two derived flags, ``FLAGS``), so the same
analysis that describes a kernel to search checks it (a feature that names an optimization is its
operator's own ``detect``: ``Operator.feature``): an operator whose ``requires`` are missing, or one
of whose ``conflicts`` is present, is not a move on that kernel (``facts.operator_anchors`` marks it
absent with the reason, so search, the agent and the API all see it). The contracts are declared with
each operator's meaning in mind and checked (``tests/transforms/test_contracts.py``) against every
accepted step of the measured lineages (the skill's contract holds on the kernel it was applied to, and
what it provides is present on the result) and against ``apply`` on every kernel the project holds
(wherever the operator is applicable, its result has what the contract says it provides). Pure; nothing
here imports ``kb``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Flags derived from ``kernel_features``' counts, with what each means.
FLAGS = {
    "has_loop": "the kernel loops (over K, column blocks or key blocks)",
    "multi_kernel": "the module launches more than one Triton kernel",
}

#: What a flag being true means, for the reasons a contract gives.
MEANING = {
    "has_dot": "a tl.dot", "has_k_loop": "a loop over K", "row_reduction": "a reduction along rows",
    "online_softmax": "an online (running max) softmax", "uses_mask": "masked loads",
    "uses_autotune": "@triton.autotune", "persistent": "a persistent tile loop", "split_k": "split-K",
    "epilogue_fusion": "a fused epilogue", "register_cap": "a register cap (maxnreg)",
    "grouped_order": "a grouped tile order", "mask_elision": "mask-free interior tiles",
    "multi_row": "several rows per program", "contiguity_hints": "tl.multiple_of / tl.max_contiguous hints",
    "eviction_hints": "eviction policies on loads", "int64_offsets": "64-bit offsets", "uses_exp2": "tl.exp2",
    "uses_rsqrt": "tl.rsqrt", "fp32_accumulate": "fp32 accumulation", "dot_accumulate": "tl.dot(..., acc)",
    "causal_skip": "a causal bound on the key loop", "single_pass_row": "a single pass over each row",
    "uses_tma": "tensor descriptors or block pointers (TMA)",
    **FLAGS,
}


@dataclass(frozen=True)
class Contract:
    """``requires``: flags that must be true for the operator to apply; ``conflicts``: flags that must be
    false; ``provides``: flags true after it applied (empty when its effect is a value, such as a tile)."""

    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        """``{"requires", "provides", "conflicts"}`` as lists (what records and the API carry)."""
        return {"requires": list(self.requires), "provides": list(self.provides),
                "conflicts": list(self.conflicts)}


CONTRACTS: dict[str, Contract] = {
    "autotune": Contract(provides=("uses_autotune",)),
    "tile-size": Contract(requires=("has_dot",)),
    "num-warps": Contract(conflicts=("uses_autotune",)),
    "pipelining": Contract(requires=("has_loop",), conflicts=("uses_autotune",)),
    "register-cap": Contract(requires=("has_dot",), provides=("register_cap",)),
    "grouped-order": Contract(requires=("has_dot",), provides=("grouped_order",)),
    "epilogue-fusion": Contract(requires=("has_dot", "multi_kernel"), provides=("epilogue_fusion",)),
    # a matmul's K loop or a loop reduction's (a column sum's rows): either is split the same way
    "split-k": Contract(requires=("has_loop",), provides=("split_k",),
                        conflicts=("epilogue_fusion", "persistent")),
    "persistent": Contract(requires=("has_dot",), provides=("persistent",)),
    "row-persistent": Contract(conflicts=("has_dot",)),
    "mask-elision": Contract(requires=("has_loop",), provides=("mask_elision",)),
    "multi-row": Contract(requires=("row_reduction",)),
    "contiguity-hints": Contract(provides=("contiguity_hints",)),
    "eviction-hints": Contract(provides=("eviction_hints",), conflicts=("has_dot",)),
    "int64-offsets": Contract(provides=("int64_offsets",)),
    "exp2": Contract(provides=("uses_exp2",)),
    "rsqrt": Contract(requires=("row_reduction",), provides=("uses_rsqrt",)),
    "fp32-accumulate": Contract(provides=("fp32_accumulate",), conflicts=("has_dot",)),
    "dot-accumulate": Contract(requires=("has_dot",), provides=("dot_accumulate",)),
    "online-softmax": Contract(requires=("row_reduction",), provides=("online_softmax",)),
    "causal-skip": Contract(requires=("has_dot", "online_softmax"), provides=("causal_skip",)),
    # a row reduced along a 2-D tile's columns (decode attention's keys x head dim) would be a whole 2-D
    # block in registers, not a row
    "single-pass-row": Contract(requires=("row_reduction",), provides=("single_pass_row",),
                               conflicts=("multi_row",)),
    # descriptors also need, at run time, a contiguous last dimension and 16-byte aligned base pointers and
    # row strides: no static flag can say so, so apply keeps the pointer kernel and the launch takes the
    # descriptor copy only when they hold (as the GEMM expert does); a kernel already on descriptors or
    # block pointers is left alone
    "tensor-descriptors": Contract(requires=("has_dot", "has_k_loop"), provides=("uses_tma",),
                                   conflicts=("uses_tma",)),
}


def contract_of(operator: str) -> Contract:
    """The contract of ``operator`` (an empty one for an operator without a declared contract)."""
    return CONTRACTS.get(operator, Contract())


def flags(features: Mapping[str, Any]) -> dict[str, bool]:
    """The boolean flags a contract is stated in: ``kernel_features``' booleans plus ``FLAGS``."""
    out = {k: v for k, v in features.items() if isinstance(v, bool)}
    out["has_loop"] = bool(features.get("has_k_loop")) or int(features.get("n_loops") or 0) > 0
    out["multi_kernel"] = int(features.get("n_kernels") or 0) > 1
    return out


def unmet(contract: Contract, features: Mapping[str, Any]) -> list[str]:
    """Why ``contract`` rules its operator out on a kernel with ``features`` (empty when it does not):
    each missing requirement and each present conflict, in words."""
    have = flags(features)
    why = [f"requires {name} ({MEANING.get(name, name)}), which the kernel lacks"
           for name in contract.requires if not have.get(name, False)]
    why += [f"conflicts with {name} ({MEANING.get(name, name)}), which the kernel has"
            for name in contract.conflicts if have.get(name, False)]
    return why
