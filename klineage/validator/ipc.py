"""CUDA tensors between the trusted side and a worker on the same GPU: IPC handles instead of copies.

Through the socket (``channel.pack``) every tensor goes GPU → host → pickle → socket → host → GPU: on
the H200 (2026-12-04) that made a batched-matmul candidate's correctness gate take 37 s instead of a few.
Here a CUDA tensor travels as the fields of its CUDA IPC handle (``share``): plain numbers, strings and
base64 bytes in the message header, nothing that can run code. The receiver (``receive``) maps the
allocation, copies it into memory of its own at once, drops the mapping, and checks the copy against
the sender's checksum, so a mapping gone wrong is an error, never silently different data. The sender
keeps the tensors alive until the receiver has answered (requests are synchronous).

A message's values travel split (``share_among`` / ``receive_among``): its CUDA tensors through IPC, each
with its place, everything else (a workload's int or float argument, CPU tensors) through the socket; a
list is lent all or nothing (``share``).

Which side builds the tensors from which fields is fixed here, on the receiving side: the classes are
never read from the message. Anything unexpected raises ``IpcError`` and the caller falls back to the
socket. ``KLINEAGE_VALIDATOR_IPC=0`` turns the transport off.
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Sequence
from typing import Any

_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool",
           "float8_e4m3fn", "float8_e5m2")
MAX_TENSORS = 64


class IpcError(RuntimeError):
    """A tensor could not be shared or rebuilt through CUDA IPC (the caller uses the socket instead)."""


def enabled() -> bool:
    """Whether the IPC transport may be tried (``KLINEAGE_VALIDATOR_IPC`` is not ``0``)."""
    return os.environ.get("KLINEAGE_VALIDATOR_IPC", "1") != "0"


def inputs_enabled() -> bool:
    """Whether inputs a worker sends back (the integrity gate's unchanged-inputs check) may come through
    IPC too (``KLINEAGE_VALIDATOR_IPC_INPUTS`` is not ``0``; through the socket they cost a GPU → host →
    pickle round of every input: most of a small candidate's integrity gate, H100 2026-12-07)."""
    return enabled() and os.environ.get("KLINEAGE_VALIDATOR_IPC_INPUTS", "1") != "0"


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode("ascii") if data else None


def _bytes(text: Any, name: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > 4096:
        raise IpcError(f"ipc field {name}: expected base64 text")
    return base64.b64decode(text.encode("ascii"), validate=True)


def checksum(tensor: Any) -> float:
    """A float64 sum of the tensor's values (NaN and infinities count as they are)."""
    return float(tensor.detach().double().sum().item()) if tensor.numel() else 0.0


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def share(tensors: Sequence[Any]) -> list[dict[str, Any]]:
    """The IPC description of each tensor of a flat sequence of CUDA tensors; IpcError, with none of them
    lent, when an item is not a dense CUDA tensor of a dtype the receiver rebuilds (or the sequence is too
    long)."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    if not enabled():
        raise IpcError("the IPC transport is turned off (KLINEAGE_VALIDATOR_IPC=0)")
    if len(tensors) > MAX_TENSORS:
        raise IpcError(f"more than {MAX_TENSORS} tensors")
    # All or nothing: a tensor once described is counted as lent until a receiver maps it, and one freed
    # while lent waits in PyTorch's IPC limbo for good. Describing the first tensors of a list and then
    # refusing a later item (a workload's int or float argument) leaked them: group_norm's input, every
    # call, until the 80 GB H100 ran out (2026-12-07).
    if not all(_shareable(torch, t) for t in tensors):
        raise IpcError("not a dense CUDA tensor")
    out = []
    for t in tensors:
        t = t.detach()
        try:
            _, args = reduce_tensor(t)
        except Exception as exc:  # e.g. memory this process mapped from another: the socket instead
            raise IpcError(f"ipc: could not share a tensor ({type(exc).__name__}: {exc})") from exc
        (_, size, stride, offset, _, dtype, device, handle, nbytes, off_bytes, _, rc_handle, rc_offset, event,
         event_sync) = args
        out.append({"size": [int(x) for x in size], "stride": [int(x) for x in stride], "offset": int(offset),
                    "dtype": str(dtype).removeprefix("torch."), "device": int(device), "handle": _b64(handle),
                    "nbytes": int(nbytes), "off_bytes": int(off_bytes), "rc_handle": _b64(rc_handle),
                    "rc_offset": int(rc_offset), "event": _b64(event), "event_sync": bool(event_sync),
                    "sum": checksum(t)})
    return out


def _shareable(torch: Any, value: Any) -> bool:
    """A dense CUDA tensor of a dtype a receiver rebuilds (``_DTYPES``): checked before anything is lent."""
    return (isinstance(value, torch.Tensor) and value.device.type == "cuda" and value.layout == torch.strided
            and str(value.dtype).removeprefix("torch.") in _DTYPES)


def share_among(values: Sequence[Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """The CUDA tensors among ``values`` described for IPC, ``{"positions": [...], "meta": [...]}``, and
    ``values`` with those places None (what goes through the socket); None when there is no CUDA tensor
    or they cannot be shared (then none was). Inverse: ``receive_among``."""
    import torch

    positions = [i for i, x in enumerate(values) if _shareable(torch, x)]
    if not positions:
        return None
    try:
        meta = share([values[i] for i in positions])
    except IpcError:
        return None
    return {"positions": positions, "meta": meta}, [None if i in positions else x for i, x in enumerate(values)]


def receive_among(fields: Any, rest: Any, device: Any = None) -> list[Any]:
    """``rest`` (the socket's part of ``share_among``) with the tensors ``fields`` describes mapped back into
    their places; IpcError when the positions do not fit ``rest`` (each one a distinct index of a None
    place) or a tensor cannot be received."""
    if not isinstance(fields, dict) or not isinstance(rest, list | tuple):
        raise IpcError("ipc: expected positions and tensor descriptions")
    positions = fields.get("positions")
    if (not isinstance(positions, list) or len(set(positions)) != len(positions)
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(rest) and rest[i] is None
                       for i in positions)):
        raise IpcError("ipc: the shared positions do not fit the values sent")
    meta = fields.get("meta")
    if not isinstance(meta, list) or len(meta) != len(positions):
        raise IpcError("ipc: one tensor description per shared position expected")
    out = list(rest)
    for i, tensor in zip(positions, receive(meta, device), strict=True):
        out[i] = tensor
    return out


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IpcError(f"ipc field {name}: expected an integer >= 0")
    return value


def receive(meta: Any, device: Any = None) -> tuple[Any, ...]:
    """Rebuild every described tensor, copy it into this process's own memory (on the sender's GPU;
    ``device`` is accepted for symmetry with ``channel.unpack``) and check its checksum; IpcError on a
    malformed description, a failed mapping or a copy that does not match."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    if not isinstance(meta, list) or len(meta) > MAX_TENSORS:
        raise IpcError("ipc: expected a list of tensor descriptions")
    out = []
    for m in meta:
        if not isinstance(m, dict) or m.get("dtype") not in _DTYPES:
            raise IpcError("ipc: malformed tensor description")
        size = [_int(x, "size") for x in m.get("size", [])]
        stride = [_int(x, "stride") for x in m.get("stride", [])]
        if len(size) != len(stride) or len(size) > 8:
            raise IpcError("ipc: size and stride do not match")
        try:
            shared = rebuild_cuda_tensor(
                torch.Tensor, torch.Size(size), tuple(stride), _int(m.get("offset"), "offset"), torch.UntypedStorage,
                getattr(torch, m["dtype"]), _int(m.get("device"), "device"), _bytes(m.get("handle"), "handle"),
                _int(m.get("nbytes"), "nbytes"), _int(m.get("off_bytes"), "off_bytes"), False,
                _bytes(m.get("rc_handle"), "rc_handle"), _int(m.get("rc_offset"), "rc_offset"),
                _bytes(m.get("event"), "event"), bool(m.get("event_sync")))
            own = shared.clone()
            torch.cuda.synchronize()
            del shared
        except IpcError:
            raise
        except Exception as exc:
            raise IpcError(f"ipc: could not map a shared tensor ({type(exc).__name__}: {exc})") from exc
        expected = m.get("sum")
        if not isinstance(expected, int | float) or not _same(checksum(own), float(expected)):
            raise IpcError("ipc: the mapped tensor differs from what was sent")
        out.append(own)
    return tuple(out)
