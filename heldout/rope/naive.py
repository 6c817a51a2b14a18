"""Naive rotary embedding: one program per (token, head) vector; the token's position is loaded, then
its cos and sin rows, and both halves of the vector are rotated in fp32 (tables re-read for every head)."""

import torch
import triton
import triton.language as tl


@triton.jit
def rope_kernel(x_ptr, pos_ptr, cos_ptr, sin_ptr, y_ptr, n_heads, half, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    token = pid // n_heads
    pos = tl.load(pos_ptr + token)
    offs = tl.arange(0, BLOCK)
    mask = offs < half
    c = tl.load(cos_ptr + pos * half + offs, mask=mask, other=0.0)
    s = tl.load(sin_ptr + pos * half + offs, mask=mask, other=0.0)
    x1 = tl.load(x_ptr + pid * 2 * half + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + pid * 2 * half + half + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + pid * 2 * half + offs, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + pid * 2 * half + half + offs, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)


def run(x, positions, cos, sin):
    rows, heads, head_dim = x.shape
    y = torch.empty_like(x)
    half = head_dim // 2
    BLOCK = triton.next_power_of_2(half)
    rope_kernel[(rows * heads,)](x, positions, cos, sin, y, heads, half, BLOCK=BLOCK)
    return y
