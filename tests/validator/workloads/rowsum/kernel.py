"""A plain row-sum kernel: one program per row, fp32 accumulation over BLOCK-wide chunks."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum_kernel(x_ptr, y_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_x
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def run(x: torch.Tensor) -> torch.Tensor:
    """Row sums of a row-major x, in x's dtype."""
    rows, cols = x.shape
    x = x.contiguous()
    y = torch.empty((rows,), device=x.device, dtype=x.dtype)
    block = min(triton.next_power_of_2(cols), 4096)
    _rowsum_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return y
