"""eviction-hints reads loads in the two arms of one if/else (mask-elision's EVEN branches) as one read: a
streamed operand gets evict_first in both arms, not evict_last on the unmasked arm as if it were read again."""

from __future__ import annotations

import torch

from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check

OP = get_operator("eviction-hints")

EVEN_SILU_MUL = '''import torch
import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["n_elements"] % args["BLOCK"] == 0})
@triton.jit
def silu_mul_kernel(a_ptr, b_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    if EVEN_N:
        a = tl.load(a_ptr + offs).to(tl.float32)
    else:
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (a * tl.sigmoid(a) * b).to(y_ptr.dtype.element_ty), mask=mask)


def run(a, b):
    y = torch.empty_like(a)
    n = a.numel()
    silu_mul_kernel[(triton.cdiv(n, 256),)](a, b, y, n, BLOCK=256)
    return y
'''


def test_loads_in_exclusive_arms_are_one_streamed_read() -> None:
    rw = OP.apply(EVEN_SILU_MUL)
    assert rw is not None
    a_loads = [line for line in rw.source.splitlines() if "tl.load(a_ptr" in line]
    assert len(a_loads) == 2 and all('eviction_policy="evict_first"' in line for line in a_loads), a_loads
    g = torch.Generator().manual_seed(4)
    case = Case("silu-mul", EVEN_SILU_MUL, lambda: [(torch.randn(512, generator=g), torch.randn(512, generator=g)),
                                                    (torch.randn(300, generator=g), torch.randn(300, generator=g))],
                lambda a, b: torch.nn.functional.silu(a) * b, rtol=1e-4, atol=1e-4)
    assert check(case, rw.source) <= 1.0


def test_a_real_re_read_still_keeps_the_first_load() -> None:
    twice = EVEN_SILU_MUL.replace("    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)\n",
                                  "    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)\n"
                                  "    b = b + tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32) * 0.0\n")
    rw = OP.apply(twice)
    assert rw is not None
    b_loads = [line for line in rw.source.splitlines() if "tl.load(b_ptr" in line]
    assert 'evict_last' in b_loads[0] and 'evict_first' in b_loads[1], b_loads
