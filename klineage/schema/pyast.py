"""``ast.parse``, ``ast.literal_eval`` and ``ast.unparse`` behind one process-wide lock.

CPython 3.11 keeps the recursion depth of the AST constructor in interpreter-wide state: two threads
that build ASTs at once can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905). ``klineage walk`` gates candidates from several threads (``--parallel``), and
each gate parses the candidate, so every parse in klineage goes through here. The lock costs nothing
that matters (a parse takes milliseconds; the gates' work runs in worker processes). This module sits
on the lowest floor (``schema``) so that every layer may use it; it imports nothing from klineage.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

#: Held while an AST is built or unparsed (re-entrant: a caller may hold it around several calls).
AST_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    """``ast.parse`` under ``AST_LOCK``."""
    with AST_LOCK:
        return ast.parse(source, filename=filename, mode=mode, **kwargs)


def literal_eval(text: str | ast.AST) -> Any:
    """``ast.literal_eval`` of a string (or an expression node) under ``AST_LOCK`` (a string is parsed)."""
    with AST_LOCK:
        return ast.literal_eval(text)


def unparse(node: ast.AST) -> str:
    """``ast.unparse`` under ``AST_LOCK``."""
    with AST_LOCK:
        return ast.unparse(node)
