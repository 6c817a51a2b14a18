"""Statement-level helpers of the structural operators: a block's text re-indented, a loop's exits."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from klineage.transforms._module import Module
from klineage.transforms._source import (
    Edit,
    reindent,
)


def block_text(m: Module, stmts: list[ast.stmt], indent: str) -> str:
    """Whole lines of consecutive statements re-indented to ``indent``."""
    first = m.src.stmt_lines(stmts[0])[0]
    last = m.src.stmt_lines(stmts[-1])[1]
    start, end = m.src.line_span(first, last)
    old = m.src.indent_of(stmts[0].lineno)
    return reindent(m.src.text[start:end], old, indent)


def replace_stmt_with(m: Module, stmt: ast.stmt, body: list[ast.stmt]) -> Edit:
    """Replace a compound statement by ``body`` at its own indentation (empty body: delete)."""
    start, end = m.src.line_span(m.src.stmt_lines(stmt)[0], m.src.stmt_lines(stmt)[1])
    if not body:
        return Edit(start, end, "")
    return Edit(start, end, block_text(m, body, m.src.indent_of(stmt.lineno)))


# ------------------------------------------------------------------------------------- mask-elision


def leaves_loop(stmts: list[ast.stmt]) -> bool:
    """True when ``stmts`` hold a ``break`` / ``continue`` that is not inside a loop of their own."""
    for st in stmts:
        if isinstance(st, (ast.Break, ast.Continue)):
            return True
        if isinstance(st, (ast.For, ast.While)):
            continue  # its break / continue belong to it
        for field in ("body", "orelse", "finalbody"):
            if leaves_loop(getattr(st, field, []) or []):
                return True
    return False


def bodies(node: ast.AST) -> list[list[ast.stmt]]:
    """Every statement list under ``node`` (function, loop and branch bodies)."""
    out = []
    for n in ast.walk(node):
        for attr in ("body", "orelse"):
            b = getattr(n, attr, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                out.append(b)
    return out


def stmt_span(m: Module, first: ast.stmt, last: ast.stmt) -> tuple[int, int]:
    """Character span of the whole lines from ``first`` to ``last``."""
    return m.src.line_span(m.src.stmt_lines(first)[0], m.src.stmt_lines(last)[1])


def name_of(node: ast.AST | None) -> str | None:
    """The id of a Name node, else None."""
    return node.id if isinstance(node, ast.Name) else None


def assign(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    """``name = value`` as (name, value)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    return None


def uses(nodes: Sequence[ast.AST], names: set[str]) -> bool:
    """True when any of ``nodes`` reads or writes one of ``names``."""
    return any(isinstance(n, ast.Name) and n.id in names for node in nodes for n in ast.walk(node))


def all_names(nodes: list[ast.AST]) -> set[str]:
    """Every name read or written anywhere in ``nodes``."""
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}
