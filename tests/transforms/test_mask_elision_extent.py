"""mask-elision drops a boundary mask only where divisibility of the masked size proves every tile whole: the
index must come from loops over that size (or program ids), not from a loop over another extent."""

from __future__ import annotations

import torch

from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check

OP = get_operator("mask-elision")

# grid (rows, splits): each program sums CHUNK columns in BLOCK steps. With n_cols a multiple of BLOCK (64) but
# not of CHUNK (256), the last split's loop runs past n_cols: its mask is not a tile boundary of n_cols.
SPLIT_ROWSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def split_rowsum_kernel(x_ptr, out_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    start = tl.program_id(1) * CHUNK
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, CHUNK, BLOCK):
        cols = start + c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
        acc += x.to(tl.float32)
    tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0))


def run(x):
    n_rows, n_cols = x.shape
    out = torch.zeros((n_rows,), device=x.device, dtype=torch.float32)
    grid = (n_rows, triton.cdiv(n_cols, 256))
    split_rowsum_kernel[grid](x, out, n_cols, x.stride(0), CHUNK=256, BLOCK=64)
    return out
'''

# the same sum with one loop over the whole row: its mask is the row's last tile, elided when n_cols % BLOCK == 0
LOOPED_ROWSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def run(x):
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows,), device=x.device, dtype=torch.float32)
    rowsum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=64)
    return out
'''


def _case(source: str, cols: int) -> Case:
    g = torch.Generator().manual_seed(2)
    return Case("rowsum", source, lambda: [(torch.randn(3, cols, generator=g),)], lambda x: x.float().sum(1),
                rtol=1e-4, atol=1e-3)


def test_a_mask_over_another_extents_loop_is_kept() -> None:
    assert OP.apply(SPLIT_ROWSUM) is None
    assert not OP.applicable(SPLIT_ROWSUM)
    assert check(_case(SPLIT_ROWSUM, 320), SPLIT_ROWSUM) <= 1.0  # 320 = 5 x 64, not a multiple of 256


def test_a_mask_over_the_rows_own_loop_is_elided_and_stays_correct() -> None:
    rw = OP.apply(LOOPED_ROWSUM)
    assert rw is not None and 'args["n_cols"] % args["BLOCK"] == 0' in rw.source
    for cols in (320, 300, 64):  # divisible (the unmasked branch runs), not divisible, one tile
        assert check(_case(LOOPED_ROWSUM, cols), rw.source) <= 1.0, (cols, rw.diff)
