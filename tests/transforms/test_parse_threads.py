"""Parsing from several threads, as `klineage walk --parallel 4` does: on CPython 3.11 two threads that
build ASTs at once can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905), so every parse klineage does goes through ``klineage.schema.pyast``'s lock.

The race itself is rare, so the test makes it observable: ``ast.parse`` is wrapped to record how many
threads are inside it at once (and to yield the GIL while inside, which is what lets a second thread in),
and the real code the walk's threads run (the static gate, the operators, kernel features, the condition
language) is driven from 8 threads. No two threads may ever be inside ``ast.parse`` together, and every
result must equal the one-thread result.
"""

from __future__ import annotations

import ast
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from klineage.kb.conditions import parse_condition
from klineage.transforms.features import kernel_features
from klineage.transforms.registry import all_operators
from klineage.validator.static import check_source

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [(ROOT / "workloads" / name / "expert.py").read_text(encoding="utf-8")
           for name in ("softmax", "gemm", "layernorm", "cross_entropy")]


def _work(i: int) -> Any:
    """What one walk thread parses: the static gate, every operator's simplify, features, a condition."""
    source = SOURCES[i % len(SOURCES)]
    report = check_source(source)
    rewrites = [op.id for op in all_operators() if op.present(source) and op.simplify(source) is not None]
    expr = f"rows >= {1000 + i} and dtype in ('bf16', 'fp16')"  # distinct: parse_condition is cached
    return report.ok, tuple(rewrites), kernel_features(source), parse_condition(expr).names


@pytest.fixture
def watched_parse(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """``ast.parse`` that counts the threads inside it (the most at once in ``seen["max"]``)."""
    real: Callable[..., Any] = ast.parse
    guard = threading.Lock()
    seen = {"inside": 0, "max": 0, "calls": 0}

    def parse(*args: Any, **kwargs: Any) -> Any:
        with guard:
            seen["inside"] += 1
            seen["calls"] += 1
            seen["max"] = max(seen["max"], seen["inside"])
        try:
            time.sleep(0.0005)  # give up the GIL, as a finalizer run by the GC during the build can
            return real(*args, **kwargs)
        finally:
            with guard:
                seen["inside"] -= 1

    monkeypatch.setattr(ast, "parse", parse)
    return seen


def test_no_two_threads_are_ever_inside_ast_parse(watched_parse: dict[str, int]) -> None:
    alone = [_work(i) for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(_work, range(8)))
    assert together == alone
    assert watched_parse["calls"] > 50  # the work did parse, many times
    assert watched_parse["max"] == 1, f"{watched_parse['max']} threads were inside ast.parse at once"
