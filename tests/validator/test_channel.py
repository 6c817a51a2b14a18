"""What travels between the trusted side and a worker: tensors by value (``pack``) or by layout (``shells``)."""

from __future__ import annotations

import pytest
import torch

from klineage.validator.channel import from_shells, pack, shells, unpack


def test_a_shell_is_the_layout_without_the_data() -> None:
    base = torch.randn(64, 48, dtype=torch.float16)
    inputs = (base.t(), base[3:, 5:], torch.zeros(0, 7, dtype=torch.int64), torch.ones(5, dtype=torch.bool), 17, 0.5)
    sent = pack(shells(inputs))
    assert len(sent) < 2_000 < len(pack(inputs))  # a few bytes per tensor, whatever its size
    assert shells(shells(inputs)) == shells(inputs)  # idempotent: shelling twice changes nothing
    made = from_shells(unpack(sent), "cpu")
    assert isinstance(made, tuple) and made[4:] == (17, 0.5)
    for original, copy in zip(inputs[:4], made[:4], strict=True):
        assert (copy.dtype, copy.shape, copy.stride(), copy.storage_offset()) == (
            original.dtype, original.shape, original.stride(), original.storage_offset())
        assert copy.data_ptr() % 16 == original.data_ptr() % 16  # the same alignment: the same specialization


def test_a_shell_with_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="no dtype"):
        from_shells({"__tensor_shell__": ["Tensor", [2], [1], 0]}, "cpu")
