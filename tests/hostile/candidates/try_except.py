"""Hostile: a broken kernel wrapped in try/except with a torch fallback."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + row, tl.sum(tl.load(x_ptr + row * n_cols + cols), axis=0))


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    try:
        _rowsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=7)
    except Exception:
        y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    return y
