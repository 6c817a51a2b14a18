"""The kernel-analysis worker process: reads kernel sources on stdin, writes search inputs on stdout.

Run as ``python -m klineage.graphql.analysis_worker`` by ``KernelAnalyzer``. Messages both ways are a
4-byte big-endian length then the payload: a UTF-8 kernel source in, a JSON object out, either
``{"ok": search_kwargs}`` or ``{"error": message}``. The worker imports the analysis once and serves
sources one at a time until stdin closes; the parent kills it when an analysis runs past its limit.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any, BinaryIO

HEADER = struct.Struct(">I")


def read_message(stream: BinaryIO) -> bytes | None:
    """One length-prefixed message, or None at end of stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_message(stream: BinaryIO, payload: bytes) -> None:
    """Write ``payload`` length-prefixed and flush."""
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()


def analyse(source: str) -> dict[str, Any]:
    """``{"ok": kernel_facts(source).search_kwargs()}`` or ``{"error": message for the client}``."""
    from klineage.transforms.facts import kernel_facts

    try:
        return {"ok": kernel_facts(source).search_kwargs()}
    except SyntaxError as exc:
        return {"error": f"kernelSource: expected Python source that parses ({exc.msg}, line {exc.lineno})"}
    except (RecursionError, MemoryError) as exc:
        return {"error": f"kernelSource: too deeply nested or too large to analyse ({type(exc).__name__})"}
    except Exception as exc:  # one bad source must not end the worker
        return {"error": f"kernelSource: the analysis failed on this source ({type(exc).__name__})"}


def main() -> None:
    """Serve sources from stdin until it closes."""
    from klineage.transforms.facts import kernel_facts  # noqa: F401 - import the analysis before the first source
    from klineage.transforms.registry import all_operators

    all_operators()
    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")  # the protocol's channel; stray prints go to stderr instead
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    while (message := read_message(stdin)) is not None:
        outcome = analyse(message.decode("utf-8", errors="replace"))
        write_message(stdout, json.dumps(outcome, default=str).encode("utf-8"))


if __name__ == "__main__":
    main()
