"""Static features and summaries of the naive fixtures and the experts."""

from __future__ import annotations

import pytest

from klineage.transforms.features import KERNEL_FEATURES, kernel_features, kernel_summary
from klineage.transforms.registry import all_operators, get_operator
from tests.transforms.harness import EXPERTS, WORKLOADS, naive_cases

NAIVE = naive_cases()


def test_feature_names_are_complete() -> None:
    feats = kernel_features(NAIVE["naive_gemm"].source)
    assert tuple(feats) == KERNEL_FEATURES
    assert len(set(KERNEL_FEATURES)) == len(KERNEL_FEATURES)


def _corpus() -> dict[str, str]:
    sources = {name: case.source for name, case in NAIVE.items()}
    sources.update({w: (WORKLOADS / w / "expert.py").read_text() for w in EXPERTS})
    return sources


def test_optimization_features_are_what_the_operators_detect() -> None:
    """A feature that names an optimization (``Operator.feature``) is true exactly where one of its
    operators detects the optimization present, on every naive kernel and expert; each is seen both
    true and false somewhere, so the check is not vacuous."""
    by_feature: dict[str, list] = {}
    for op in all_operators():
        if op.feature is not None:
            assert op.feature in KERNEL_FEATURES, f"{op.id} names an unknown feature {op.feature}"
            by_feature.setdefault(op.feature, []).append(op)
    assert len(by_feature) >= 15
    seen: dict[str, set[bool]] = {}
    for name, source in _corpus().items():
        feats = kernel_features(source)
        for feature, ops in by_feature.items():
            detected = any(op.present(source) for op in ops)
            assert feats[feature] == detected, f"{name}: {feature} = {feats[feature]}, detect says {detected}"
            seen.setdefault(feature, set()).add(detected)
    assert sum(1 for values in seen.values() if values == {True, False}) >= 0.7 * len(by_feature), seen


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
    # a 2-D [ROWS, BLOCK] tile launched with ROWS = 1: multi-row is where it could go, not present
    rowsum = NAIVE["naive_rowsum"].source
    assert not kernel_features(rowsum)["multi_row"] and get_operator("multi-row").applicable(rowsum)


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
