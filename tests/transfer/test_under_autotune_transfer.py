"""Structural operators on autotuned held-out kernels (``transforms.under_autotune``): the configs taken out,
the operator applied, the same configs put back. Every such rewrite of every held-out kernel autotuned by
the ``autotune`` operator keeps its kernels autotuned, carries the operator, and passes the gates on a
shape larger than a tile and not divisible by it where the workload allows one, and on its CPU shapes (each
config pinned in turn by the correctness gate)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from klineage.transforms._module import parse
from klineage.transforms.registry import LAUNCH_CONFIGURATION, all_operators, get_operator
from klineage.transforms.under_autotune import apply_under_autotune

from .heldout import failed_gates, heldout_dirs, manifests, naive_sources, validate_all
from .test_grid_transfer import grown_shapes

AUTOTUNE = get_operator("autotune")
DIRS = {d.name: d for d in heldout_dirs()}


def _autotuned(source: str) -> set[str]:
    m = parse(source)
    assert m is not None
    return {k.name for k in m.kernels if k.autotune is not None}


def _rewrites() -> dict[str, tuple[str, str, str]]:
    """``{op:name: (operator, autotuned source, rewrite)}`` for every structural operator that refuses an
    autotuned held-out kernel directly and applies under autotune."""
    out = {}
    for name, naive in naive_sources().items():
        tuned = AUTOTUNE.apply(naive)
        if tuned is None:
            continue
        for op in all_operators():
            if op.apply(tuned.source) is not None:
                continue
            rw = apply_under_autotune(op, tuned.source)
            if rw is not None:
                out[f"{op.id}:{name}"] = (op.id, tuned.source, rw.source)
    return out


REWRITES = _rewrites()


def _shapes(name: str) -> list[dict[str, Any]]:
    """The grown shape (larger than a tile, not divisible by it) where the workload's inputs can be made on
    it, and the manifest's CPU shapes either way (group norm needs channels in whole groups)."""
    cpu = list(manifests()[name].cpu_shapes)
    module = importlib.util.module_from_spec(spec := importlib.util.spec_from_file_location(
        f"reference_{name}", DIRS[name] / "reference.py"))
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(module)
    try:
        module.make_inputs(grown_shapes(name)[0], manifests()[name].dtypes[0], 0)
    except ValueError:
        return cpu
    return grown_shapes(name) + cpu


@pytest.fixture(scope="module")
def results(cpu_validator: Any) -> dict[str, dict[str, Any]]:
    jobs = [(key, rw, DIRS[key.split(":")[1]], _shapes(key.split(":")[1])) for key, (_, _, rw) in REWRITES.items()]
    return validate_all(jobs, cpu_validator(seeds=1))


def test_the_structural_operators_reach_autotuned_kernels() -> None:
    reached = {key.split(":")[0] for key in REWRITES}
    assert {"split-k", "persistent", "row-persistent", "single-pass-row"} <= reached, sorted(REWRITES)
    assert not reached & set(LAUNCH_CONFIGURATION)


@pytest.mark.parametrize("key", sorted(REWRITES))
def test_the_rewrite_keeps_the_configs_and_passes_the_gates(key: str, results: dict[str, dict[str, Any]]) -> None:
    op_id, tuned, rewrite = REWRITES[key]
    assert _autotuned(tuned) <= _autotuned(rewrite), "a kernel that was autotuned came back pinned"
    assert get_operator(op_id).present(rewrite)
    result = results[key]
    assert result["verdict"] == "pass", "\n".join(failed_gates(result))
