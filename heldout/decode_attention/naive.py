"""Naive decode attention: one program per (batch, head); a first pass over 64-key blocks finds the
maximum score, a second pass recomputes the scores and accumulates exp-weights and values (K is read
twice); scores and the weighted sum are broadcast products reduced with tl.sum (no tl.dot)."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def decode_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale,
                            BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bh = tl.program_id(0)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * HEAD_DIM + offs_d).to(tl.float32)
    base = bh * seq_len * HEAD_DIM
    m = -float("inf")
    for start in range(0, seq_len, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < seq_len,
                    other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(offs_n < seq_len, s, -float("inf"))
        m = tl.maximum(m, tl.max(s, axis=0))
    denom = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < seq_len,
                    other=0.0).to(tl.float32)
        v = tl.load(v_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < seq_len,
                    other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        p = tl.where(offs_n < seq_len, tl.exp(s - m), 0.0)
        denom = denom + tl.sum(p, axis=0)
        acc = acc + tl.sum(p[:, None] * v, axis=0)
    out = acc / denom
    tl.store(o_ptr + bh * HEAD_DIM + offs_d, out.to(o_ptr.dtype.element_ty))


def run(q, k, v):
    batch, heads, head_dim = q.shape
    seq_len = k.shape[2]
    o = torch.empty_like(q)
    BLOCK_N = 64
    decode_attention_kernel[(batch * heads,)](q, k, v, o, seq_len, 1.0 / math.sqrt(head_dim),
                                              BLOCK_N=BLOCK_N, HEAD_DIM=head_dim)
    return o
