"""Problem-feature normalization: canonical names and values, derived features, nothing invented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klineage.kb.conditions import FEATURES, PORTABLE_FEATURES
from klineage.kb.features import (
    FeatureError,
    canonical_arch,
    canonical_dtype,
    case_features,
    infer_roles,
    kernel_feature_values,
    problem_features,
    resolve_roles,
)
from klineage.schema.manifest import DIM_ROLES, load_manifest

PORTABLE = ("bytes", "flops", "arithmetic_intensity", "dtype_bytes", "out_elems", "reduce_len", "rows")
assert set(PORTABLE) <= set(PORTABLE_FEATURES)


def test_cli_strings_become_typed_features_with_derivations() -> None:
    f = problem_features({"M": "4096", "N": "4096", "K": "1024", "dtype": "bfloat16", "arch": "sm_90"})
    assert f["M"] == 4096 and isinstance(f["M"], int)
    assert f["dtype"] == "bf16" and f["dtype_bytes"] == 2
    assert f["arch"] == 90 and f["has_tma"] is True
    traffic = (4096 * 1024 + 1024 * 4096 + 4096 * 4096) * 2  # bytes: compulsory traffic A + B + C
    assert f["numel"] == 4096 * 4096 and f["bytes"] == traffic
    assert f["flops"] == 2 * 4096 * 4096 * 1024
    assert f["arithmetic_intensity"] == pytest.approx(2 * 4096 * 4096 * 1024 / traffic)
    assert (f["rows"], f["reduce_len"], f["out_elems"]) == (4096, 1024, 4096 * 4096)


def test_absent_stays_absent() -> None:
    f = problem_features({"M": 4096})
    assert f == {"M": 4096}  # no K, no dtype, no arch: nothing derived, nothing defaulted (no rows = M x 1)
    assert problem_features(None) == {} and problem_features({}) == {}
    assert "has_tma" not in problem_features({"dtype": "fp16"})
    assert problem_features({"K": None, "dtype": "fp32"}) == {"dtype": "fp32", "dtype_bytes": 4}


def test_row_and_attention_shapes() -> None:
    rows = problem_features({"rows": 16384, "cols": 8192, "dtype": "fp16"})
    assert rows["numel"] == 16384 * 8192 and rows["bytes"] == 2 * 16384 * 8192 * 2  # read X, write Y
    assert rows["reduce_len"] == 8192 and rows["out_elems"] == 16384 * 8192
    ce = problem_features({"rows": 8192, "vocab": 32768})
    assert ce["numel"] == 8192 * 32768 and "bytes" not in ce  # no dtype: no bytes
    assert ce["reduce_len"] == 32768 and ce["out_elems"] == 8192  # one loss per row
    full = problem_features({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": "false", "dtype": "bf16"})
    causal = problem_features({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": True, "dtype": "bf16"})
    assert full["flops"] == 4 * 8 * 16 * 4096 * 4096 * 128 == 2 * causal["flops"]
    assert full["causal"] is False and causal["causal"] is True
    assert full["numel"] == 8 * 16 * 4096 * 128
    assert full["arithmetic_intensity"] == pytest.approx(full["flops"] / (4 * 8 * 16 * 4096 * 128 * 2))
    assert (full["rows"], full["reduce_len"]) == (8 * 16 * 4096, 4096)


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


# ------------------------------------------------------------------------------------ portable features

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_DIRS = sorted(d for top in ("workloads", "heldout") for d in (ROOT / top).iterdir()
                       if (d / "manifest.toml").is_file())


@pytest.mark.parametrize("folder", MANIFEST_DIRS, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_roles_resolve_on_every_manifest_and_give_portable_features(folder: Path) -> None:
    m = load_manifest(folder)
    for shape in (*m.shapes, *m.cpu_shapes):
        roles = resolve_roles(shape, m.roles, m.family)
        assert set(roles) == set(shape) and set(roles.values()) <= set(DIM_ROLES)
        if m.roles is not None:
            assert {d: roles[d] for d in m.roles} == dict(m.roles)  # declared roles win
        f = case_features(shape, m.dtypes[0], m.roles, m.family, arch="sm_90")
        for dim, value in shape.items():
            assert f.get(dim, value) == value or dim == "rows"  # local dims stay as context
        assert f["bytes"] > 0 and f["out_elems"] > 0 and f["dtype_bytes"] in (2, 4)
        assert f["arch"] == 90 and f["has_tma"] is True
        if m.family != "elementwise":
            assert f["rows"] > 0 and f["reduce_len"] > 0
        if m.family in ("gemm", "attention"):
            assert f["flops"] > 0 and f["arithmetic_intensity"] == pytest.approx(f["flops"] / f["bytes"], rel=1e-6)


def test_inference_rules_per_family() -> None:
    assert infer_roles({"M": 1, "N": 2, "K": 3}, "gemm") == {"M": "rows", "N": "cols", "K": "reduce"}
    assert infer_roles({"B": 1, "M": 1, "N": 2, "K": 3}, "gemm")["B"] == "batch"
    assert infer_roles({"B": 1, "H": 2, "S": 3, "D": 4, "causal": True}, "attention") == {
        "B": "batch", "H": "batch", "S": "seq", "D": "head_dim", "causal": "flag"}
    assert infer_roles({"rows": 1, "cols": 2}, "row-reduction") == {"rows": "rows", "cols": "reduce_kept"}
    assert infer_roles({"rows": 1, "vocab": 2}, "row-reduction")["vocab"] == "reduce"
    assert infer_roles({"N": 5}, "elementwise") == {"N": "elements"}
    with pytest.raises(FeatureError, match=r"dim 'T'.*\[workload.roles\]"):
        infer_roles({"T": 4}, "scan")
    with pytest.raises(FeatureError, match="role 'columns'"):
        resolve_roles({"rows": 1, "cols": 2}, {"cols": "columns"})


def test_case_features_values_by_role() -> None:
    gemm = case_features({"M": 4096, "N": 2048, "K": 512}, "fp16", None, "gemm")
    assert gemm["rows"] == 4096 and gemm["reduce_len"] == 512 and gemm["out_elems"] == 4096 * 2048
    assert gemm["flops"] == 2 * 4096 * 2048 * 512
    assert gemm["bytes"] == (4096 * 512 + 512 * 2048 + 4096 * 2048) * 2
    bmm = case_features({"B": 8, "M": 64, "N": 32, "K": 16}, "bf16", None, "gemm")
    assert bmm["rows"] == 8 * 64 and bmm["flops"] == 2 * 8 * 64 * 32 * 16
    assert bmm["bytes"] == (8 * 64 * 16 + 8 * 16 * 32 + 8 * 64 * 32) * 2
    # the same problem under other names and declared roles gives the same portable features
    renamed = case_features({"T": 4096, "U": 2048, "W": 512}, "fp16", {"T": "rows", "U": "cols", "W": "reduce"})
    assert {k: renamed[k] for k in PORTABLE} == {k: gemm[k] for k in PORTABLE}
    softmax = case_features({"rows": 100, "cols": 1000}, "fp32", None, "row-reduction")
    absmax = case_features({"rows": 100, "cols": 1000}, "fp32", {"cols": "reduce"}, "row-reduction")
    assert softmax["out_elems"] == 100 * 1000 and absmax["out_elems"] == 100
    assert softmax["reduce_len"] == absmax["reduce_len"] == 1000 and "flops" not in softmax
    attn = case_features({"B": 2, "H": 4, "S": 128, "D": 64, "causal": True}, "bf16", None, "attention")
    assert attn["flops"] == 4 * 2 * 4 * 128 * 128 * 64 // 2 and attn["causal"] is True
    measured = case_features({"N": 1000}, "fp32", None, "elementwise", flops=5000, bytes_moved=12000)
    assert measured["bytes"] == 12000 and measured["arithmetic_intensity"] == pytest.approx(5000 / 12000)
    assert "rows" not in measured and measured["out_elems"] == 1000
    tiled = case_features({"M": 1000, "N": 300, "K": 64}, "bf16", None, "gemm", tile_rows=128, tile_cols=128,
                          sm_count=132)
    assert tiled["tiles"] == 8 * 3 and tiled["waves"] == pytest.approx(24 / 132)
    assert set(PORTABLE) <= FEATURES


_BTC_MANIFEST = """[workload]
name = "add_layernorm"
family = "row-reduction"
description = "LayerNorm(X + R) over the last dim of (B, T, C) activations."
role = "heldout"
kernel = "naive.py"
reference = "reference.py"
dtypes = ["bf16"]
shapes = [{ B = 8, T = 1024, C = 768 }, { B = 4, T = 2048, C = 4096 }, { B = 1, T = 4096, C = 12288 }]
cpu_shapes = [{ B = 2, T = 3, C = 100 }]
ROLES
[workload.tolerance]
bf16 = 2e-2
"""


def _btc_workload(folder: Path, roles: str = "") -> Path:
    folder.mkdir()
    (folder / "naive.py").write_text("def run(x): ...\n")
    (folder / "reference.py").write_text("def reference(x): ...\n")
    (folder / "manifest.toml").write_text(_BTC_MANIFEST.replace("ROLES", roles))
    return folder


def test_a_workload_context_names_the_dims_it_leaves_out_and_roles_bring_them_in(tmp_path: Path) -> None:
    """Dims named as nobody else names them (B, T, C) have no inferable role: the context keeps what the
    condition language knows (B, the dtype) and says which dims it left out and how to bring them in; with
    [workload.roles] declared, the same shape gives the portable features, from the median-size shape."""
    from klineage.kb.features import workload_context

    bare = load_manifest(_btc_workload(tmp_path / "bare"))
    found = workload_context(bare)
    assert found.context == {"B": 4, "dtype": "bf16"} and found.left_out == ("T", "C")
    note = found.note(bare)
    assert "manifest.toml" in note and "T, C" in note and "[workload.roles]" in note
    declared = load_manifest(_btc_workload(tmp_path / "roles", '[workload.roles]\nT = "rows"\nC = "reduce_kept"\n'))
    ctx = workload_context(declared)
    assert ctx.left_out == () and ctx.note(declared) == ""
    assert (ctx.context["rows"], ctx.context["reduce_len"], ctx.context["dtype_bytes"]) == (4 * 2048, 4096, 2)
    assert ctx.context["bytes"] == 2 * 4 * 2048 * 4096 * 2


def test_search_by_workload_uses_the_agents_context_and_explains_dims_left_out(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    from typer.testing import CliRunner

    from klineage.cli.main import app

    monkeypatch.setenv("KLINEAGE_DATA_DIR", str(tmp_path / "kb"))
    folder = _btc_workload(tmp_path / "bare")
    result = CliRunner().invoke(app, ["search", "layernorm", "--workload", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert "T, C" in result.output and "[workload.roles]" in result.output and "unknown feature" not in result.output


def test_the_tutorials_n_elements_is_a_1d_problems_length() -> None:
    """Triton's tutorials call a 1-D size ``n_elements``: it is N, an elementwise problem's length."""
    assert infer_roles({"n_elements": 98432}) == {"n_elements": "elements"}
    f = case_features({"n_elements": 98432}, "fp32", family="elementwise")
    assert f["out_elems"] == 98432 and f["bytes"] == 2 * 98432 * 4
