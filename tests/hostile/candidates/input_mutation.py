"""Hostile: writes the row sums into the first column of its input and returns a view of it."""
import triton
import triton.language as tl


@triton.jit
def _rowsum_inplace(x_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(x_ptr + row * n_cols, tl.sum(v, axis=0).to(x_ptr.dtype.element_ty))


def run(x):
    rows, cols = x.shape
    _rowsum_inplace[(rows,)](x, cols, BLOCK=triton.next_power_of_2(cols))
    return x[:, 0]
