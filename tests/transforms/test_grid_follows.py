"""Autotune and tile-size never leave a launch grid counting with the old tile, and take portable
(role-term) parameters. Every rewrite that is emitted runs under the interpreter on shapes larger
than one tile and not divisible by it; what cannot be paired is refused (None)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from klineage.transforms.portable import kernel_params, portable_params
from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check, naive_cases

ROOT = Path(__file__).resolve().parents[2]
AUTOTUNE, TILE = get_operator("autotune"), get_operator("tile-size")
GEMM_CONFIGS = kernel_params((ROOT / "workloads" / "gemm" / "expert.py").read_text())["configs"]

SILU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def k(a_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, a * 2.0 + 1.0, mask=mask)


def run(a):
    n = a.numel()
    y = torch.empty_like(a)
    GRID
    return y
'''

LAUNCHES = {
    "cdiv": "k[(triton.cdiv(n, 64),)](a, y, n, BLOCK=64)",
    "add": "k[((n + 63) // 64,)](a, y, n, BLOCK=64)",
    "add-minus-one": "k[((n + 64 - 1) // 64,)](a, y, n, BLOCK=64)",
    "named-local": "BLOCK = 64\n    grid = (triton.cdiv(n, BLOCK),)\n    k[grid](a, y, n, BLOCK=BLOCK)",
    "other-local": "B = 64\n    grid = (triton.cdiv(n, B),)\n    k[grid](a, y, n, BLOCK=64)",
    # a host local divided by a constant that is no tile (a packed layout's half): it counts no tiles
    "packed-local": "m = (2 * n) // 2\n    k[(triton.cdiv(m, 64),)](a, y, m, BLOCK=64)",
}
REFUSED = {
    "floor-div": "k[(n // 64,)](a, y, n, BLOCK=64)",
    "other-literal": "k[(triton.cdiv(n, 32),)](a, y, n, BLOCK=64)",
    "hidden-in-a-local": "tiles = triton.cdiv(n, 64)\n    k[(tiles,)](a, y, n, BLOCK=64)",
    "tile-division-in-a-local": "tiles = (n + 63) // 64\n    k[(tiles,)](a, y, n, BLOCK=64)",
}


def _silu(launch: str) -> Case:
    return Case(
        "silu-like",
        SILU.replace("GRID", launch),
        lambda: [(torch.randn(1001, generator=torch.Generator().manual_seed(0)),)],
        lambda a: a * 2.0 + 1.0,
    )


@pytest.mark.parametrize("form", sorted(LAUNCHES))
def test_a_literal_grid_follows_the_tile(form: str) -> None:
    case = _silu(LAUNCHES[form])
    assert check(case) <= 1.0
    for cfg in ({"block": 256}, {"block": 16}):
        rw = AUTOTUNE.apply(case.source, configs=[{**cfg, "num_warps": 4}])
        assert rw is not None, form
        host = rw.source.split("def run")[1]
        assert "META['BLOCK']" in host and ", 64)" not in host and "// 64" not in host, rw.diff
        assert check(case, rw.source) <= 1.0, rw.diff
        t = TILE.apply(case.source, tiles=cfg)
        assert t is not None, form
        assert check(case, t.source) <= 1.0, t.diff


@pytest.mark.parametrize("form", sorted(REFUSED))
def test_an_unpaired_grid_is_refused(form: str) -> None:
    source = _silu(REFUSED[form]).source
    assert AUTOTUNE.apply(source) is None
    assert AUTOTUNE.apply(source, configs=[{"block": 256}]) is None
    assert TILE.apply(source, tiles={"block": 256}) is None


def test_ambiguous_pairing_is_refused() -> None:
    """Two tiles partition offsets compared with the same bound, both 64: the grid literal could be
    either; nothing is emitted."""
    source = SILU.replace(
        "def k(a_ptr, y_ptr, n, BLOCK: tl.constexpr):",
        "def k(a_ptr, y_ptr, n, BLOCK: tl.constexpr, OTHER: tl.constexpr):",
    ).replace(
        "    mask = offs < n\n",
        "    mask = offs < n\n    o2 = pid * OTHER + tl.arange(0, OTHER)\n    mask = mask & (o2 < n)\n",
    ).replace("GRID", "k[(triton.cdiv(n, 64),)](a, y, n, BLOCK=64, OTHER=64)")
    assert AUTOTUNE.apply(source, configs=[{"BLOCK": 128}]) is None
    assert TILE.apply(source, tiles={"BLOCK": 128}) is None


def test_a_kernel_without_masks_is_refused() -> None:
    """No comparison and no cdiv in the kernel: the literal cannot be paired with a tile."""
    source = SILU.replace("    mask = offs < n\n", "    mask = offs >= 0\n").replace(
        "GRID", "k[(triton.cdiv(n, 64),)](a, y, n, BLOCK=64)"
    )
    assert AUTOTUNE.apply(source, configs=[{"block": 256}]) is None
    assert TILE.apply(source, tiles={"block": 256}) is None


# ------------------------------------------------------------------ fixtures on non-divisible shapes

def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


GROWN = {
    "naive_gemm": lambda: [(torch.randn(300, 70, generator=_g(0)), torch.randn(70, 270, generator=_g(1)))],
    "naive_linear": lambda: [
        (
            torch.randn(261, 72, generator=_g(2)),
            torch.randn(270, 72, generator=_g(3)),
            torch.randn(270, generator=_g(4)),
        )
    ],
    "naive_gelu": lambda: [(torch.randn(3001, generator=_g(5)),)],
    "naive_rowsum": lambda: [(torch.randn(37, 50, generator=_g(6)),)],
    "naive_cumsum": lambda: [(torch.randn(301, generator=_g(7)),)],
}


def _grown(name: str) -> Case:
    c = naive_cases()[name]
    return Case(c.name, c.source, GROWN[name], c.reference, rtol=1e-3, atol=1e-3)


def _pinned(source: str) -> list[dict]:
    """The GEMM expert's configs, one at a time, each distinct tile shape once (warps and stages do
    not change what the interpreter computes)."""
    seen, out = set(), []
    for cfg in GEMM_CONFIGS:
        tiles = tuple(sorted((k, v) for k, v in cfg.items() if k.startswith("tile")))
        if tiles not in seen:
            seen.add(tiles)
            out.append(cfg)
    return out


@pytest.mark.parametrize("name", sorted(GROWN))
def test_role_configs_on_fixture_kernels_pass_on_non_divisible_shapes(name: str) -> None:
    case = _grown(name)
    assert check(case) <= 1.0
    emitted = 0
    row_cfgs = [{"block": 512, "num_warps": 4}, {"block_cols": 64, "rows_per_program": 4},
                {"rows_per_program": 8, "block_cols": 32}]
    for cfg in _pinned(case.source) + row_cfgs:
        rw = AUTOTUNE.apply(case.source, configs=[cfg])
        if rw is not None:
            emitted += 1
            assert check(case, rw.source) <= 1.0, f"{name} {cfg}\n{rw.diff}"
        tiles = {k: v for k, v in cfg.items() if not k.startswith("num_")}
        t = TILE.apply(case.source, tiles=tiles)
        if t is not None:
            emitted += 1
            assert check(case, t.source) <= 1.0, f"{name} {tiles}\n{t.diff}"
    assert emitted, f"nothing applied to {name}"


def test_autotune_drops_configs_that_break_a_static_assert() -> None:
    source = (ROOT / "tests" / "fixtures" / "kernels" / "naive_gemm.py").read_text().replace(
        "    pid = tl.program_id(0)", "    tl.static_assert(BLOCK_M >= BLOCK_N)\n    pid = tl.program_id(0)", 1
    )
    rw = AUTOTUNE.apply(source, configs=[{"tile_m": 64, "tile_n": 128}, {"tile_m": 128, "tile_n": 64}])
    assert rw is not None
    assert "'BLOCK_M': 128, 'BLOCK_N': 64" in rw.source and "'BLOCK_M': 64, 'BLOCK_N': 128" not in rw.source
    assert AUTOTUNE.apply(source, configs=[{"tile_m": 64, "tile_n": 128}]) is None
    assert TILE.apply(source, tiles={"tile_m": 64, "tile_n": 128}) is None


def test_bad_portable_parameters_are_rejected() -> None:
    src = naive_cases()["naive_gemm"].source
    with pytest.raises(ValueError, match="configs"):
        AUTOTUNE.apply(src, configs=[])
    with pytest.raises(ValueError, match="key"):
        AUTOTUNE.apply(src, configs=[{"tile_m": 64}], key="M")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tiles"):
        TILE.apply(src, tiles={"tile_m": 0})
    with pytest.raises(ValueError, match="warps"):
        get_operator("num-warps").apply(src, warps=3)
    with pytest.raises(ValueError, match="stages"):
        get_operator("pipelining").apply(src, stages=0)


def test_warps_stages_and_group_size_in_portable_terms() -> None:
    case = naive_cases()["naive_gemm"]
    w = get_operator("num-warps").apply(case.source, warps=8)
    assert w is not None and "num_warps=8" in w.source and check(case, w.source) <= 1.0
    w2 = get_operator("num-warps").apply(w.source, warps=2)
    assert w2 is not None and "num_warps=2" in w2.source and "num_warps=8" not in w2.source
    s = get_operator("pipelining").apply(case.source, stages=3)
    assert s is not None and "num_stages=3" in s.source
    g = get_operator("grouped-order").apply(case.source, group_size_m=4)
    assert g is not None and "= 4" in g.source and check(case, g.source) <= 1.0
    at = AUTOTUNE.apply(case.source, configs=[{"tile_m": 32, "tile_n": 32, "tile_k": 16, "num_stages": 2}], key=["M"])
    assert at is not None and "key=['M']" in at.source and "num_stages=2" in at.source


def test_portable_params_of_the_lineage_steps() -> None:
    """Every tuning step of the lineage documents gives its parameters in role terms, and those
    parameters are accepted by the operator's portable apply on a held-out kernel."""
    bmm = (ROOT / "heldout" / "bmm" / "naive.py").read_text()
    seen = set()
    for path in sorted((ROOT / "lineages").glob("*.lineage.json")):
        doc = json.loads(path.read_text())
        by_sha = {k["sha"]: k["source"] for k in doc["kernels"]}
        for st in doc["steps"]:
            if not st["accepted"]:
                continue
            got = portable_params(st["operator"], by_sha[st["from"]], by_sha[st["to"]])
            if st["operator"] == "autotune":
                assert got["configs"] and all("tile_m" in c for c in got["configs"]), path.name
                assert AUTOTUNE.apply(bmm, configs=got["configs"]) is not None
            elif st["operator"] == "tile-size":
                assert set(got["tiles"]) <= {"tile_m", "tile_n", "tile_k"} and got["tiles"]
                assert TILE.apply(bmm, tiles=got["tiles"]) is not None
            elif st["operator"] == "num-warps":
                assert isinstance(got["warps"], int)
                assert get_operator("num-warps").apply(bmm, warps=got["warps"]) is not None
            elif st["operator"] == "pipelining":
                assert isinstance(got["stages"], int)
            elif st["operator"] == "grouped-order":
                assert got["group_size_m"] > 1
            elif st["operator"] == "eviction-hints":
                assert got["eviction_policies"]
            seen.add(st["operator"])
    assert {"autotune", "tile-size", "num-warps"} <= seen
    with pytest.raises(ValueError, match="unknown operator"):
        portable_params("no-such-op", bmm, bmm)
    assert portable_params("exp2", bmm, bmm) == {}


