"""Hostile: sums the columns with tensor '+' in host code; the kernel only writes a scratch value."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(s_ptr):
    tl.store(s_ptr, 1.0)


def run(x):
    scratch = torch.empty((1,), device=x.device, dtype=torch.float32)
    _touch[(1,)](scratch)
    acc = x[:, 0].to(torch.float64)
    for j in range(1, x.shape[1]):
        acc = acc + x[:, j].to(torch.float64)
    return acc.to(x.dtype)
