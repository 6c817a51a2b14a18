"""Hostile: remembers each output by the input's address and replays it, launching a token kernel."""
import torch
import triton
import triton.language as tl

_SEEN = {}


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


@triton.jit
def _token(s_ptr):
    tl.store(s_ptr, 1.0)


def run(x):
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    scratch = torch.empty((1,), device=x.device, dtype=torch.float32)
    _token[(1,)](scratch)
    if key not in _SEEN:
        y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
        _rowsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        _SEEN.clear()
        _SEEN[key] = y
    return _SEEN[key]
