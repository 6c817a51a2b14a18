"""The kernel features: static facts about a Triton source, named once for the whole project.

``klineage.transforms.features.kernel_features`` computes exactly these (in this order) from a source;
the condition language (``klineage.kb.conditions``) accepts them in conditions and anchors. Booleans
unless the description says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Kernel feature name -> what it means (shown by ``klineage features``), in the order
#: ``kernel_features`` returns them.
KERNEL_FEATURE_DOCS: Mapping[str, str] = {
    "has_dot": "a tl.dot in a kernel (bool)",
    "n_dots": "number of tl.dot calls (int)",
    "has_k_loop": "a loop holding loads and tl.dot: a GEMM-style reduction loop (bool)",
    "num_stages": "largest software-pipelining depth fixed by the source (int)",
    "num_warps": "largest warps per program fixed by the source (int)",
    "block_m": "largest BLOCK_*_M tile constexpr (int)",
    "block_n": "largest BLOCK_*_N tile constexpr (int)",
    "block_k": "largest BLOCK_*_K tile constexpr (int)",
    "block_size": "largest other BLOCK* constexpr (int)",
    "uses_autotune": "@triton.autotune is used (bool)",
    "n_autotune_configs": "autotune configs (int)",
    "uses_heuristics": "@triton.heuristics is used (bool)",
    "row_reduction": "a reduction over an axis in a kernel without tl.dot (bool)",
    "online_softmax": "a running max / rescaled sum across column tiles (bool)",
    "persistent": "programs loop over work items with a program-count stride (bool)",
    "uses_tma": "tensor descriptors or block pointers (bool)",
    "grouped_order": "a GROUP_SIZE program-id swizzle (bool)",
    "uses_exp2": "tl.exp2 (bool)",
    "uses_rsqrt": "tl.rsqrt (bool)",
    "eviction_hints": "eviction_policy on loads (bool)",
    "contiguity_hints": "tl.multiple_of / tl.max_contiguous (bool)",
    "has_atomic": "atomic operations (bool)",
    "int64_offsets": "casts offsets to tl.int64 (bool)",
    "causal_skip": "loop bounds skip blocks above the causal diagonal (bool)",
    "mask_elision": "a constexpr branch selects unmasked loads (bool)",
    "epilogue_fusion": "the dot accumulator is transformed before its store (bool)",
    "fp32_accumulate": "fp32 accumulators or fp32 upcasts of loads (bool)",
    "dot_accumulate": "acc = tl.dot(a, b, acc) (bool)",
    "multi_row": "a row kernel processing several rows per program (bool)",
    "single_pass_row": "a row kernel without a column loop (bool)",
    "split_k": "K partitioned across programs (bool)",
    "n_kernels": "launched @triton.jit kernels (int)",
    "n_loops": "loops in kernels (int)",
    "uses_mask": "a masked load or store (bool)",
    "elementwise": "no dot and no reduction (bool)",
    "register_cap": "maxnreg set in an autotune config or at a launch (bool)",
}

#: Every kernel feature, in the order ``kernel_features`` returns them.
KERNEL_FEATURES: tuple[str, ...] = tuple(KERNEL_FEATURE_DOCS)

#: The kernel features that say what kind of kernel it is (compared to find the lineage, or the lineage's move,
#: nearest to a kernel). Not ``uses_mask``: nearly every naive kernel masks, so it told a GEMM lineage's move
#: and an attention lineage's apart on an attention kernel only by accident.
KERNEL_KIND: tuple[str, ...] = ("has_dot", "has_k_loop", "row_reduction", "online_softmax", "elementwise",
                                "causal_skip", "single_pass_row", "multi_row")


def kind_agreement(a: Mapping[str, object], b: Mapping[str, object]) -> float:
    """Fraction of the kernel-kind features (``KERNEL_KIND``) on which two kernels' features agree (a feature
    neither gives is left out; 0.0 when none is given)."""
    keys = [k for k in KERNEL_KIND if k in a or k in b]
    if not keys:
        return 0.0
    return sum(bool(a.get(k)) == bool(b.get(k)) for k in keys) / len(keys)
