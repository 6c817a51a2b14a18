"""Tile changes never leave a held-out launch grid behind: autotune with role-term configs (the GEMM
expert's config list and row/elementwise configs, each pinned alone so every config runs under the
interpreter) and tile-size with role-term tiles are applied to every held-out naive kernel, and every
rewrite that is emitted must pass the gates on shapes larger than one tile and not divisible by it.
A rewrite may be refused (None) but never wrong."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from klineage.transforms.portable import kernel_params
from klineage.transforms.registry import get_operator
from klineage.transforms.roles import tile_roles

from .heldout import CPU_GATES, ROOT, WORKERS, failed_gates, heldout_dirs, manifests, naive_sources

# The original seven held-out kernels and five of the later ones, chosen for the ways they write their
# grids (2-D literal tiles, 2-D named tiles, a flattened M*N block, a 1-D literal, a row × column grid):
# every held-out kernel under every config would take most of CI's time for no new kind of grid.
GRID_WORKLOADS = ("alibi_attention", "bmm", "linear_gelu", "log_softmax", "rmsnorm", "row_absmax", "silu_mul",
                  "small_k_gemm", "matmul_residual", "swiglu", "column_sum", "gelu_mul")
SOURCES = {name: src for name, src in naive_sources().items() if name in GRID_WORKLOADS}
DIRS = {d.name: d for d in heldout_dirs()}
GEMM_CONFIGS = kernel_params((ROOT / "workloads" / "gemm" / "expert.py").read_text())["configs"]
ROW_CONFIGS = [
    {"block": 4096, "num_warps": 8},
    {"block": 128},
    {"block_cols": 64, "rows_per_program": 4},
    {"block_cols": 512, "rows_per_program": 2},
]


def _pinned() -> list[dict[str, Any]]:
    """The GEMM expert's configs with one per distinct tile shape, then the row configs."""
    seen, out = set(), []
    for cfg in GEMM_CONFIGS:
        tiles = tuple(sorted((k, v) for k, v in cfg.items() if not k.startswith("num_")))
        if tiles not in seen:
            seen.add(tiles)
            out.append(cfg)
    return out + ROW_CONFIGS


def grown_shapes(name: str) -> list[dict[str, Any]]:
    """One shape per held-out workload, grown from its cpu_shapes: a dim that is at most 8 in every
    cpu shape (batch, heads) keeps its largest value, a dim that is a power of two of 16 or more in
    every cpu shape (a head dim, a tile the kernel needs whole) keeps its first; every other dim
    becomes odd and larger than any tile used here (> 256) and than twice its cpu value."""
    shapes = manifests()[name].cpu_shapes
    out: dict[str, Any] = {}
    for dim, first in shapes[0].items():
        vals = [s[dim] for s in shapes if dim in s]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            out[dim] = first
        elif max(vals) <= 8:
            out[dim] = max(vals)
        elif all(v >= 16 and v & (v - 1) == 0 for v in vals):
            out[dim] = first
        else:
            out[dim] = max(259, 2 * max(vals) + 1) | 1
    return [out]


def _jobs() -> list[tuple[str, str, str]]:
    """(key, rewritten source, workload) for every distinct rewrite (warps and stages ignored: the
    interpreter computes the same with any)."""
    autotune, tile = get_operator("autotune"), get_operator("tile-size")
    jobs: list[tuple[str, str, str]] = []
    seen: set[str] = set()

    def add(key: str, source: str, name: str) -> None:
        norm = re.sub(r"num_(warps|stages)=\d+", "", source)
        if norm not in seen:
            seen.add(norm)
            jobs.append((key, source, name))

    for name, src in SOURCES.items():
        for i, cfg in enumerate(_pinned()):
            rw = autotune.apply(src, configs=[cfg])
            if rw is not None:
                add(f"autotune[{i}]:{name}", rw.source, name)
            tiles = {k: v for k, v in cfg.items() if not k.startswith("num_")}
            t = tile.apply(src, tiles=tiles)
            if t is not None:
                add(f"tile-size[{i}]:{name}", t.source, name)
        for label, rw in (("autotune-default", autotune.apply(src)), ("tile-size-default", tile.apply(src))):
            if rw is not None:
                add(f"{label}:{name}", rw.source, name)
    return jobs


JOBS = _jobs()


@pytest.fixture(scope="module")
def results(cpu_validator: Any) -> dict[str, dict[str, Any]]:
    validator = cpu_validator(seeds=1)

    def one(job: tuple[str, str, str]) -> tuple[str, dict[str, Any]]:
        key, source, name = job
        result = validator.validate(source, Path(DIRS[name]), gates=CPU_GATES, shapes=grown_shapes(name))
        return key, result.to_dict()

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(pool.map(one, JOBS))


def test_the_grown_shapes_are_larger_than_a_tile_and_not_divisible() -> None:
    for name in SOURCES:
        (shape,) = grown_shapes(name)
        grown = [v for d, v in shape.items() if v not in [s[d] for s in manifests()[name].cpu_shapes]]
        assert grown and all(v > 256 and v % 2 == 1 for v in grown), (name, shape)


def test_every_gemm_like_heldout_kernel_takes_every_expert_config() -> None:
    """Refusal is allowed, but not where the pairing is clear: a held-out kernel whose roles include
    tile_m takes every tile shape of the GEMM expert (autotune and tile-size)."""
    n_gemm = len([c for c in _pinned() if "tile_m" in c])
    autotune, tile = get_operator("autotune"), get_operator("tile-size")
    for name, src in SOURCES.items():
        if "tile_m" not in {r for roles in tile_roles(src).values() for r in roles.values()}:
            continue
        for cfg in _pinned()[:n_gemm]:
            assert autotune.apply(src, configs=[cfg]) is not None, (name, cfg)
            assert tile.apply(src, tiles={k: v for k, v in cfg.items() if k.startswith("tile")}) is not None


@pytest.mark.parametrize("key", [k for k, _, _ in JOBS])
def test_every_emitted_tile_rewrite_passes_on_non_divisible_shapes(
    key: str, results: dict[str, dict[str, Any]]
) -> None:
    result = results[key]
    source = next(s for k, s, _ in JOBS if k == key)
    assert result["verdict"] == "pass", f"{key}:\n" + "\n".join(failed_gates(result)) + "\n" + source
