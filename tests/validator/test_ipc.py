"""``validator/ipc.py`` on the CPU: what may be lent through CUDA IPC, all or nothing, and what a receiver
refuses before mapping anything. (The mapping itself is tested on the GPU: test_gpu.py.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from klineage.validator import ipc


def test_nothing_is_described_when_one_item_cannot_be_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    described: list[Any] = []
    monkeypatch.setattr("torch.multiprocessing.reductions.reduce_tensor",
                        lambda t: described.append(t) or pytest.fail("a tensor was described"))
    monkeypatch.setattr(ipc, "_shareable", lambda torch_, x: isinstance(x, torch.Tensor) and x.numel() > 1)
    with pytest.raises(ipc.IpcError):
        ipc.share([torch.ones(4), torch.ones(4), torch.ones(1)])  # the last one is refused: none is lent
    assert described == []


def test_only_cuda_tensors_go_through_ipc_the_rest_through_the_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ipc.share_among([torch.ones(2), 3, 0.5]) is None  # no CUDA tensor: all through the socket
    monkeypatch.setattr(ipc, "_shareable", lambda torch_, x: isinstance(x, torch.Tensor))
    monkeypatch.setattr(ipc, "share", lambda tensors: [{"n": int(t.numel())} for t in tensors])
    fields, rest = ipc.share_among([torch.ones(2), 32, torch.ones(3), 1e-5])
    assert fields == {"positions": [0, 2], "meta": [{"n": 2}, {"n": 3}]}
    assert rest == [None, 32, None, 1e-5]


def test_received_tensors_go_back_to_their_places(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ipc, "receive", lambda meta, device=None: tuple(torch.full((m["n"],), 7.0) for m in meta))
    values = ipc.receive_among({"positions": [0, 2], "meta": [{"n": 2}, {"n": 3}]}, [None, 32, None])
    assert values[1] == 32 and values[0].tolist() == [7.0, 7.0] and values[2].tolist() == [7.0] * 3


@pytest.mark.parametrize("fields, rest", [
    ({"positions": [1], "meta": [{}]}, [None, 32]),          # the place is not empty: would overwrite a value
    ({"positions": [5], "meta": [{}]}, [None]),               # out of range
    ({"positions": [0, 0], "meta": [{}, {}]}, [None]),        # twice the same place
    ({"positions": [True], "meta": [{}]}, [None, None]),      # a bool is not an index
    ({"positions": [0], "meta": []}, [None]),                 # a description missing
    ({"positions": [0], "meta": [{}]}, "not a list"),
    (["not", "a", "dict"], [None]),
])
def test_a_receiver_refuses_descriptions_that_do_not_fit(monkeypatch: pytest.MonkeyPatch, fields: Any,
                                                        rest: Any) -> None:
    monkeypatch.setattr(ipc, "receive", lambda meta, device=None: pytest.fail("mapped before checking"))
    with pytest.raises(ipc.IpcError):
        ipc.receive_among(fields, rest)