def test_a_grid_shared_with_another_launch_is_left_alone() -> None:
    """The matmul and its epilogue kernel share one grid local: moving the matmul's tile would change
    the other launch's program count too."""
    source = naive_cases()["naive_matmul_epilogue"].source
    assert AUTOTUNE.apply(source) is None
    assert AUTOTUNE.apply(source, configs=[{"tile_m": 64, "tile_n": 64}]) is None
    assert TILE.apply(source) is None and TILE.apply(source, tiles={"tile_m": 64}) is None


def test_a_block_that_covers_a_whole_row_is_not_moved() -> None:
    """A single-pass row kernel with a literal block: the block is not partitioned and steps no loop,
    so no role config or tile change may touch it (it must cover the row)."""
    source = naive_cases()["naive_softmax"].source.replace("BLOCK=BLOCK)", "BLOCK=128)")
    assert "BLOCK=128)" in source
    rw = AUTOTUNE.apply(source, configs=[{"block_cols": 32, "num_warps": 8}])
    assert rw is None or "'BLOCK'" not in rw.source
    assert TILE.apply(source, tiles={"block_cols": 32}) is None


def test_warps_a_launch_computes_are_never_left_beside_autotune_configs() -> None:
    """Every triton.Config sets num_warps, num_stages and num_ctas, and Triton refuses a launch that passes one
    of them as well (got multiple values for keyword argument): a launch that computes its warps is refused;
    a literal value joins every config and leaves the launch (the kernel still computes the same)."""
    computed = _silu("k[(triton.cdiv(n, 64),)](a, y, n, BLOCK=64, num_warps=max(4, n // 100000))")
    assert AUTOTUNE.apply(computed.source) is None
    assert AUTOTUNE.apply(computed.source, configs=[{"block": 128, "num_warps": 8}]) is None
    literal = _silu("k[(triton.cdiv(n, 64),)](a, y, n, BLOCK=64, num_warps=2)")
    rw = AUTOTUNE.apply(literal.source)
    assert rw is not None
    host = rw.source.split("def run")[1]
    assert "num_warps" not in host and "num_warps=2" in rw.source.split("def run")[0], rw.diff
    assert check(literal, rw.source) <= 1.0, rw.diff


