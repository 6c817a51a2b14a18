"""single-pass-row on both sides of the dispatch (a small ``max_cols`` sends some rows to the looped
kernel), on the held-out log-softmax, and on the experts' long-row path; plus its refusals."""

from __future__ import annotations

import ast
import importlib.util
import tomllib

import pytest
import torch

from klineage.transforms.features import kernel_features
from klineage.transforms.registry import get_operator
from tests.transforms.harness import FIXTURES, ROOT, WORKLOADS, Case, check, naive_cases

OP = get_operator("single-pass-row")
NAIVE = naive_cases()


def _workload_case(folder, source_name: str, shapes: list[dict]) -> Case:
    meta = tomllib.loads((folder / "manifest.toml").read_text())["workload"]
    spec = importlib.util.spec_from_file_location(f"klineage_spr_{folder.name}", folder / meta["reference"])
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    tol = float(meta.get("tolerance", {}).get("fp32", 1e-4))
    return Case(
        folder.name,
        (folder / source_name).read_text(),
        lambda: [tuple(ref.make_inputs(s, "fp32", 0)) for s in shapes],
        ref.reference,
        rtol=max(tol, 1e-4),
        atol=1e-4,
    )


def _loads_of(source: str, kernel: str) -> int:
    tree = ast.parse(source)
    fn = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == kernel)
    return sum(1 for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "load")


@pytest.mark.parametrize("name", ["naive_looped_softmax", "naive_looped_rmsnorm", "naive_layernorm"])
def test_single_pass_row_both_paths(name: str) -> None:
    """Rows of 40 columns take the single-pass kernel, rows of 300 the looped one (max_cols=128)."""
    case = NAIVE[name]
    rw = OP.apply(case.source, max_cols=128)
    assert rw is not None and OP.present(rw.source) and rw.params == {"max_cols": 128}
    assert "SINGLE_PASS_MAX = 128" in rw.source
    assert kernel_features(rw.source)["single_pass_row"]
    spec = case.inputs()[0]
    for cols in (40, 300):
        g = torch.Generator().manual_seed(cols)
        args = tuple(
            torch.randn((*a.shape[:-1], cols), generator=g) if a.dim() else a for a in spec
        )
        small = Case(name, case.source, lambda args=args: [args], case.reference)
        assert check(small, rw.source) <= 1.0, (name, cols)
    back = OP.simplify(rw.source)
    assert back is not None and back.source == case.source, "simplify(apply(x)) gives x back"


def test_single_pass_kernel_reads_the_row_once() -> None:
    rw = OP.apply(NAIVE["naive_looped_softmax"].source)
    assert rw is not None
    assert _loads_of(rw.source, "softmax_kernel") == 3
    assert _loads_of(rw.source, "softmax_single_pass_kernel") == 1
    assert "tl.where(mask, row_x, 0.0)" in rw.source  # the write pass's other=0.0 is kept


def test_single_pass_row_on_heldout_log_softmax() -> None:
    case = _workload_case(ROOT / "heldout" / "log_softmax", "naive.py", [{"rows": 3, "cols": 300}])
    assert OP.applicable(case.source) and not OP.present(case.source)
    for limit in (8192, 128):
        rw = OP.apply(case.source, max_cols=limit)
        assert rw is not None and OP.present(rw.source)
        assert check(case, rw.source) <= 1.0, limit


def test_single_pass_row_after_mask_elision() -> None:
    """A looped kernel whose loads branch on mask elision's divisibility flag still gets its single-pass
    copy (loaded with the mask: one block of next_power_of_2(n_cols) rarely divides the row); the looped
    kernel keeps its flag, and simplify gives the mask-elided kernel back."""
    case = _workload_case(ROOT / "heldout" / "log_softmax", "naive.py", [{"rows": 3, "cols": 300}])
    elided = get_operator("mask-elision").apply(case.source)
    assert elided is not None and "EVEN_N_COLS" in elided.source
    assert [a.kind for a in OP.detect(elided.source)] == ["applicable"]
    for limit in (8192, 128):  # 300 columns: the single-pass kernel, then the looped one
        rw = OP.apply(elided.source, max_cols=limit)
        assert rw is not None and OP.present(rw.source)
        single = next(f for f in ast.parse(rw.source).body
                      if isinstance(f, ast.FunctionDef) and f.name.endswith("single_pass_kernel"))
        assert "EVEN_N_COLS" not in ast.unparse(single) and _loads_of(rw.source, single.name) == 1
        assert rw.source.count("EVEN_N_COLS") == elided.source.count("EVEN_N_COLS")
        assert check(case, rw.source) <= 1.0, limit
        assert OP.simplify(rw.source).source == elided.source


