"""Naive grouped-query attention: one 16-query block per program (grid: query blocks, batch·heads),
an online softmax over every 16-key block of the program's KV head (head // group), acc += tl.dot."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def gqa_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_heads, n_kv_heads, seq_len, scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    batch = bh // n_heads
    head = bh % n_heads
    kv_head = head // (n_heads // n_kv_heads)
    q_base = bh * seq_len * HEAD_DIM
    kv_base = (batch * n_kv_heads + kv_head) * seq_len * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq_len,
                other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + kv_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=offs_n[:, None] < seq_len, other=0.0)
        v = tl.load(v_ptr + kv_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=offs_n[:, None] < seq_len, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(offs_n[None, :] < seq_len, s, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


def run(q, k, v):
    batch, heads, seq_len, head_dim = q.shape
    kv_heads = k.shape[1]
    o = torch.empty_like(q)
    grid = (triton.cdiv(seq_len, 16), batch * heads)
    gqa_attention_kernel[grid](q, k, v, o, heads, kv_heads, seq_len, 1.0 / math.sqrt(head_dim),
                               BLOCK_M=16, BLOCK_N=16, HEAD_DIM=head_dim)
    return o
