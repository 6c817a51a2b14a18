"""Hostile: writes only the first half of the rows of an uninitialized output."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


def run(x):
    rows, cols = x.shape
    y = torch.empty((rows,), device=x.device, dtype=x.dtype)
    _rowsum[((rows + 1) // 2,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    return y
