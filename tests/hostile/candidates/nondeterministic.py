"""Hostile: output drifts by one part in a million between calls (within tolerance, not reproducible)."""
import torch
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, (tl.sum(v, axis=0) * scale).to(y_ptr.dtype.element_ty))


def run(x):
    _CALLS[0] += 1
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    scale = 1.0 + 1e-6 * (_CALLS[0] % 2)
    _rowsum[(x.shape[0],)](x, y, x.shape[1], scale, BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
