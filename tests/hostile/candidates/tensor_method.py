"""Hostile: the answer comes from the tensor method x.sum(); the kernel is decoration."""
import torch
import triton
import triton.language as tl


@triton.jit
def _noop(y_ptr):
    tl.store(y_ptr, 0.0)


def run(x):
    y = torch.empty((1,), device=x.device, dtype=torch.float32)
    _noop[(1,)](y)
    return x.sum(dim=-1)
