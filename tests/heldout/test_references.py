"""The held-out workloads' references: the attention ones work a block of query rows at a time (their whole
float64 score tensors would take tens of GB on the GPU grid); blocking must not change the answer."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

HELDOUT = Path(__file__).resolve().parents[2] / "heldout"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"heldout_{name}_reference", HELDOUT / name / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["alibi_attention", "sliding_window_attention", "gqa_attention"])
def test_attention_references_give_the_same_answer_in_blocks_of_query_rows(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _load(name)
    shape = {"B": 2, "H": 8, "S": 67, "D": 16}  # S not a multiple of any block size below
    inputs = reference.make_inputs(shape, "fp32", 3)
    whole = reference.reference(*inputs)  # one block: the default limit exceeds these scores
    assert reference._SCORES_LIMIT >= 2 * 8 * 67 * 67
    for limit in (2 * 8 * 67 * 5, 2 * 8 * 67, 1):  # blocks of 5 rows, 1 row, and 1 row at the smallest limit
        monkeypatch.setattr(reference, "_SCORES_LIMIT", limit)
        blocked = reference.reference(*inputs)
        assert blocked.shape == whole.shape and blocked.dtype == whole.dtype
        torch.testing.assert_close(blocked, whole, rtol=1e-6, atol=1e-6)
    assert torch.isfinite(whole).all()
