"""Hostile (class 5): reads an arbitrary file through a file-backed storage and leaks its bytes in the
gate reason (an exception message)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


def run(x):
    leaked = x.untyped_storage().from_file("/etc/hostname", False, 8)
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _rowsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    if y.shape[0] > 0:
        raise ValueError(str(leaked.tolist()))
    return y
