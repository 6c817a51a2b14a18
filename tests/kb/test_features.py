"""Problem-feature normalization: canonical names and values, derived features, nothing invented."""

from __future__ import annotations

from typing import Any

import pytest

from klineage.kb.features import (
    FeatureError,
    canonical_arch,
    canonical_dtype,
    kernel_feature_values,
    problem_features,
)


def test_cli_strings_become_typed_features_with_derivations() -> None:
    f = problem_features({"M": "4096", "N": "4096", "K": "1024", "dtype": "bfloat16", "arch": "sm_90"})
    assert f["M"] == 4096 and isinstance(f["M"], int)
    assert f["dtype"] == "bf16" and f["dtype_bytes"] == 2
    assert f["arch"] == 90 and f["has_tma"] is True
    assert f["numel"] == 4096 * 4096 and f["bytes"] == 4096 * 4096 * 2
    assert f["flops"] == 2 * 4096 * 4096 * 1024
    traffic = (4096 * 1024 + 1024 * 4096 + 4096 * 4096) * 2
    assert f["arithmetic_intensity"] == pytest.approx(2 * 4096 * 4096 * 1024 / traffic)


def test_absent_stays_absent() -> None:
    f = problem_features({"M": 4096})
    assert f == {"M": 4096}  # no K, no dtype, no arch: nothing derived, nothing defaulted
    assert problem_features(None) == {} and problem_features({}) == {}
    assert "has_tma" not in problem_features({"dtype": "fp16"})
    assert problem_features({"K": None, "dtype": "fp32"}) == {"dtype": "fp32", "dtype_bytes": 4}


def test_row_and_attention_shapes() -> None:
    rows = problem_features({"rows": 16384, "cols": 8192, "dtype": "fp16"})
    assert rows["numel"] == 16384 * 8192 and rows["bytes"] == 16384 * 8192 * 2
    ce = problem_features({"rows": 8192, "vocab": 32768})
    assert ce["numel"] == 8192 * 32768 and "bytes" not in ce
    full = problem_features({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": "false", "dtype": "bf16"})
    causal = problem_features({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": True, "dtype": "bf16"})
    assert full["flops"] == 4 * 8 * 16 * 4096 * 4096 * 128 == 2 * causal["flops"]
    assert full["causal"] is False and causal["causal"] is True
    assert full["numel"] == 8 * 16 * 4096 * 128
    assert full["arithmetic_intensity"] == pytest.approx(full["flops"] / (4 * 8 * 16 * 4096 * 128 * 2))


def test_aliases_and_given_values_win() -> None:
    f = problem_features({"m": 64, "n": "32", "seq_len": 1024, "head_dim": 64, "numel": 7, "ROWS": 3})
    assert (f["M"], f["N"], f["S"], f["D"], f["rows"]) == (64, 32, 1024, 64, 3)
    assert f["numel"] == 7  # the caller's value is kept, not re-derived


@pytest.mark.parametrize(
    ("context", "needle"),
    [
        ({"colz": 3}, "unknown feature 'colz'"),
        ({"dtype": "int4"}, "dtype 'int4'"),
        ({"arch": "hopper"}, "arch 'hopper'"),
        ({"causal": "maybe"}, "causal 'maybe'"),
        ({"M": "lots"}, "M 'lots'"),
        ({"M": float("inf")}, "finite"),
        ({"M": True}, "expected a number"),
        ({"m": 1, "M": 2}, "given twice"),
    ],
)
def test_bad_context_is_a_clear_error(context: dict[str, Any], needle: str) -> None:
    with pytest.raises(FeatureError, match=needle):
        problem_features(context)


@pytest.mark.parametrize(("value", "arch"), [(90, 90), ("90", 90), ("sm_90", 90), ("sm_90a", 90), ("8.0", 80),
                                             (9.0, 90), ("compute_80", 80), (80.0, 80)])
def test_arch_spellings(value: Any, arch: int) -> None:
    assert canonical_arch(value) == arch


@pytest.mark.parametrize(("value", "dtype"), [("bf16", "bf16"), ("torch.bfloat16", "bf16"), ("Half", "fp16"),
                                              ("float32", "fp32"), ("fp8e4m3", "fp8")])
def test_dtype_spellings(value: str, dtype: str) -> None:
    assert canonical_dtype(value) == dtype


def test_kernel_features_drop_unset_and_non_scalar_values() -> None:
    got = kernel_feature_values({"has_dot": True, "num_stages": None, "block_m": 128, "configs": [1, 2],
                                 "ratio": float("nan")})
    assert got == {"has_dot": True, "block_m": 128}
