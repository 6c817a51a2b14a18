"""A pass does not vouch for code no checked call ran: the correctness gate names the kernels of a candidate
that the checked shapes never launched (a branch behind a threshold that the small CPU shapes never cross)."""

from __future__ import annotations

from pathlib import Path

from klineage.validator import LocalValidator
from klineage.validator.static import check_source

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"

# Rows up to 64 wide take one pass; longer rows a looped kernel that is wrong (it doubles the sum). The CPU
# shapes of the rowsum workload are 33 and 64 wide: the looped kernel never runs there.
TWO_PATHS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _load_row(base, cols, n_cols):
    return tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)


@triton.jit
def _short_rows(x_ptr, y_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.sum(_load_row(x_ptr + row * stride_x, cols, n_cols), axis=0)
    tl.store(y_ptr + row, total.to(y_ptr.dtype.element_ty))


@triton.jit
def _long_rows(x_ptr, y_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        acc += _load_row(x_ptr + row * stride_x, start + tl.arange(0, BLOCK), n_cols)
    tl.store(y_ptr + row, (2.0 * tl.sum(acc, axis=0)).to(y_ptr.dtype.element_ty))


def run(x):
    rows, cols = x.shape
    x = x.contiguous()
    y = torch.empty((rows,), device=x.device, dtype=x.dtype)
    if cols <= 64:
        _short_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=64)
    else:
        _long_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=256)
    return y
'''


def test_the_static_gate_tells_launched_kernels_from_jit_helpers() -> None:
    report = check_source(TWO_PATHS)
    assert report.ok, report.reason
    assert report.kernels == ["_load_row", "_long_rows", "_short_rows"]
    assert report.host_kernels == ["_long_rows", "_short_rows"]  # the helper is only called by kernels


def test_a_pass_names_the_kernels_the_checked_shapes_never_launched(tmp_path: Path) -> None:
    validator = LocalValidator(cache=None, device="cpu", seeds=1)
    result = validator.validate(TWO_PATHS, ROWSUM, ("static", "compile", "correctness"))
    correctness = next(g for g in result.gates if g.gate == "correctness")
    assert result.verdict == "pass" and correctness.status == "pass"  # the workload's CPU shapes are right
    assert correctness.metrics["kernels_never_launched"] == ["_long_rows"]
    assert "unchecked: kernel(s) _long_rows never launched on these 2 shape(s)" in correctness.reason
    wide = validator.validate(TWO_PATHS, ROWSUM, ("static", "compile", "correctness"),
                              shapes=[{"rows": 3, "cols": 300}])
    assert wide.verdict == "fail" and "relative error" in next(g for g in wide.gates if g.gate == "correctness").reason
    honest = (ROWSUM / "kernel.py").read_text()
    plain = validator.validate(honest, ROWSUM, ("static", "compile", "correctness"))
    checked = next(g for g in plain.gates if g.gate == "correctness")
    assert plain.verdict == "pass" and "kernels_never_launched" not in checked.metrics
    assert "unchecked" not in checked.reason
