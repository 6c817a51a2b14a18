"""tile_roles: portable roles of tile constexprs, on every expert, held-out naive and fixture kernel."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from klineage.transforms._module import parse
from klineage.transforms.operators._common import reaches_dot
from klineage.transforms.roles import ROLES, role_params, tile_roles

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [*ROOT.glob("workloads/*/expert.py"), *ROOT.glob("heldout/*/naive.py"), *ROOT.glob("tests/fixtures/kernels/*.py")]
)


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_roles_are_structural_and_complete(path: Path) -> None:
    """Every role is one of ROLES on a constexpr of its kernel; a launched tl.dot kernel has tile_m
    and tile_k (and no row roles); a launched kernel without tl.dot has a block role and no tile_*."""
    source = path.read_text()
    roles = tile_roles(source)
    m = parse(source)
    assert m is not None
    assert set(roles) == {k.name for k in m.kernels}
    for k in m.kernels:
        got = roles[k.name]
        assert set(got.values()) <= set(ROLES), got
        assert set(got) <= set(k.constexprs), got
        if k not in m.launched:
            continue
        if reaches_dot(k, m):
            assert {"tile_m", "tile_k"} <= set(got.values()), (k.name, got)
            assert not {"block", "block_cols", "rows_per_program"} & set(got.values()), (k.name, got)
        else:
            assert got, f"{k.name}: a launched kernel with no tile role"
            assert not {"tile_m", "tile_n", "tile_k", "group_size_m"} & set(got.values()), (k.name, got)
            assert list(got.values()).count("block") <= 1


def test_roles_of_the_fixture_kernels() -> None:
    fx = ROOT / "tests" / "fixtures" / "kernels"
    expect = {
        "naive_gemm": {"BLOCK_M": "tile_m", "BLOCK_N": "tile_n", "BLOCK_K": "tile_k"},
        "naive_linear": {"BLOCK_M": "tile_m", "BLOCK_N": "tile_n", "BLOCK_K": "tile_k"},
        "naive_attention": {"BLOCK_M": "tile_m", "HEAD_DIM": "tile_n", "BLOCK_N": "tile_k"},
        "naive_gelu": {"BLOCK_SIZE": "block"},
        "naive_rowsum": {"BLOCK": "block_cols", "ROWS": "rows_per_program"},
        "naive_cumsum": {"BLOCK_M": "rows_per_program", "BLOCK_N": "block_cols"},
        "naive_softmax": {"BLOCK": "block_cols"},
        "naive_looped_softmax": {"BLOCK": "block_cols"},
    }
    for name, want in expect.items():
        (got,) = tile_roles((fx / f"{name}.py").read_text()).values()
        assert got == want, name


def test_roles_of_the_gemm_expert_ignore_the_persistent_loop() -> None:
    """The persistent tile loop also contains the dot: tile_k is the step of the innermost loop, not
    the program count; GROUP_SIZE_M is the swizzle."""
    roles = tile_roles((ROOT / "workloads" / "gemm" / "expert.py").read_text())
    for name, r in roles.items():
        if r:
            assert r["BLOCK_M"] == "tile_m" and r["BLOCK_N"] == "tile_n" and r["BLOCK_K"] == "tile_k", name
            assert r["GROUP_SIZE_M"] == "group_size_m" and "NUM_SMS" not in r, name


def test_helper_loop_gives_the_caller_its_tile_k() -> None:
    roles = tile_roles((ROOT / "workloads" / "attention" / "expert.py").read_text())
    callers = [r for r in roles.values() if "tile_m" in r.values()]
    assert callers and all(role_params(r, "tile_k") for r in callers)


def test_role_params_and_errors() -> None:
    r = {"BLOCK_M": "tile_m", "BM2": "tile_m", "BLOCK_K": "tile_k"}
    assert role_params(r, "tile_m") == ["BLOCK_M", "BM2"] and role_params(r, "block") == []
    with pytest.raises(ValueError, match="unknown role"):
        role_params(r, "tile_x")
    with pytest.raises(ValueError, match="does not parse"):
        tile_roles("def broken(:\n")


def test_roles_do_not_read_names() -> None:
    """Renaming every constexpr keeps the roles (they come from structure, not from names)."""
    source = (ROOT / "tests" / "fixtures" / "kernels" / "naive_gemm.py").read_text()
    renamed = source
    for old, new in (("BLOCK_M", "TA"), ("BLOCK_N", "TB"), ("BLOCK_K", "TC")):
        renamed = renamed.replace(old, new)
    ast.parse(renamed)
    (got,) = tile_roles(renamed).values()
    assert got == {"TA": "tile_m", "TB": "tile_n", "TC": "tile_k"}
