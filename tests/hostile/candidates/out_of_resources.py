"""Hostile (honest mistake): row sums as x @ ones with a pinned 5-stage 128x256 tile, far beyond shared memory."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum_dot(x_ptr, y_ptr, rows, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ones = tl.full((BLOCK_K, 16), 1.0, dtype=tl.float32).to(x_ptr.dtype.element_ty)
    acc = tl.zeros((BLOCK_M, 16), dtype=tl.float32)
    for k in tl.range(0, n_cols, BLOCK_K, num_stages=5):
        ck = k + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * stride + ck[None, :],
                    mask=(rm[:, None] < rows) & (ck[None, :] < n_cols), other=0.0)
        acc = tl.dot(a, ones, acc)
    s = tl.sum(acc, axis=1) / 16.0
    tl.store(y_ptr + rm, s.to(y_ptr.dtype.element_ty), mask=rm < rows)


def run(x):
    rows, cols = x.shape
    y = torch.empty((rows,), device=x.device, dtype=x.dtype)
    _rowsum_dot[(triton.cdiv(rows, 128),)](x, y, rows, cols, x.stride(0), BLOCK_M=128, BLOCK_K=256,
                                           num_warps=8)
    return y
