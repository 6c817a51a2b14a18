"""Static features and summaries of the naive fixtures and the experts."""

from __future__ import annotations

import pytest

from klineage.transforms.features import KERNEL_FEATURES, kernel_features, kernel_summary
from tests.transforms.harness import WORKLOADS, naive_cases

NAIVE = naive_cases()


def test_feature_names_are_complete() -> None:
    feats = kernel_features(NAIVE["naive_gemm"].source)
    assert tuple(feats) == KERNEL_FEATURES
    assert len(set(KERNEL_FEATURES)) == len(KERNEL_FEATURES)


def test_gemm_features() -> None:
    f = kernel_features(NAIVE["naive_gemm"].source)
    assert f["has_dot"] and f["has_k_loop"] and f["fp32_accumulate"] and f["uses_mask"]
    assert (f["block_m"], f["block_n"], f["block_k"]) == (16, 16, 16)
    assert (
        not f["row_reduction"] and not f["uses_autotune"] and not f["grouped_order"] and not f["persistent"]
    )
    assert f["n_kernels"] == 1 and f["n_loops"] == 1


def test_row_kernel_features() -> None:
    soft = kernel_features(NAIVE["naive_softmax"].source)
    assert soft["row_reduction"] and soft["single_pass_row"] and not soft["has_dot"] and not soft["multi_row"]
    ln = kernel_features(NAIVE["naive_layernorm"].source)
    assert ln["row_reduction"] and not ln["single_pass_row"] and ln["n_loops"] == 3 and ln["block_size"] == 64
    assert kernel_features(NAIVE["naive_gelu"].source)["elementwise"]
    assert kernel_features(NAIVE["naive_rowsum"].source)["multi_row"]


def test_attention_features() -> None:
    f = kernel_features(NAIVE["naive_attention"].source)
    assert f["has_dot"] and f["n_dots"] == 2 and f["online_softmax"] and not f["causal_skip"]


def test_expert_features() -> None:
    g = kernel_features((WORKLOADS / "gemm" / "expert.py").read_text())
    assert (
        g["uses_autotune"] and g["persistent"] and g["uses_tma"] and g["grouped_order"] and g["mask_elision"]
    )
    assert (
        (g["num_stages"] or 0) >= 3
        and (g["block_m"] or 0) >= 64
        and g["contiguity_hints"]
        and g["int64_offsets"]
    )
    s = kernel_features((WORKLOADS / "softmax" / "expert.py").read_text())
    assert (
        s["row_reduction"]
        and s["multi_row"]
        and s["online_softmax"]
        and s["uses_exp2"]
        and s["eviction_hints"]
    )


def test_summary_mentions_the_family() -> None:
    assert "matrix-multiplication" in kernel_summary(NAIVE["naive_gemm"].source)
    assert "row-reduction" in kernel_summary(NAIVE["naive_softmax"].source)
    assert "attention" in kernel_summary(NAIVE["naive_attention"].source)
    with pytest.raises(SyntaxError):
        kernel_summary("def (:")
