"""epilogue-fusion: split a fused matmul epilogue into a second kernel and fuse it back, exactly;
refuse every unfused form it does not recognise."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from klineage.transforms.features import kernel_features
from klineage.transforms.registry import get_operator
from tests.transforms.harness import Case, check, naive_cases

ROOT = Path(__file__).resolve().parents[2]
OP = get_operator("epilogue-fusion")
FIXTURE = naive_cases()["naive_matmul_epilogue"]


def _grown() -> Case:
    g = torch.Generator().manual_seed(1)
    return Case(
        "matmul-epilogue-grown",
        FIXTURE.source,
        lambda: [(torch.randn(77, 50, generator=g), torch.randn(50, 45, generator=g), torch.randn(45, generator=g))],
        FIXTURE.reference,
        rtol=1e-3,
        atol=1e-3,
    )


def test_fuse_then_split_then_fuse_is_stable_and_correct() -> None:
    case = _grown()
    fused = OP.apply(case.source)
    assert fused is not None and "bias_relu_kernel" not in fused.source
    assert kernel_features(fused.source)["epilogue_fusion"] and not kernel_features(case.source)["epilogue_fusion"]
    assert check(case, fused.source) <= 1.0
    split = OP.simplify(fused.source)
    assert split is not None and check(case, split.source) <= 1.0
    again = OP.apply(split.source)
    assert again is not None and again.source == fused.source


@pytest.mark.parametrize("path", sorted(ROOT.glob("heldout/*/naive.py")), ids=lambda p: p.parent.name)
def test_split_then_fuse_gives_back_every_fused_heldout_kernel(path: Path) -> None:
    source = path.read_text()
    split = OP.simplify(source)
    if split is None:
        assert not OP.present(source)
        pytest.skip(f"{path.parent.name} has no fused matmul epilogue")
    assert OP.applicable(split.source) and not OP.present(split.source)
    back = OP.apply(split.source)
    assert back is not None and back.source == source, back.diff if back else None


REFUSE = {
    "another grid": ("bias_relu_kernel[grid](", "bias_relu_kernel[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)]("),
    "other arguments": (
        "bias_relu_kernel[grid](x, w, bias, y, M, N, K, BLOCK_M=16",
        "bias_relu_kernel[grid](x, w, bias, y, M, N, K + 0, BLOCK_M=16",
    ),
    "another tile reloaded": (
        "acc = tl.load(y_ptr + rm[:, None] * N + rn[None, :], mask",
        "acc = tl.load(y_ptr + rn[None, :] + rm[:, None] * N, mask",
    ),
    "no upcast": ("                  other=0.0).to(tl.float32)", "                  other=0.0)"),
    "other signature": ("def bias_relu_kernel(x_ptr,", "def bias_relu_kernel(xx_ptr,"),
}


@pytest.mark.parametrize("case", sorted(REFUSE))
def test_unrecognised_unfused_forms_are_refused(case: str) -> None:
    old, new = REFUSE[case]
    assert old in FIXTURE.source
    source = FIXTURE.source.replace(old, new)
    assert OP.apply(source) is None and not OP.applicable(source)


def test_experts_and_autotuned_matmuls_are_left_alone() -> None:
    for w in ("gemm", "attention"):
        src = (ROOT / "workloads" / w / "expert.py").read_text()
        assert OP.simplify(src) is None and OP.apply(src) is None
    fused = OP.apply(FIXTURE.source)
    assert fused is not None
    tuned = get_operator("autotune").apply(fused.source)
    assert tuned is not None and OP.simplify(tuned.source) is None
