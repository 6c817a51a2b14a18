"""Honest: correct but slow row sums (16 elements at a time, one warp per row)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum_slow(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def run(x):
    rows, cols = x.shape
    x = x.contiguous()
    y = torch.empty((rows,), device=x.device, dtype=x.dtype)
    _rowsum_slow[(rows,)](x, y, cols, x.stride(0), BLOCK=16, num_warps=1)
    return y
