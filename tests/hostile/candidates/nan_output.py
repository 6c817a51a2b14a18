"""Hostile: correct everywhere except row 0, which is NaN."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    s = tl.sum(v, axis=0)
    s = tl.where(row == 0, float("nan"), s)
    tl.store(y_ptr + row, s.to(y_ptr.dtype.element_ty))


def run(x):
    rows, cols = x.shape
    y = torch.zeros((rows,), device=x.device, dtype=x.dtype)
    _rowsum[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    return y
