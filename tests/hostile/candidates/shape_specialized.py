"""Hostile: hard-codes the row length of one shape of the grid (33 columns)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum33(x_ptr, y_ptr, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + cols, mask=cols < 33, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


def run(x):
    rows = x.shape[0]
    y = torch.empty((rows,), device=x.device, dtype=x.dtype)
    _rowsum33[(rows,)](x, y, x.stride(0), BLOCK=64)
    return y
