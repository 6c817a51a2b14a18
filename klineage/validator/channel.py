"""The channel between the trusted side and a candidate worker: framed messages over a socket.

A message is a JSON header (a dict) and an optional binary payload. On the wire: 4 bytes header length,
8 bytes payload length (big endian), the UTF-8 JSON header, the payload. ``recv_message`` enforces a
deadline (``ChannelTimeout``), refuses oversized or malformed frames (``ChannelError``) and reports a
closed peer (``ChannelClosed``: the worker died).

Tensors travel as payloads written by ``pack`` (``torch.save`` of the object with every tensor moved to
the CPU) and read by ``unpack`` with ``torch.load(weights_only=True)``: only tensors, numbers, strings and
plain containers can be read back, so a payload from the candidate side cannot run code on the trusted
side. Standard library at import; torch is imported by ``pack``/``unpack`` only.
"""

from __future__ import annotations

import io
import json
import select
import socket
import struct
import time
from typing import Any

MAX_HEADER_BYTES = 4 * 1024 * 1024
MAX_PAYLOAD_BYTES = 64 * 1024**3
_PREFIX = struct.Struct(">IQ")


class ChannelError(Exception):
    """A frame that breaks the protocol (too large, not JSON, not an object)."""


class ChannelClosed(ChannelError):
    """The other end closed the channel (for a worker: it exited or died)."""


class ChannelTimeout(ChannelError):
    """No complete message arrived before the deadline."""


def send_message(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    """Send one framed message (blocking until written; raises ChannelClosed when the peer is gone)."""
    data = json.dumps(header, default=str).encode("utf-8")
    try:
        sock.sendall(_PREFIX.pack(len(data), len(payload)) + data)
        if payload:
            sock.sendall(payload)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed(f"channel closed while sending: {exc}") from exc


def _recv_exact(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("no answer before the deadline")
            ready, _, _ = select.select([sock], [], [], min(left, 1.0))
            if not ready:
                continue
        try:
            chunk = sock.recv(min(size - got, 1 << 22))
        except ConnectionResetError as exc:
            raise ChannelClosed(f"channel reset: {exc}") from exc
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_message(sock: socket.socket, deadline: float | None = None,
                 max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[dict[str, Any], bytes]:
    """Receive one framed message; ``deadline`` is a ``time.monotonic()`` instant (None: wait forever)."""
    head_len, payload_len = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size, deadline))
    if head_len > MAX_HEADER_BYTES:
        raise ChannelError(f"message header of {head_len} bytes is over the limit of {MAX_HEADER_BYTES}")
    if payload_len > max_payload:
        raise ChannelError(f"message payload of {payload_len} bytes is over the limit of {max_payload}")
    raw = _recv_exact(sock, head_len, deadline)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ChannelError(f"message header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ChannelError("message header is not a JSON object")
    payload = _recv_exact(sock, payload_len, deadline) if payload_len else b""
    return header, payload


def _map_leaves(value: Any, is_leaf: Any, fn: Any) -> Any:
    """``value`` with ``fn`` applied to every leaf (``is_leaf``) inside tuples, lists and dicts."""
    if is_leaf(value):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_map_leaves(x, is_leaf, fn) for x in value)
    if isinstance(value, list):
        return [_map_leaves(x, is_leaf, fn) for x in value]
    if isinstance(value, dict):
        return {k: _map_leaves(x, is_leaf, fn) for k, x in value.items()}
    return value


def _map_tensors(value: Any, fn: Any) -> Any:
    """``value`` with ``fn`` applied to every tensor inside tuples, lists and dicts."""
    import torch

    return _map_leaves(value, lambda v: isinstance(v, torch.Tensor), fn)


SHELL = "__tensor_shell__"
"""Marks a tensor sent by layout only (``shells``): dtype, shape, strides and storage offset, no data."""


def shells(value: Any) -> Any:
    """``value`` with every tensor replaced by its layout (no data): what the compile gate needs, since the
    launches of ``run`` define signatures and nothing reads the values; a case of a large grid then costs a
    few bytes to send instead of its tensors' size twice over (to the host and back to the GPU). Idempotent."""
    return _map_tensors(value, lambda t: {SHELL: [str(t.dtype).removeprefix("torch."), list(t.shape),
                                                  list(t.stride()), int(t.storage_offset())]})


def from_shells(value: Any, device: Any) -> Any:
    """The tensors ``shells`` described, allocated on ``device`` with the same layout (uninitialized)."""
    import torch

    def allocate(shell: dict[str, Any]) -> Any:
        name, shape, stride, offset = shell[SHELL]
        dtype = getattr(torch, str(name), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"a tensor shell names no dtype: {name!r}")
        extent = 0 if any(n == 0 for n in shape) else 1 + sum((n - 1) * st for n, st in zip(shape, stride, strict=True))
        storage = torch.empty(int(offset) + extent, dtype=dtype, device=device)
        return storage.as_strided(tuple(shape), tuple(stride), int(offset))

    return _map_leaves(value, lambda v: isinstance(v, dict) and set(v) == {SHELL}, allocate)


def pack(value: Any) -> bytes:
    """Serialize tensors (moved to the CPU), numbers, strings and tuples/lists/dicts of them."""
    import torch

    buffer = io.BytesIO()
    torch.save(_map_tensors(value, lambda t: t.detach().cpu()), buffer)
    return buffer.getvalue()


def unpack(payload: bytes, device: Any = None) -> Any:
    """Read a ``pack`` payload safely (``weights_only=True``); tensors are moved to ``device`` when given."""
    import torch

    value = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    return value if device is None else _map_tensors(value, lambda t: t.to(device))
