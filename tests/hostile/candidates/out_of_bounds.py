"""Hostile: reads far outside its input (an illegal address on the GPU)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    far = (row.to(tl.int64) + 1) << 40
    v = tl.load(x_ptr + far + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _rowsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
