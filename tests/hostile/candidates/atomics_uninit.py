"""Hostile: two programs per row atomically add their halves into an output that was never zeroed."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum_split(x_ptr, y_ptr, n_cols, HALF: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    cols = part * HALF + tl.arange(0, HALF)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + row, tl.sum(v, axis=0))


def run(x):
    rows, cols = x.shape
    y = torch.empty((rows,), device=x.device, dtype=torch.float32)
    half = triton.next_power_of_2((cols + 1) // 2)
    _rowsum_split[(rows, 2)](x, y, cols, HALF=half)
    return y.to(x.dtype)
