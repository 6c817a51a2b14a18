"""Tests of the benchmarks' arithmetic; ``load_bench`` imports a script of ``bench/`` by its file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (``bench/`` is scripts, not a package; it is not put on ``sys.path``,
    where ``bench/mcp.py`` would shadow the ``mcp`` package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
