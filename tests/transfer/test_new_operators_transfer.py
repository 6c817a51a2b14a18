"""epilogue-fusion and split-k on held-out kernels, gated on shapes larger than one tile and not
divisible by it: each fused held-out matmul is split with simplify (and fused back exactly by apply);
split-k applies to every held-out matmul it recognises, for several split counts."""

from __future__ import annotations

from typing import Any

import pytest

from klineage.transforms.registry import get_operator

from .heldout import CPU_GATES, failed_gates, heldout_dirs, naive_sources
from .test_grid_transfer import grown_shapes

EPILOGUE, SPLIT_K = get_operator("epilogue-fusion"), get_operator("split-k")
SOURCES = naive_sources()
DIRS = {d.name: d for d in heldout_dirs()}
FUSED = sorted(name for name, src in SOURCES.items() if EPILOGUE.present(src))
SPLITTABLE = sorted(name for name, src in SOURCES.items() if SPLIT_K.applicable(src))


def _gate(validator: Any, source: str, name: str) -> dict[str, Any]:
    return validator.validate(source, DIRS[name], gates=CPU_GATES, shapes=grown_shapes(name)).to_dict()


def test_the_new_operators_have_heldout_ground() -> None:
    assert FUSED, "no held-out kernel exercises epilogue-fusion"
    assert SPLITTABLE, "no held-out kernel exercises split-k"


@pytest.mark.parametrize("name", FUSED)
def test_split_epilogue_passes_the_gates(name: str, cpu_validator: Any) -> None:
    split = EPILOGUE.simplify(SOURCES[name])
    assert split is not None
    fused = EPILOGUE.apply(split.source)
    assert fused is not None and fused.source == SOURCES[name]
    result = _gate(cpu_validator(seeds=1), split.source, name)
    assert result["verdict"] == "pass", "\n".join(failed_gates(result)) + "\n" + split.diff


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("name", SPLITTABLE)
def test_split_k_passes_the_gates(name: str, split_k: int, cpu_validator: Any) -> None:
    rw = SPLIT_K.apply(SOURCES[name], split_k=split_k)
    assert rw is not None and SPLIT_K.present(rw.source)
    back = SPLIT_K.simplify(rw.source)
    assert back is not None and back.source == SOURCES[name]
    result = _gate(cpu_validator(seeds=1), rw.source, name)
    assert result["verdict"] == "pass", "\n".join(failed_gates(result)) + "\n" + rw.diff
