"""Hostile (class 3): does the work in host code inside a context that disables dispatch modes, so the
host-code audit does not see it (no Triton kernel computes anything)."""
import torch
import triton
import triton.language as tl

D = torch._C._DisableTorchDispatch


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32).to(y_ptr.dtype.element_ty), mask=offs < n)


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _zeros[(1,)](y, x.shape[0], BLOCK=triton.next_power_of_2(x.shape[0]))
    with D():
        y = x.float().sum(-1).to(x.dtype)
    return y
