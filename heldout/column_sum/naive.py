"""Naive column sum: one program per 128 columns, a loop over the rows in [32, 128] tiles, each tile
summed over axis 0 into an fp32 accumulator."""

import torch
import triton
import triton.language as tl


@triton.jit
def column_sum_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=cols < N)


def run(x):
    M, N = x.shape
    out = torch.empty((N,), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(N, 128),)
    column_sum_kernel[grid](x, out, M, N, BLOCK_M=32, BLOCK_N=128)
    return out
