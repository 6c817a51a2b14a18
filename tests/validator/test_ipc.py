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


class _Lender:
    """Stands in for CUDA IPC on the CPU: ``share`` lends clones by number, ``receive`` copies them back."""

    def __init__(self) -> None:
        self.lent: dict[int, torch.Tensor] = {}
        self.received = 0

    def share(self, tensors: Any) -> list[dict[str, Any]]:
        out = []
        for t in tensors:
            self.lent[len(self.lent)] = t.clone()
            out.append({"id": len(self.lent) - 1})
        return out

    def receive(self, meta: Any, device: Any = None) -> tuple[torch.Tensor, ...]:
        self.received += len(meta)
        return tuple(self.lent[m["id"]].clone() for m in meta)


def test_a_call_with_scalar_arguments_goes_through_ipc_both_ways(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Any) -> None:
    """The whole protocol on the CPU (the worker's handlers in this process, IPC replaced by ``_Lender``):
    group_norm-like inputs (tensors, then an int and a float) go out with their tensors lent and the
    numbers through the socket; the output and the returned inputs come back the same way, in their places."""
    import time

    from klineage.validator import worker as worker_module
    from klineage.validator.harness import LaunchWatch
    from klineage.validator.trusted import RemoteCandidate

    lender = _Lender()
    monkeypatch.setattr(ipc, "_shareable", lambda torch_, x: isinstance(x, torch.Tensor))
    monkeypatch.setattr(ipc, "share", lender.share)
    monkeypatch.setattr(ipc, "receive", lender.receive)

    class Candidate:
        @staticmethod
        def run(x: torch.Tensor, w: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
            return x * w * groups + eps

    server = object.__new__(worker_module.Server)
    server.torch, server.on_gpu, server.device, server.interpret = torch, True, "cpu", False
    server.watch, server.module, server.slots, server.held = LaunchWatch(), Candidate, {}, None
    server._sync = lambda: None  # no CUDA here

    class Worker:  # the socket: each request handled by the server's op, in this process
        def request(self, header: dict[str, Any], payload: bytes, deadline: float) -> tuple[dict[str, Any], bytes]:
            return getattr(server, f"op_{header['op']}")(header, payload)

    candidate = RemoteCandidate(Worker(), tmp_path, time.monotonic() + 60, "cuda")
    x, w = torch.arange(6.0), torch.full((6,), 2.0)
    result = candidate.call("correctness", (x, w, 32, 0.5), return_inputs=True)

    assert torch.equal(result.out, x * 2 * 32 + 0.5)
    assert result.inputs is not None and [type(v) for v in result.inputs] == [torch.Tensor, torch.Tensor, int, float]
    assert torch.equal(result.inputs[0], x) and result.inputs[2:] == [32, 0.5]
    assert lender.received == 2 + 1 + 2  # x and w in the worker; the output and x, w back here
    assert candidate.ipc  # no fallback to the socket was needed

    candidate.refill("correctness", (torch.ones(6), torch.ones(6), 32, 0.5))  # same places, new values
    again = candidate.call("correctness")
    assert torch.equal(again.out, torch.full((6,), 32.5))
