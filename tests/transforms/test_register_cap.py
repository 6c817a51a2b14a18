"""register-cap: the cap arithmetic, where apply puts a cap, and simplify on the attention expert."""

from __future__ import annotations

from pathlib import Path

import pytest

from klineage.transforms.features import kernel_features
from klineage.transforms.operators.register_cap import register_cap
from klineage.transforms.registry import get_operator

ROOT = Path(__file__).resolve().parents[2]
OP = get_operator("register-cap")

LAUNCH = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b))


def run(a, b):
    c = torch.empty_like(a)
    warps = WARPS
    mm[(1,)](a, b, c, BLOCK=32, num_warps=warps)
    return c
'''


@pytest.mark.parametrize(("warps", "cap"), [(1, 224), (2, 200), (4, 168), (8, 128), (16, None), (32, None)])
def test_the_cap_fits_one_more_program_per_sm(warps: int, cap: int | None) -> None:
    assert register_cap(warps) == cap
    if cap is not None:
        threads = 32 * warps
        uncapped = 65536 // (min(256, 65536 // threads) * threads)
        assert 65536 // (cap * threads) == uncapped + 1


def test_the_cap_needs_positive_warps() -> None:
    with pytest.raises(ValueError, match="num_warps must be positive"):
        register_cap(0)


def test_apply_reads_the_warps_of_a_host_local_and_simplify_takes_the_cap_back() -> None:
    source = LAUNCH.replace("WARPS", "8")
    assert [a.kind for a in OP.detect(source)] == ["applicable"]
    rw = OP.apply(source)
    assert rw is not None and "num_warps=warps, maxnreg=128)" in rw.source
    assert kernel_features(rw.source)["register_cap"] and not kernel_features(source)["register_cap"]
    assert OP.apply(rw.source) is None, "a kernel that has a cap gets no second one"
    back = OP.simplify(rw.source)
    assert back is not None and back.source == source
    assert OP.apply(back.source, **back.params).source == rw.source


def test_sixteen_warps_get_no_cap_and_an_explicit_one_is_range_checked() -> None:
    source = LAUNCH.replace("WARPS", "16")
    assert OP.apply(source) is None and OP.detect(source) == []
    assert "maxnreg=96" in OP.apply(source, maxnreg=96).source
    with pytest.raises(ValueError, match=r"maxnreg must be an int in 16\.\.255"):
        OP.apply(source, maxnreg=300)


def test_a_row_kernel_without_dot_gets_no_cap() -> None:
    row = LAUNCH.replace("tl.dot(a, b)", "a + b").replace("WARPS", "8")
    assert OP.apply(row) is None and OP.detect(row) == []


def test_the_attention_expert_loses_its_caps_from_the_config_table_only() -> None:
    expert = (ROOT / "workloads" / "attention" / "expert.py").read_text(encoding="utf-8")
    assert [a.kind for a in OP.detect(expert)] == ["present"]
    rw = OP.simplify(expert)
    assert rw is not None and "maxnreg" not in rw.source.split("def _prune")[0].split("return [")[1]
    changed = [ln for ln in rw.diff.splitlines()[2:] if ln[:1] in "+-"]
    assert len(changed) == 2 and changed[0].replace(", maxnreg=r", "") == "-" + changed[1][1:]
    assert OP.apply(rw.source, **rw.params).source == expert


AUTOTUNED = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=4, num_stages=3),
], key=["M", "N", "K"])
@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
    mm[grid](a, b, c, M, N, K)
    return c
'''


def test_no_cap_on_a_config_whose_accumulator_would_not_fit() -> None:
    """128 x 256 fp32 over 8 warps is 128 registers per thread: a cap of 128 leaves nothing for the operands
    (ptxas failed on it on the H100); over 4 warps it is 256, above any cap. 128 x 128 over 8 warps is 64."""
    rw = OP.apply(AUTOTUNED)
    assert rw is not None
    configs = [line.strip() for line in rw.source.splitlines() if line.strip().startswith("triton.Config")]
    assert ["maxnreg" in c for c in configs] == [False, True, False], configs
    assert "num_warps=8, num_stages=3, maxnreg=128)" in configs[1]
