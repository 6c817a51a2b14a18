"""online-softmax and causal-skip on the expert paths the default cpu shapes do not reach (the causal
attention shape, the softmax expert's online kernel for rows wider than SINGLE_PASS_MAX, the cross-
entropy expert's full-chunk loop), plus the recognisers' refusals."""

from __future__ import annotations

import importlib.util
import json
import tomllib

import pytest

from klineage.ingest.walker import naive_end
from klineage.transforms.features import kernel_features
from klineage.transforms.registry import get_operator
from tests.transforms.harness import ROOT, WORKLOADS, Case, check, load, naive_cases


def _case(workload: str, shapes: list[dict]) -> Case:
    folder = WORKLOADS / workload
    meta = tomllib.loads((folder / "manifest.toml").read_text())["workload"]
    spec = importlib.util.spec_from_file_location(f"klineage_ref2_{workload}", folder / meta["reference"])
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    tol = float(meta.get("tolerance", {}).get("fp32", 1e-4))
    return Case(
        workload,
        (folder / "expert.py").read_text(),
        lambda: [tuple(ref.make_inputs(s, "fp32", 0)) for s in shapes],
        ref.reference,
        rtol=max(tol, 1e-4),
        atol=1e-4,
    )


def _round_trip(op_id: str, case: Case) -> None:
    op = get_operator(op_id)
    assert op.present(case.source)
    rw = op.simplify(case.source)
    assert rw is not None and not op.present(rw.source) and op.applicable(rw.source)
    assert check(case, rw.source) <= 1.0
    again = op.apply(rw.source)
    assert again is not None and op.present(again.source)
    assert check(case, again.source) <= 1.0


def test_online_softmax_on_the_softmax_experts_online_kernel() -> None:
    _round_trip("online-softmax", _case("softmax", [{"rows": 2, "cols": 40000}]))


def test_online_softmax_still_recognised_after_exp2_is_simplified() -> None:
    """exp2's simplify writes ``exp((m - m_new) * ln2)``; the walk on the H200 lost online-softmax there."""
    case = _case("softmax", [{"rows": 2, "cols": 40000}])
    base_e = get_operator("exp2").simplify(case.source)
    assert base_e is not None and "0.6931471805599453" in base_e.source
    no_exp2 = Case(case.name, base_e.source, case.inputs, case.reference, rtol=case.rtol, atol=case.atol)
    op = get_operator("online-softmax")
    assert op.present(no_exp2.source)
    two_pass = op.simplify(no_exp2.source)
    assert two_pass is not None and not op.present(two_pass.source)
    assert check(no_exp2, two_pass.source) <= 1.0
    back = op.apply(two_pass.source, **two_pass.params)  # the recorded construct goes back exactly
    assert back is not None and back.source == no_exp2.source


def test_online_softmax_on_cross_entropy_full_chunks() -> None:
    _round_trip("online-softmax", _case("cross_entropy", [{"rows": 3, "vocab": 20000}]))


def test_causal_skip_on_the_causal_attention_shape() -> None:
    case = _case("attention", [{"B": 1, "H": 1, "S": 300, "D": 32, "causal": True}])
    op = get_operator("causal-skip")
    rw = op.simplify(case.source)
    assert rw is not None and not op.present(rw.source)
    assert "0, S," in rw.source and "hi = " not in rw.source
    assert check(case, rw.source) <= 1.0


def test_causal_skip_feature_and_exact_round_trip_on_naive() -> None:
    op = get_operator("causal-skip")
    for name in ("naive_attention", "naive_cumsum"):
        src = naive_cases()[name].source
        rw = op.apply(src)
        assert rw is not None
        back = op.simplify(rw.source)
        assert back is not None and back.source == src
    src = naive_cases()["naive_attention"].source
    assert not kernel_features(src)["causal_skip"]
    assert kernel_features(op.apply(src).source)["causal_skip"]  # type: ignore[union-attr]


HELPER_MASK = "keep = offs_m[:, None] >= (start_n + offs_n[None, :])"
HELPER_REFUSED = {
    "strict": "keep = offs_m[:, None] > (start_n + offs_n[None, :])",
    "window": "keep = (offs_m[:, None] >= (start_n + offs_n[None, :])) & (offs_m[:, None] - start_n < 64)",
    "shifted keys": "keep = offs_m[:, None] >= (start_n + 1 + offs_n[None, :])",
}


def _attention_naive_end() -> str:
    path = ROOT / "lineages" / "attention.lineage.json"
    return naive_end(json.loads(path.read_text(encoding="utf-8")))


def test_causal_skip_splits_a_masked_helper_call() -> None:
    """The attention walk's naive end calls its jit loop helper once over [0, S) with the causal flag
    on; apply makes two calls, the flag off below the diagonal, and simplify takes them back."""
    op = get_operator("causal-skip")
    src = _attention_naive_end()
    assert op.applicable(src) and not op.present(src)
    rw = op.apply(src)
    assert rw is not None and op.present(rw.source)
    assert "start_m * BLOCK_M // BLOCK_N * BLOCK_N, tl.minimum(start_m * BLOCK_M + BLOCK_M, S)" in rw.source
    back = op.simplify(rw.source)
    assert back is not None and back.source == src
    case = _case("attention", [{"B": 1, "H": 1, "S": 300, "D": 32, "causal": True},
                               {"B": 1, "H": 2, "S": 256, "D": 16, "causal": True}])
    assert check(Case(case.name, src, case.inputs, case.reference, case.rtol, case.atol), rw.source) <= 1.0


