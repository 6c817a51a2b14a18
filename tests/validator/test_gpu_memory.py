"""gpu_memory.release_idle_memory: the cache is emptied only beyond the allowance (the GPU side of it runs in
tests/validator/test_gpu.py on a real device)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from klineage.validator.gpu_memory import release_idle_memory


class _Cuda:
    """The calls release_idle_memory makes, over a reserved/allocated pair (no GPU on this machine)."""

    def __init__(self, reserved: int, allocated: int) -> None:
        self.reserved, self.allocated, self.emptied, self.collected = reserved, allocated, 0, 0

    def ipc_collect(self) -> None:
        self.collected += 1

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def memory_reserved(self) -> int:
        return self.reserved

    def memory_allocated(self) -> int:
        return self.allocated

    def empty_cache(self) -> None:
        self.emptied += 1
        self.reserved = self.allocated


def test_the_cache_is_emptied_only_beyond_the_allowance() -> None:
    within = _Cuda(reserved=5 << 30, allocated=(5 << 30) - (1 << 29))
    assert release_idle_memory(SimpleNamespace(cuda=within), keep_bytes=1 << 30) == 0
    assert within.emptied == 0
    beyond = _Cuda(reserved=5 << 30, allocated=1 << 30)
    assert release_idle_memory(SimpleNamespace(cuda=beyond), keep_bytes=1 << 30) == 4 << 30
    assert beyond.emptied == 1 and beyond.reserved == 1 << 30
    assert within.collected == beyond.collected == 1  # blocks freed after CUDA IPC are collected every time


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU case (the GPU one is in test_gpu.py)")
def test_without_cuda_nothing_is_touched() -> None:
    assert release_idle_memory(torch) == 0
    assert not torch.cuda.is_initialized()