@pytest.mark.parametrize(("workload", "shape"), [
    ("softmax", {"rows": 2, "cols": 40000}),  # wider than SINGLE_PASS_MAX: the expert's online kernel
    ("layernorm", {"rows": 2, "cols": 20000}),  # wider than SINGLE_PASS_MAX: the chunked kernel
])
def test_simplified_experts_on_long_rows(workload: str, shape: dict) -> None:
    case = _workload_case(WORKLOADS / workload, "expert.py", [shape])
    rw = OP.simplify(case.source)
    assert rw is not None and not OP.present(rw.source)
    assert "SINGLE_PASS_MAX" not in rw.source.split('"""', 2)[2]  # gone from the code (not the docstring)
    assert check(case, rw.source) <= 1.0
    assert OP.apply(rw.source, **rw.params).source == case.source


def test_generic_apply_on_the_simplified_layernorm_expert() -> None:
    case = _workload_case(WORKLOADS / "layernorm", "expert.py", [{"rows": 3, "cols": 200}])
    rw = OP.simplify(case.source)
    assert rw is not None
    again = OP.apply(rw.source, max_cols=128)  # 200 columns: the chunked kernel
    assert again is not None and check(case, again.source) <= 1.0
    again = OP.apply(rw.source)  # the single-pass copy of the chunked kernel
    assert again is not None and check(case, again.source) <= 1.0


@pytest.mark.parametrize(("workload", "shapes"), [
    ("softmax", [{"rows": 3, "cols": 200}, {"rows": 2, "cols": 256}, {"rows": 2, "cols": 20000}]),
    ("cross_entropy", [{"rows": 4, "vocab": 300}, {"rows": 3, "vocab": 512}]),
])
def test_full_chunk_loops_with_a_tail_become_one_masked_pass(workload: str, shapes: list[dict]) -> None:
    """A loop over the full chunks followed by its tail branch (``if n_full < n_cols``) is one column
    pass: the single-pass copy runs the tail's body at offset 0 (masked, it covers the whole row, also
    when the row is exactly one block) and loads the row once."""
    source = (WORKLOADS / workload / "expert.py").read_text()
    if workload == "softmax":
        simplified = OP.simplify(source)
        assert simplified is not None
        source = simplified.source
    case = _workload_case(WORKLOADS / workload, "expert.py", shapes)
    case = Case(case.name, source, case.inputs, case.reference, rtol=case.rtol, atol=case.atol)
    rw = OP.apply(source)
    assert rw is not None and OP.present(rw.source)
    single = next(f.name for f in ast.parse(rw.source).body
                  if isinstance(f, ast.FunctionDef) and f.name.endswith("single_pass_kernel"))
    assert _loads_of(rw.source, single) == (1 if workload == "softmax" else 3)  # CE: target, its logit, the row
    assert check(case, rw.source) <= 1.0
    assert OP.simplify(rw.source).source == source


def test_single_pass_row_refusals() -> None:
    # whole-row kernels (already single pass, no column loop) and dot kernels: nothing to add; the
    # whole-row kernels hold the optimization (present), a 2-D multi-row tile and the dot kernels do not
    for name in ("naive_softmax", "naive_rmsnorm", "naive_rowsum", "naive_gemm", "naive_attention"):
        assert OP.apply(NAIVE[name].source) is None, name
        kinds = [a.kind for a in OP.detect(NAIVE[name].source)]
        assert kinds == (["present"] if name in ("naive_softmax", "naive_rmsnorm") else []), (name, kinds)
    # loops over 2-D tiles (a column sum's row blocks, decode attention's keys x head dim): unrolled, the
    # block would be a whole 2-D extent in registers, not one row
    for name in ("column_sum", "decode_attention"):
        source = (ROOT / "heldout" / name / "naive.py").read_text()
        assert OP.apply(source) is None and not OP.applicable(source), name
    # a loop over the full chunks (bound n_full = (n // B) * B) without its tail branch: not a row pass
    softmax = OP.simplify((WORKLOADS / "softmax" / "expert.py").read_text())
    assert softmax is not None
    untailed = softmax.source.replace("        if n_full < n_cols:", "        if n_full < n_cols - 0:")
    assert OP.apply(untailed) is None
    with pytest.raises(ValueError, match="max_cols"):
        OP.apply(NAIVE["naive_looped_softmax"].source, max_cols=0)
    # already dispatched: not applicable again
    rw = OP.apply((FIXTURES / "naive_looped_rmsnorm.py").read_text())
    assert rw is not None and not OP.applicable(rw.source) and OP.apply(rw.source) is None