@pytest.mark.parametrize("variant", sorted(HELPER_REFUSED))
def test_causal_skip_refuses_helper_masks_it_cannot_prove(variant: str) -> None:
    src = _attention_naive_end()
    assert HELPER_MASK in src
    assert get_operator("causal-skip").apply(src.replace(HELPER_MASK, HELPER_REFUSED[variant])) is None


CAUSAL_REFUSED = {
    # strict mask: the diagonal key belongs to no query, the split bound would be wrong
    "strict": ("offs_m[:, None] >= offs_n[None, :]", "offs_m[:, None] > offs_n[None, :]"),
    # a sliding window is not always true below the diagonal: the unmasked loop would be wrong
    "window": (
        "keep = (offs_m[:, None] >= offs_n[None, :]) & (offs_n[None, :] < seq_len)",
        "keep = (offs_m[:, None] >= offs_n[None, :]) & (offs_m[:, None] - offs_n[None, :] < 8)",
    ),
}


@pytest.mark.parametrize("variant", sorted(CAUSAL_REFUSED))
def test_causal_skip_refuses_masks_it_cannot_prove(variant: str) -> None:
    old, new = CAUSAL_REFUSED[variant]
    src = naive_cases()["naive_attention"].source
    assert old in src
    assert get_operator("causal-skip").apply(src.replace(old, new)) is None


def test_online_softmax_fuses_a_scaled_exponent_with_the_same_scale_on_the_rescale() -> None:
    """sum exp(c (x - M)) == exp(c (m - M)) * sum exp(c (x - m)): the rescale must carry c too."""
    case = naive_cases()["naive_logsumexp"]
    scaled = case.source.replace("tl.exp(x - m)", "tl.exp((x - m) * 0.5)")
    assert scaled != case.source
    fused = get_operator("online-softmax").apply(scaled)
    assert fused is not None and "tl.exp((m - m_safe) * 0.5)" in fused.source
    # the case's reference computes the unscaled function: the scaled two-pass kernel is the reference
    two_pass_module = load(scaled)
    two_pass = Case(case.name, scaled, case.inputs, two_pass_module.run, rtol=case.rtol, atol=case.atol)
    assert check(two_pass, fused.source) <= 1.0


def test_online_softmax_fuses_the_cross_entropy_naive_end_generically() -> None:
    """The H200 walk's naive end of cross_entropy (exp2 simplified to ``exp((x - m) * ln2)``, full
    chunks and a masked tail): generic apply fuses both chunk statements, correct under the interpreter."""
    case = _case("cross_entropy", [{"rows": 3, "vocab": 20000}])
    op = get_operator("online-softmax")
    no_exp2 = get_operator("exp2").simplify(case.source)
    assert no_exp2 is not None
    two_pass = op.simplify(no_exp2.source)
    assert two_pass is not None and not op.present(two_pass.source)
    fused = op.apply(two_pass.source)  # no recorded parameters
    assert fused is not None and op.present(fused.source)
    assert fused.source.count("m_safe) * 0.6931471805599453)") == 4  # rescale and sum, full chunks and tail
    assert check(case, fused.source) <= 1.0
    # the vector-accumulator form (running max per lane) is not the scalar form: left alone
    assert get_operator("online-softmax").apply(naive_cases()["naive_cross_entropy"].source) is None


def test_row_persistent_generic_apply_loops_the_guarded_form_its_simplify_leaves() -> None:
    """``row = pid`` + ``if row < n_rows:`` (one program per row) becomes a strided row loop: the
    generic apply an agent would use on a kernel written that way (here the softmax expert's online
    kernel after simplify), correct under the interpreter."""
    case = _case("softmax", [{"rows": 7, "cols": 40000}])
    op = get_operator("row-persistent")
    simple = op.simplify(case.source)
    assert simple is not None and "if row < n_rows:" in simple.source
    looped = op.apply(simple.source)  # generic: no recorded parameters
    assert looped is not None and "for row in tl.range(pid, n_rows, n_progs):" in looped.source
    assert op.present(looped.source) and "min(programs, num_sms * 4)" in looped.source
    assert check(Case(case.name, looped.source, case.inputs, case.reference, rtol=case.rtol, atol=case.atol)) <= 1.0


ROW_LINE = "        x_row = x_ptr + tl.cast(row, tl.int64) * stride_x\n"


@pytest.mark.parametrize("change", [
    (ROW_LINE, ROW_LINE + "        if row == 3:\n            return\n"),  # leaves early: no next row
    (ROW_LINE, ROW_LINE + "        if row == 3:\n            break\n"),
    ("    row = pid\n", "    base = x_ptr + tl.cast(pid, tl.int64) * stride_x\n    row = pid\n"),  # stale base
    ("    if row < n_rows:\n", "    if row < n_rows:\n        row = row + 0\n"),  # rebinds the loop variable
])
def test_row_persistent_refuses_a_guarded_body_that_is_not_per_row(change: tuple[str, str]) -> None:
    case = _case("softmax", [{"rows": 7, "cols": 40000}])
    op = get_operator("row-persistent")
    simple = op.simplify(case.source)
    assert simple is not None and change[0] in simple.source
    variant = simple.source.replace(change[0], change[1], 1)
    if "base" in change[1]:  # the body reads the value computed from pid before the loop would start
        variant = variant.replace(ROW_LINE, "        x_row = base\n")
    assert op.apply(variant) is None
