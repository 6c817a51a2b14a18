"""split-k: a K-partitioned matmul with fp32 partials and a deterministic reduction pass; exact
round trips; refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from klineage.transforms.features import kernel_features
from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check, load, naive_cases

ROOT = Path(__file__).resolve().parents[2]
OP = get_operator("split-k")
GEMM = naive_cases()["naive_gemm"]


def _grown() -> Case:
    g = torch.Generator().manual_seed(3)
    # K = 150: 10 steps of BLOCK_K = 16, not a multiple of BLOCK_K * SPLIT_K for 3 or 4
    return Case(
        "gemm-grown", GEMM.source,
        lambda: [(torch.randn(37, 150, generator=g), torch.randn(150, 29, generator=g))],
        GEMM.reference, rtol=1e-3, atol=1e-3,
    )


@pytest.mark.parametrize("split_k", [2, 3, 4, 16])
def test_split_k_is_correct_and_round_trips(split_k: int) -> None:
    case = _grown()
    rw = OP.apply(case.source, split_k=split_k)
    assert rw is not None and OP.present(rw.source) and not OP.applicable(rw.source)
    assert kernel_features(rw.source)["split_k"] and not kernel_features(case.source)["split_k"]
    assert "atomic" not in rw.source
    assert check(case, rw.source) <= 1.0, rw.diff
    back = OP.simplify(rw.source)
    assert back is not None and back.source == case.source


def test_the_reduction_is_deterministic() -> None:
    rw = OP.apply(GEMM.source, split_k=4)
    assert rw is not None
    mod = load(rw.source)
    (args,) = _grown().inputs()
    assert torch.equal(mod.run(*args), mod.run(*args))


def test_heldout_bmm_round_trips() -> None:
    src = (ROOT / "heldout" / "bmm" / "naive.py").read_text()
    rw = OP.apply(src)
    assert rw is not None and "program_id(2)" in rw.source
    back = OP.simplify(rw.source)
    assert back is not None and back.source == src


def test_refusals() -> None:
    # an epilogue after the K loop would have to move after the reduction
    assert OP.apply((ROOT / "heldout" / "linear_gelu" / "naive.py").read_text()) is None
    # a grid shared with a second launch must not gain an axis
    assert OP.apply(naive_cases()["naive_matmul_epilogue"].source) is None
    # autotuned / pointer-increment kernels (the gemm expert), attention (two dots)
    for w in ("gemm", "attention"):
        assert OP.apply((ROOT / "workloads" / w / "expert.py").read_text()) is None
    # an output the host does not create contiguous here
    src = GEMM.source.replace("c = torch.empty((M, N), device=a.device, dtype=a.dtype)", "c = out_buffer(a, M, N)")
    assert src != GEMM.source and OP.apply(src) is None
    with pytest.raises(ValueError, match="split_k"):
        OP.apply(GEMM.source, split_k=1)
