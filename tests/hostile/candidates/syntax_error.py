"""Hostile: does not parse."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr)
    row = tl.program_id(0)


def run(x):
    return x