BLOCK_POINTER_GEMM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bp_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K), (1, 0))
    b_bp = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                             offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_bp = tl.advance(a_bp, (0, BLOCK_K))
        b_bp = tl.advance(b_bp, (BLOCK_K, 0))
    c_bp = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                             offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    tl.store(c_bp, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    bp_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


def test_a_block_pointer_gemm_takes_the_experts_tiles() -> None:
    """A GEMM written with ``tl.make_block_ptr`` (positional and keyword) never calls ``tl.arange``: its tiles
    are the block shapes. Autotune with the GEMM expert's configs and tile-size both apply, the grid counts
    with the new tiles (the block pointer's shape bounds them as a mask would), and every emitted kernel is
    right on a shape no tile divides. (Seen: neither applied, while the plan listed the config set first.)"""
    from klineage.transforms.operators._roles import tile_roles

    assert tile_roles(BLOCK_POINTER_GEMM)["bp_kernel"] == {"BLOCK_M": "tile_m", "BLOCK_N": "tile_n",
                                                           "BLOCK_K": "tile_k"}
    case = Case("block-pointer-gemm", BLOCK_POINTER_GEMM,
                lambda: [(torch.randn(150, 70, generator=_g(0)), torch.randn(70, 135, generator=_g(1)))],
                lambda a, b: a @ b, rtol=1e-3, atol=1e-3)
    assert check(case) <= 1.0
    pinned = [c for c in _pinned(case.source) if c.get("tile_m", 0) <= 64] or _pinned(case.source)[-1:]
    for cfg in pinned:
        rw = AUTOTUNE.apply(case.source, configs=[cfg])
        assert rw is not None, cfg
        host = rw.source.split("def run")[1]
        assert "META['BLOCK_M']" in host and "META['BLOCK_N']" in host and ", 32)" not in host, rw.diff
        assert check(case, rw.source) <= 1.0, f"{cfg}\n{rw.diff}"
    t = TILE.apply(case.source, tiles={"tile_m": 64, "tile_n": 64, "tile_k": 16})
    assert t is not None
    assert "BLOCK_M=64" in t.source and "triton.cdiv(M, 64)" in t.source, t.diff
    assert check(case, t.source) <= 1.0, t.diff
    assert AUTOTUNE.apply(case.source) is not None  # the default variants around the launch's tiles too
