"""epilogue-fusion and split-k on held-out kernels, gated on shapes larger than one tile and not
divisible by it: each fused held-out matmul is split with simplify (and fused back exactly by apply);
split-k applies to every held-out matmul it recognises, for several split counts."""

from __future__ import annotations

from typing import Any

import pytest

from klineage.transforms.registry import get_operator

from .heldout import failed_gates, heldout_dirs, naive_sources, validate_all
from .test_grid_transfer import grown_shapes

EPILOGUE, SPLIT_K = get_operator("epilogue-fusion"), get_operator("split-k")
SOURCES = naive_sources()
DIRS = {d.name: d for d in heldout_dirs()}
FUSED = sorted(name for name, src in SOURCES.items() if EPILOGUE.present(src))
SPLITTABLE = sorted(name for name, src in SOURCES.items() if SPLIT_K.applicable(src))


@pytest.fixture(scope="module")
def results(cpu_validator: Any) -> dict[str, dict[str, Any]]:
    """Gate results of every split epilogue and every split-k rewrite on the grown shapes, validated
    ``WORKERS`` at a time (the tests below check the rewrites themselves and read their verdicts here)."""
    jobs = []
    for name in FUSED:
        split = EPILOGUE.simplify(SOURCES[name])
        if split is not None:
            jobs.append((f"epilogue:{name}", split.source, DIRS[name], grown_shapes(name)))
    for name in SPLITTABLE:
        for split_k in (2, 3):
            rw = SPLIT_K.apply(SOURCES[name], split_k=split_k)
            if rw is not None:
                jobs.append((f"split-k-{split_k}:{name}", rw.source, DIRS[name], grown_shapes(name)))
    return validate_all(jobs, cpu_validator(seeds=1))


def test_the_new_operators_have_heldout_ground() -> None:
    assert FUSED, "no held-out kernel exercises epilogue-fusion"
    assert SPLITTABLE, "no held-out kernel exercises split-k"


@pytest.mark.parametrize("name", FUSED)
def test_split_epilogue_passes_the_gates(name: str, results: dict[str, dict[str, Any]]) -> None:
    split = EPILOGUE.simplify(SOURCES[name])
    assert split is not None
    fused = EPILOGUE.apply(split.source)
    assert fused is not None and fused.source == SOURCES[name]
    result = results[f"epilogue:{name}"]
    assert result["verdict"] == "pass", "\n".join(failed_gates(result)) + "\n" + split.diff


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("name", SPLITTABLE)
def test_split_k_passes_the_gates(name: str, split_k: int, results: dict[str, dict[str, Any]]) -> None:
    rw = SPLIT_K.apply(SOURCES[name], split_k=split_k)
    assert rw is not None and SPLIT_K.present(rw.source)
    back = SPLIT_K.simplify(rw.source)
    assert back is not None and back.source == SOURCES[name]
    result = results[f"split-k-{split_k}:{name}"]
    assert result["verdict"] == "pass", "\n".join(failed_gates(result)) + "\n" + rw.diff
