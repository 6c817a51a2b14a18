"""Hostile: the answer comes from torch.sum; a kernel is launched only for show."""
import torch
import triton
import triton.language as tl


@triton.jit
def _noop(y_ptr):
    tl.store(y_ptr, 0.0)


def run(x):
    y = torch.empty((1,), device=x.device, dtype=torch.float32)
    _noop[(1,)](y)
    return torch.sum(x, dim=-1)
