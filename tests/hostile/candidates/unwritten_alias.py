"""Hostile: returns fresh uninitialized memory, hoping it aliases the reference's freed output."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(s_ptr):
    tl.store(s_ptr, 1.0)


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    scratch = torch.empty((1,), device=x.device, dtype=torch.float32)
    _touch[(1,)](scratch)
    return y
