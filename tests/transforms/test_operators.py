"""Both directions of every operator, run under the Triton interpreter on naive and expert kernels."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from klineage.ingest.walker import naive_end
from klineage.transforms.features import kernel_features
from klineage.transforms.operator import Rewrite
from klineage.transforms.registry import all_operators, get_operator, operator_ids
from tests.transforms.harness import EXPERTS, Case, check, expert_case, naive_cases

NAIVE = naive_cases()

# Where `apply` must add the optimization to a naive kernel (and `simplify` must take it back out).
APPLY_NAIVE: dict[str, tuple[str, ...]] = {
    "autotune": (
        "naive_gemm",
        "naive_linear",
        "naive_layernorm",
        "naive_gelu",
        "naive_cross_entropy",
        "naive_attention",
    ),
    "tile-size": ("naive_linear", "naive_gemm", "naive_attention"),
    "num-warps": ("naive_softmax", "naive_rmsnorm", "naive_attention"),
    "pipelining": ("naive_linear", "naive_gemm", "naive_layernorm", "naive_cross_entropy", "naive_attention"),
    "register-cap": ("naive_gemm", "naive_linear", "naive_attention"),
    "grouped-order": ("naive_gemm", "naive_linear"),
    "epilogue-fusion": ("naive_matmul_epilogue",),
    "split-k": ("naive_gemm",),
    "persistent": ("naive_gemm", "naive_linear"),
    "row-persistent": (
        "naive_softmax",
        "naive_layernorm",
        "naive_rmsnorm",
        "naive_gelu",
        "naive_cross_entropy",
    ),
    "mask-elision": (
        "naive_linear",
        "naive_gemm",
        "naive_layernorm",
        "naive_cross_entropy",
        "naive_attention",
    ),
    "multi-row": ("naive_rowsum",),
    "contiguity-hints": ("naive_linear", "naive_gemm", "naive_gelu", "naive_attention"),
    "eviction-hints": (
        "naive_softmax",
        "naive_layernorm",
        "naive_rmsnorm",
        "naive_gelu",
        "naive_cross_entropy",
    ),
    "int64-offsets": (
        "naive_gemm",
        "naive_softmax",
        "naive_layernorm",
        "naive_rmsnorm",
        "naive_cross_entropy",
        "naive_attention",
        "naive_rowsum",
    ),
    "exp2": ("naive_softmax", "naive_gelu", "naive_cross_entropy", "naive_attention"),
    "rsqrt": ("naive_layernorm", "naive_rmsnorm"),
    "fp32-accumulate": (
        "naive_softmax",
        "naive_layernorm",
        "naive_rmsnorm",
        "naive_gelu",
        "naive_cross_entropy",
    ),
    "dot-accumulate": ("naive_linear", "naive_gemm", "naive_attention"),
    "online-softmax": ("naive_logsumexp",),
    "causal-skip": ("naive_attention", "naive_cumsum"),
    "single-pass-row": (
        "naive_looped_rmsnorm",
        "naive_looped_softmax",
        "naive_layernorm",
        "naive_logsumexp",
        "naive_cross_entropy",
    ),
    # not naive_matmul_epilogue: its output row (21 fp32) is not 16-byte aligned, the guard refuses it
    "tensor-descriptors": ("naive_gemm", "naive_linear"),
}

# Where the optimization is present in an expert and `simplify` must remove it; the bool says whether
# `apply` on the simplified expert must re-add it.
SIMPLIFY_EXPERT: dict[str, dict[str, bool]] = {
    "autotune": {"gemm": True, "attention": True},
    "tile-size": {"gemm": True},
    "num-warps": {
        "gemm": True,
        "softmax": True,
        "layernorm": True,
        "attention": False,
        "cross_entropy": True,
    },
    "pipelining": {"gemm": True, "softmax": True, "layernorm": True, "attention": False},
    "register-cap": {"attention": False},
    "grouped-order": {"gemm": True},
    "persistent": {"gemm": False},
    "row-persistent": {"softmax": False, "layernorm": False, "cross_entropy": False},
    "mask-elision": {"gemm": True, "softmax": True, "layernorm": True, "attention": False},
    "multi-row": {"softmax": True, "layernorm": True},
    "contiguity-hints": {"gemm": True, "attention": True},
    "eviction-hints": {"softmax": True, "layernorm": True, "cross_entropy": True},
    "int64-offsets": {
        "gemm": True,
        "softmax": True,
        "layernorm": True,
        "attention": True,
        "cross_entropy": True,
    },
    "exp2": {"softmax": True, "attention": True, "cross_entropy": True},
    "fp32-accumulate": {"gemm": False, "softmax": True, "layernorm": True, "cross_entropy": True},
    "dot-accumulate": {"gemm": True, "attention": True},
    "online-softmax": {"softmax": True, "cross_entropy": True},
    "causal-skip": {"attention": False},
    "single-pass-row": {"softmax": False, "layernorm": True},
}

# Feature that each operator switches on (feature, value after apply) — checked on its first naive kernel.
FEATURE_OF = {
    "autotune": "uses_autotune",
    "grouped-order": "grouped_order",
    "persistent": "persistent",
    "row-persistent": "persistent",
    "mask-elision": "mask_elision",
    "contiguity-hints": "contiguity_hints",
    "eviction-hints": "eviction_hints",
    "int64-offsets": "int64_offsets",
    "exp2": "uses_exp2",
    "rsqrt": "uses_rsqrt",
    "fp32-accumulate": "fp32_accumulate",
    "dot-accumulate": "dot_accumulate",
    "online-softmax": "online_softmax",
    "causal-skip": "causal_skip",
    "single-pass-row": "single_pass_row",
    "register-cap": "register_cap",
    "epilogue-fusion": "epilogue_fusion",
    "split-k": "split_k",
    "tensor-descriptors": "uses_tma",
}


@functools.cache
def _expert(workload: str) -> Case:
    return expert_case(workload)


def _ok(case: Case, source: str) -> None:
    err = check(case, source)
    assert err <= 1.0, f"{case.name}: scaled error {err:.3g} after rewrite"


def test_registry_has_the_catalog() -> None:
    ids = operator_ids()
    assert len(ids) >= 15 and len(set(ids)) == len(ids)
    assert set(APPLY_NAIVE) == set(ids), "every operator needs an apply test on naive kernels"
    for op in all_operators():
        for attr in ("id", "name", "intent", "carrier", "anchor_predicate", "anchor_description"):
            assert isinstance(getattr(op, attr), str) and getattr(op, attr), (op.id, attr)
    with pytest.raises(KeyError, match="known operators: autotune"):
        get_operator("no-such-operator")


@pytest.mark.parametrize(("op_id", "kernel"), [(o, k) for o, ks in APPLY_NAIVE.items() for k in ks])
def test_apply_on_naive_then_simplify(op_id: str, kernel: str) -> None:
    op, case = get_operator(op_id), NAIVE[kernel]
    assert not op.present(case.source), f"{op_id} already present in {kernel}"
    rw = op.apply(case.source)
    assert isinstance(rw, Rewrite) and rw.direction == "apply" and rw.operator == op_id
    assert rw.diff.startswith("--- a/kernel.py") and rw.source != case.source
    assert op.apply(case.source) == rw, "apply must be deterministic"
    assert op.present(rw.source), f"{op_id} not detected after apply on {kernel}"
    _ok(case, rw.source)
    back = op.simplify(rw.source)
    assert back is not None and back.direction == "simplify"
    assert not op.present(back.source), f"{op_id} still detected after simplify(apply({kernel}))"
    _ok(case, back.source)


@pytest.mark.parametrize("workload", EXPERTS)
@pytest.mark.parametrize("op_id", operator_ids())
def test_simplify_expert_then_reapply(op_id: str, workload: str) -> None:
    """Wherever an operator detects its optimization in an expert, simplify removes it and the kernel
    stays correct; apply on the result (when it re-adds) is correct too. The experts evolve, so
    which pairs are present is read from detect(); ``SIMPLIFY_EXPERT`` lists the pairs last seen,
    and ``test_expert_coverage`` keeps the check from going vacuous."""
    case = _expert(workload)
    op = get_operator(op_id)
    if not op.present(case.source):
        assert op.simplify(case.source) is None, f"{op_id} simplifies {workload} without detecting it"
        pytest.skip(f"{op_id} is not present in the {workload} expert")
    rw = op.simplify(case.source)
    if rw is None:  # e.g. autotune configs built by a function with arguments: not pinned, left alone
        pytest.skip(f"{op_id} is detected in the {workload} expert but its form is not one simplify rewrites")
    assert rw.direction == "simplify"
    assert op.simplify(case.source) == rw, "simplify must be deterministic"
    assert not op.present(rw.source), f"{op_id} still detected after simplify on the {workload} expert"
    _ok(case, rw.source)
    again = op.apply(rw.source)
    if again is not None:
        assert op.present(again.source), f"apply(simplify({workload})) for {op_id} does not detect itself"
        _ok(case, again.source)
    elif SIMPLIFY_EXPERT.get(op_id, {}).get(workload):
        pytest.fail(f"apply(simplify({workload})) did not re-add {op_id}")


def test_expert_coverage() -> None:
    """Most of the operators observed in the experts are still detected there."""
    cases = {w: _expert(w) for w in EXPERTS}
    pairs = {(op.id, w) for op in all_operators() for w, c in cases.items() if op.present(c.source)}
    expected = {(o, w) for o, ws in SIMPLIFY_EXPERT.items() for w in ws}
    assert len(pairs) >= 25, sorted(pairs)
    assert len(pairs & expected) >= 0.8 * len(expected), sorted(expected - pairs)


def test_transfer_every_operator_applies_to_a_kernel_it_was_not_derived_from() -> None:
    """Each operator's apply passes under the interpreter on a naive kernel of a family other than the
    experts it was read from."""
    failures = []
    for op in all_operators():
        derived = {w.replace("_", "") for w in SIMPLIFY_EXPERT.get(op.id, {})}
        others = [k for k in APPLY_NAIVE[op.id] if k.removeprefix("naive_").replace("_", "") not in derived]
        if not others:
            failures.append(f"{op.id}: no naive kernel outside {sorted(derived)}")
            continue
        case = NAIVE[others[0]]
        rw = op.apply(case.source)
        if rw is None or not op.present(rw.source) or check(case, rw.source) > 1.0:
            failures.append(f"{op.id} on {case.name}")
    assert not failures, failures


@pytest.mark.parametrize("op_id", sorted(FEATURE_OF))
def test_features_follow_the_rewrite(op_id: str) -> None:
    feature = FEATURE_OF[op_id]
    source = NAIVE[APPLY_NAIVE[op_id][0]].source
    rw = get_operator(op_id).apply(source)
    assert rw is not None
    assert not kernel_features(source)[feature]
    assert kernel_features(rw.source)[feature]
    back = get_operator(op_id).simplify(rw.source)
    assert back is not None and not kernel_features(back.source)[feature]


def test_tuning_features_change() -> None:
    gemm = NAIVE["naive_gemm"].source
    before = kernel_features(gemm)
    assert before["block_m"] == 16 and before["num_stages"] is None
    bigger = get_operator("tile-size").apply(gemm)
    staged = get_operator("pipelining").apply(gemm)
    assert bigger is not None and staged is not None
    assert kernel_features(bigger.source)["block_m"] == 64
    assert kernel_features(staged.source)["num_stages"] == 4
    warps = get_operator("num-warps").apply(NAIVE["naive_softmax"].source)
    assert warps is not None and kernel_features(warps.source)["num_warps"] is None  # a host expression
    assert "num_warps=max(4, min(16, BLOCK // 256))" in warps.source


@pytest.mark.parametrize("op_id", operator_ids())
def test_not_applicable_returns_none(op_id: str) -> None:
    op = get_operator(op_id)
    for bad in ("def run(:\n", "import torch\n\ndef run(x):\n    return x\n"):
        assert op.simplify(bad) is None
        assert op.apply(bad) is None
        assert op.detect(bad) == []


@pytest.mark.parametrize("op_id", ["grouped-order", "persistent", "tile-size", "dot-accumulate", "register-cap"])
def test_gemm_only_operators_leave_row_kernels_alone(op_id: str) -> None:
    for kernel in ("naive_softmax", "naive_layernorm", "naive_cross_entropy"):
        assert get_operator(op_id).apply(NAIVE[kernel].source) is None, kernel


@pytest.mark.parametrize("op_id", ["rsqrt", "eviction-hints", "row-persistent", "multi-row"])
def test_row_operators_leave_gemm_alone(op_id: str) -> None:
    assert get_operator(op_id).apply(NAIVE["naive_gemm"].source) is None


def test_num_warps_sizes_a_tensor_descriptor_gemm_from_its_accumulator() -> None:
    """The gemm expert's TMA kernel has no tl.arange over its tile (descriptor loads take offsets):
    generic apply reads the tile from ``tl.zeros((BLOCK_M, BLOCK_N))`` and gives a 128x256 tile the
    8 warps the expert uses (the H200 walk's generic replay found no place for num-warps there)."""
    doc = json.loads((Path(__file__).resolve().parents[2] / "lineages" / "gemm.lineage.json").read_text())
    naive = naive_end(doc)  # autotune, num-warps and the rest removed: launches with literal tiles
    op = get_operator("num-warps")
    assert not op.present(naive) and op.applicable(naive)
    again = op.apply(naive)  # no recorded parameters
    assert again is not None
    tma_launch = next(line for line in again.source.splitlines() if "_matmul_tma_persistent_kernel[" in line)
    assert "BLOCK_M=128, BLOCK_N=256" in tma_launch and tma_launch.rstrip().endswith("num_warps=8)")


LAMBDA_GRID = "    grid = lambda META: (triton.cdiv(M, META['BLOCK_M']) * triton.cdiv(N, META['BLOCK_N']),)\n"


def _lambda_grid_gemm() -> Case:
    """naive_gemm launched the way the Triton tutorials launch: a grid lambda over META."""
    case = NAIVE["naive_gemm"]
    old = "    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)\n"
    assert old in case.source
    return Case(case.name, case.source.replace(old, LAMBDA_GRID), case.inputs, case.reference,
                rtol=case.rtol, atol=case.atol)


def test_persistent_applies_to_a_grid_lambda_and_counts_the_tiles_in_the_kernel() -> None:
    """The host cannot count the tiles of a META grid before the launch: the kernel counts them
    (tl.cdiv over its own constexprs) and the lambda launches min(tiles, SMs) programs."""
    case = _lambda_grid_gemm()
    op = get_operator("persistent")
    rw = op.apply(case.source)
    assert rw is not None and op.present(rw.source)
    assert "num_tiles = (tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N))" in rw.source
    assert "META['BLOCK_N']), num_sms),)" in rw.source
    lines = rw.source.splitlines()
    sms_line = next(i for i, line in enumerate(lines) if line.strip().startswith("num_sms ="))
    assert sms_line < next(i for i, line in enumerate(lines) if line.strip().startswith("grid = lambda"))
    assert check(case, rw.source) <= 1.0


def test_persistent_refuses_a_grid_count_with_no_kernel_counterpart() -> None:
    """A host value the kernel never receives (``extra``, from a tensor's shape) cannot be counted
    inside the kernel; a host constant could (``extra = 1`` is followed to 1)."""
    case = _lambda_grid_gemm()
    with_extra = "    extra = a.shape[0] % 3\n" + LAMBDA_GRID.replace(",)\n", " + extra,)\n")
    source = case.source.replace(LAMBDA_GRID, with_extra)
    assert "+ extra,)" in source
    assert get_operator("persistent").apply(source) is None


def test_persistent_refuses_a_grid_count_over_a_parameter_the_kernel_rebinds() -> None:
    case = _lambda_grid_gemm()
    source = case.source.replace("    pid = tl.program_id(0)\n", "    M = M + 0\n    pid = tl.program_id(0)\n", 1)
    assert "M = M + 0" in source
    assert get_operator("persistent").apply(source) is None
