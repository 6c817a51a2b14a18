"""Naive key-padding masked softmax: one score row per program, the whole row in one block; the row's
batch length is loaded, keys at or past it are set to -inf before the max, and written as 0."""

import torch
import triton
import triton.language as tl


@triton.jit
def masked_softmax_kernel(x_ptr, len_ptr, y_ptr, rows_per_batch, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    length = tl.load(len_ptr + row // rows_per_batch)
    cols = tl.arange(0, BLOCK)
    valid = cols < length
    x = tl.load(x_ptr + row * n_cols + cols, mask=valid, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.where(valid, tl.exp(x - m), 0.0)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def run(x, lengths):
    batch, heads, n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(n_cols)
    grid = (batch * heads * n_rows,)
    masked_softmax_kernel[grid](x, lengths, y, heads * n_rows, n_cols, BLOCK=BLOCK)
    return y
