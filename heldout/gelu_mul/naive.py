"""Naive GEGLU gate: a 2-D grid (rows, 512-wide column blocks), one row segment per program, fp32
math with tl.erf."""

import torch
import triton
import triton.language as tl


@triton.jit
def gelu_mul_kernel(a_ptr, b_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    a = tl.load(a_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * a * (1.0 + tl.erf(a * 0.7071067811865476)) * b
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def run(a, b):
    M, N = a.shape
    y = torch.empty_like(a)
    grid = (M, triton.cdiv(N, 512))
    gelu_mul_kernel[grid](a, b, y, N, BLOCK=512)
    return y
