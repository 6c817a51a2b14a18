"""Hostile: sums the columns with tensor '+' in host code (pairwise halving); the kernel only writes a scratch value."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(s_ptr):
    tl.store(s_ptr, 1.0)


def run(x):
    scratch = torch.empty((1,), device=x.device, dtype=torch.float32)
    _touch[(1,)](scratch)
    acc = x.to(torch.float64)
    while acc.shape[1] > 1:
        half = acc.shape[1] // 2
        rest = acc[:, 2 * half:]
        acc = acc[:, :half] + acc[:, half:2 * half]
        if rest.shape[1] > 0:
            acc[:, :1] = acc[:, :1] + rest
    return acc[:, 0].to(x.dtype)
