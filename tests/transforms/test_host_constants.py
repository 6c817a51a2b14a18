"""Tile sizes written as a tuple assignment (``BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32``) or as
module-level constants (``BLOCK_M = 32`` at the top of the file) are resolved like separate locals:
tile-size and autotune find them, rewrite the right value (the other elements of a tuple stay as they
were), and every rewrite runs correctly under the interpreter on a shape not divisible by the tile.
num-warps, whose warps computed from such a tile are Triton's default, emits no no-op rewrite and
says why."""

from __future__ import annotations

import ast

import pytest
import torch

from klineage.transforms._triton import single_value
from klineage.transforms.facts import operator_anchors
from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check

AUTOTUNE, TILE, WARPS = get_operator("autotune"), get_operator("tile-size"), get_operator("num-warps")

GEMM = '''
import torch
import triton
import triton.language as tl
MODULE

@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
              stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    LOCAL
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    mm_kernel[grid](a, b, c, M, N, K,
                    a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return c
'''

FORMS = {
    "tuple": ("", "BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32"),
    "list": ("", "[BLOCK_M, BLOCK_N, BLOCK_K] = [32, 32, 32]"),
    "module": ("\nBLOCK_M = 32\nBLOCK_N = 32\nBLOCK_K = 32\n", ""),
    "module-tuple": ("\nBLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32\n", ""),
}


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _gemm(form: str) -> Case:
    module, local = FORMS[form]
    source = GEMM.replace("MODULE", module).replace("    LOCAL\n", f"    {local}\n" if local else "")
    return Case(
        f"gemm-{form}",
        source,
        lambda: [(torch.randn(150, 70, generator=_g(0)), torch.randn(70, 135, generator=_g(1)))],
        lambda a, b: a @ b,
        rtol=1e-3,
        atol=1e-3,
    )


@pytest.mark.parametrize("form", sorted(FORMS))
def test_tile_size_finds_and_rewrites_the_tiles(form: str) -> None:
    case = _gemm(form)
    assert check(case) <= 1.0
    assert any(a.kind == "applicable" for a in TILE.detect(case.source))
    rw = TILE.apply(case.source)
    assert rw is not None, form
    host = rw.source.split("def run")[1] if form in ("tuple", "list") else rw.source.split("@triton.jit")[0]
    # the output tiles double, the K step (the last element) is left as it was
    assert "64, 64, 32" in host or ("BLOCK_M = 64" in host and "BLOCK_N = 64" in host and "BLOCK_K = 32" in host)
    assert check(case, rw.source) <= 1.0, rw.diff
    t = TILE.apply(case.source, tiles={"tile_m": 16, "tile_n": 64, "tile_k": 16})
    assert t is not None, form
    assert "16, 64, 16" in t.source or "BLOCK_M = 16\nBLOCK_N = 64\nBLOCK_K = 16" in t.source, t.diff
    assert check(case, t.source) <= 1.0, t.diff


@pytest.mark.parametrize("form", sorted(FORMS))
def test_autotune_finds_and_tunes_the_tiles(form: str) -> None:
    case = _gemm(form)
    assert any(a.kind == "applicable" for a in AUTOTUNE.detect(case.source))
    rw = AUTOTUNE.apply(case.source)
    assert rw is not None, form
    host = rw.source.split("def run")[1]
    assert "META['BLOCK_M']" in host and "META['BLOCK_N']" in host and "BLOCK_M=BLOCK_M" not in host, rw.diff
    assert check(case, rw.source) <= 1.0, rw.diff
    anchors = operator_anchors(case.source)
    assert anchors["tile-size"]["state"] == "applicable"
    assert anchors["autotune"]["state"] == "applicable"


ELEMENTWISE = '''
import torch
import triton
import triton.language as tl

BLOCK = @SIZE@


@triton.jit
def k(X, Y, n, BLOCK_SIZE: tl.constexpr):
    i = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m = i < n
    v = tl.load(X + i, mask=m, other=0.0)
    tl.store(Y + i, v * 2.0 + 1.0, mask=m)


def run(x):
    y = torch.empty_like(x)
    k[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK_SIZE=BLOCK)
    return y
'''


def _elementwise(size: int) -> Case:
    return Case(
        f"elementwise-{size}",
        ELEMENTWISE.replace("@SIZE@", str(size)),
        lambda: [(torch.randn(3001, generator=_g(2)),)],
        lambda x: x * 2.0 + 1.0,
    )


def test_num_warps_at_the_default_is_no_rewrite_and_says_why() -> None:
    """512 elements per program: 512 // 256 = 2 -> the 4-warp floor, Triton's default already."""
    case = _elementwise(512)
    assert WARPS.detect(case.source) == []
    assert WARPS.apply(case.source) is None
    detail = operator_anchors(case.source)["num-warps"]
    assert detail["state"] == "absent"
    assert "default (4)" in detail["detail"] and "nowhere" not in detail["detail"], detail
    assert WARPS.absent_reason(case.source) is not None


def test_num_warps_reads_a_module_constant() -> None:
    """4096 elements per program: 16 warps, written as a literal (not an expression of BLOCK)."""
    case = _elementwise(4096)
    rw = WARPS.apply(case.source)
    assert rw is not None and "num_warps=16" in rw.source, rw and rw.diff
    assert WARPS.absent_reason(case.source) is None
    assert check(case, rw.source) <= 1.0


def test_autotune_of_a_module_constant_block() -> None:
    case = _elementwise(512)
    assert check(case) <= 1.0
    assert any(a.kind == "applicable" for a in AUTOTUNE.detect(case.source))
    rw = AUTOTUNE.apply(case.source)
    assert rw is not None
    assert "META['BLOCK_SIZE']" in rw.source and "BLOCK_SIZE=BLOCK" not in rw.source, rw.diff
    assert check(case, rw.source) <= 1.0, rw.diff


def _run(source: str) -> tuple[ast.Module, ast.FunctionDef]:
    tree = ast.parse(source)
    func = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "run")
    return tree, func


def _value(source: str, name: str) -> object:
    tree, func = _run(source)
    v = single_value(func, name, tree)
    return None if v is None else ast.literal_eval(v)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("A, B, C = 1, 2, 3", 2),
        ("(A, (B, C)) = (1, (2, 3))", 2),
        ("A, B = B0 = 1, 2", None),
        ("A, *B = 1, 2, 3", None),
        ("A, B = 1, 2, 3", None),
        ("A, B = pair", None),
        ("A, B = 1, 2\n    B = 5", None),
        ("B = 7", 7),
        ("B, B = 1, 2", None),
    ],
)
def test_tuple_assignments_resolve_element_wise(body: str, expected: object) -> None:
    assert _value(f"def run(x):\n    {body}\n    return B\n", "B") == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("B = 8\ndef run(x):\n    return B\n", 8),
        ("B = 8.0\ndef run(x):\n    return B\n", None),  # not an int
        ("B = 8\nB = 16\ndef run(x):\n    return B\n", None),  # bound twice
        ("B = 8\ndef run(x, B=4):\n    return B\n", None),  # a parameter shadows it
        ("B = 8\ndef run(x):\n    for B in x:\n        pass\n    return B\n", None),  # bound locally
        ("B = 8\ndef f():\n    global B\n    B = 1\ndef run(x):\n    return B\n", None),
        ("B = 8\ndef f():\n    B = 1\ndef run(x):\n    return B\n", 8),  # another function's local
        ("if x:\n    B = 8\ndef run(x):\n    return B\n", None),  # not a plain top-level assignment
    ],
)
def test_module_constants_resolve_when_unambiguous(source: str, expected: object) -> None:
    assert _value(source, "B") == expected
