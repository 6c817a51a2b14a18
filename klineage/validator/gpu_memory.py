"""Cached GPU memory handed back to the driver, so that jobs side by side on one GPU do not starve each other.

PyTorch's caching allocator keeps the blocks a process frees for its own later use; when it runs out it
empties its *own* cache and tries again, but it cannot reach another process's. With several jobs on one
GPU (the evaluation runs eight side by side: a trusted process and one worker process per job), each
process keeps the peak of its largest case cached, and a job with large shapes then fails with
``OutOfMemoryError`` on a GPU whose memory is mostly idle cache (seen on the 80 GB H100 with
group_norm and an 8192 x 16384 GEMM). Each process therefore gives back what it holds beyond a small
allowance after every request.

Tensors a process sent through CUDA IPC (``ipc.py``) and then freed wait in PyTorch's IPC limbo until the
receiver's reference is counted down, and are only collected when asked (or when an allocation fails in
that very process): with thousands of shared inputs and outputs a trusted process held such blocks while
other processes ran out ("Producer process tried to deallocate over 1000 memory blocks referred by
consumer processes", H100, 2026-12-07). Each release collects them first.
"""

from __future__ import annotations

import contextlib
from typing import Any

IDLE_KEEP_BYTES = 1 << 30  # cached but unused memory a process may keep between requests (re-use is cheaper)


def release_idle_memory(torch: Any, keep_bytes: int = IDLE_KEEP_BYTES) -> int:
    """Give the current process's cached, unused CUDA blocks back to the driver when they exceed
    ``keep_bytes`` (all of them with ``keep_bytes=0``). Returns the bytes released (0 when nothing was due,
    without CUDA, or when CUDA is unusable). Never touches memory that is allocated."""
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return 0
        with contextlib.suppress(Exception):  # a failed collection must not keep the cache from being emptied
            torch.cuda.ipc_collect()  # blocks shared through CUDA IPC that the receiver has let go of
        before = torch.cuda.memory_reserved()
        if before - torch.cuda.memory_allocated() <= keep_bytes:
            return 0
        torch.cuda.empty_cache()
        return max(0, before - torch.cuda.memory_reserved())
    except Exception:  # a sticky CUDA error: the caller's own checks report it
        return 0
