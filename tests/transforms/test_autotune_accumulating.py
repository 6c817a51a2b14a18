"""autotune on a kernel that adds into its output: the autotuner runs the kernel once per config before the
real call, so memory the kernel adds into (tl.atomic_add, or a load and a store of one pointer) is put back
after each tuning run (Triton's ``restore_value``); without it the caller gets the sum many times over."""

from __future__ import annotations

import torch

from klineage.transforms.operators.autotune import accumulated_params
from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check

OP = get_operator("autotune")

# A column sum by 2-D tiles: every program adds its tile's column sums into out (zeroed by run).
ATOMIC_COLSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def colsum_kernel(x_ptr, out_ptr, R, C, stride_r, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    m = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(x_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0)
    tl.atomic_add(out_ptr + cols, tl.sum(x.to(tl.float32), axis=0), mask=cols < C)


def run(x):
    R, C = x.shape
    out = torch.zeros((C,), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(C, 64), triton.cdiv(R, 32))
    colsum_kernel[grid](x, out, R, C, x.stride(0), BLOCK_R=32, BLOCK_C=64)
    return out
'''

# The same sum written as read-modify-write through a local pointer (one program per row block, in turn).
RMW_ROWS = ATOMIC_COLSUM.replace(
    "    tl.atomic_add(out_ptr + cols, tl.sum(x.to(tl.float32), axis=0), mask=cols < C)\n",
    "    dst = out_ptr + cols\n"
    "    tl.store(dst, tl.load(dst, mask=cols < C, other=0.0) + tl.sum(x.to(tl.float32), axis=0), mask=cols < C)\n",
).replace("triton.cdiv(R, 32))", "1)").replace("    rows = tl.program_id(1) * BLOCK_R", "    rows = BLOCK_R * 0")


def _case(source: str, rows: int) -> Case:
    g = torch.Generator().manual_seed(11)
    return Case("colsum", source, lambda: [(torch.randn(rows, 150, generator=g),)], lambda x: x.float().sum(0),
                rtol=1e-4, atol=1e-3)


def test_a_kernel_that_adds_into_its_output_is_autotuned_with_restore_value() -> None:
    rw = OP.apply(ATOMIC_COLSUM)
    assert rw is not None and "restore_value=['out_ptr']" in rw.source
    assert check(_case(ATOMIC_COLSUM, 70), rw.source) <= 1.0, rw.diff  # every tuning run put back
    unrestored = rw.source.replace("    restore_value=['out_ptr'],\n", "")
    assert check(_case(ATOMIC_COLSUM, 70), unrestored) > 1.0  # what the keyword prevents: the sum added again
    back = OP.simplify(rw.source)  # pinned, no tuning run is left to undo: restore_value goes with the decorator
    assert back is not None and "autotune" not in back.source and "restore_value" not in back.source
    assert check(_case(ATOMIC_COLSUM, 70), back.source) <= 1.0, back.diff
    again = OP.apply(back.source, **back.params)
    assert again is not None and again.source == rw.source


def test_read_modify_write_through_a_local_counts_and_plain_writes_do_not() -> None:
    from klineage.transforms._module import parse

    module = parse(RMW_ROWS)
    assert module is not None
    assert accumulated_params(module, module.launched[0]) == ["out_ptr"]
    plain = ATOMIC_COLSUM.replace("tl.atomic_add(out_ptr + cols,", "tl.store(out_ptr + cols,")
    written = parse(plain)
    assert written is not None and accumulated_params(written, written.launched[0]) == []
    rw = OP.apply(plain)
    assert rw is not None and "restore_value" not in rw.source
