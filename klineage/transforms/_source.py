"""Span-level source editing on top of the stdlib ``ast``.

Rewrites never regenerate a file: they compute character spans of ast nodes in the original text and
replace just those spans, so comments, formatting and everything the rewrite does not touch survive.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` (character offsets) with ``text``."""

    start: int
    end: int
    text: str


class Src:
    """A parsed source: text, tree and a mapping from ast positions to character offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.lines = text.splitlines(keepends=True)
        self._line_start: list[int] = []
        pos = 0
        for line in self.lines:
            self._line_start.append(pos)
            pos += len(line)
        self._line_start.append(pos)
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def offset(self, lineno: int, col_byte: int) -> int:
        """Character offset of (1-based line, utf-8 byte column)."""
        if lineno - 1 >= len(self.lines):
            return len(self.text)
        line = self.lines[lineno - 1]
        col = len(line.encode("utf-8")[:col_byte].decode("utf-8", errors="ignore"))
        return self._line_start[lineno - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Character span of a node (expression or statement)."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def seg(self, node: ast.AST) -> str:
        """Source text of a node."""
        start, end = self.span(node)
        return self.text[start:end]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Character span of whole lines ``first..last`` (1-based, inclusive, newline included)."""
        return self._line_start[first - 1], self._line_start[min(last, len(self.lines))]

    def indent_of(self, lineno: int) -> str:
        """Leading whitespace of a line."""
        line = self.lines[lineno - 1]
        return line[: len(line) - len(line.lstrip())]

    def stmt_lines(self, stmt: ast.stmt) -> tuple[int, int]:
        """First and last line of a statement, decorators included."""
        first = stmt.lineno
        for deco in getattr(stmt, "decorator_list", []):
            first = min(first, deco.lineno)
        return first, stmt.end_lineno or stmt.lineno

    def parent(self, node: ast.AST) -> ast.AST | None:
        """The parent node, or None for the module."""
        return self.parents.get(node)


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits; raises ValueError on overlap (a bug in the caller)."""
    ordered = sorted(set(edits), key=lambda e: (e.start, e.end))
    out: list[str] = []
    pos = 0
    for e in ordered:
        if e.start < pos:
            raise ValueError(f"overlapping edits at {e.start}")
        out.append(text[pos:e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


def replace_node(src: Src, node: ast.AST, text: str) -> Edit:
    """Edit that replaces a node's text."""
    start, end = src.span(node)
    return Edit(start, end, text)


def remove_element(src: Src, elements: Sequence[ast.AST], index: int, container_end: int | None = None) -> Edit:
    """Edit that removes ``elements[index]`` from a comma-separated sequence (call args, list, dict).

    ``elements`` are the nodes in source order (for a dict, pass the (key, value) pairs flattened as
    key nodes with ``dict_values`` handled by the caller through ``span_pairs``).
    """
    spans = [src.span(e) for e in elements]
    return remove_span_element(src, spans, index)


def remove_span_element(src: Src, spans: Sequence[tuple[int, int]], index: int) -> Edit:
    """Remove the ``index``-th of comma-separated items given by character spans (in source order)."""
    start, end = spans[index]
    if index + 1 < len(spans):
        return Edit(start, spans[index + 1][0], "")
    if index > 0:
        return Edit(spans[index - 1][1], end, "")
    # the only element: also swallow a trailing comma
    rest = src.text[end:]
    stripped = rest.lstrip()
    if stripped.startswith(","):
        end = end + (len(rest) - len(stripped)) + 1
    return Edit(start, end, "")


def call_items(src: Src, call: ast.Call) -> list[tuple[str | None, tuple[int, int]]]:
    """Arguments of a call in source order as (keyword name or None, character span)."""
    items: list[tuple[str | None, tuple[int, int]]] = [(None, src.span(a)) for a in call.args]
    for kw in call.keywords:
        items.append((kw.arg, src.span(kw)))
    items.sort(key=lambda it: it[1][0])
    return items


def remove_keyword(src: Src, call: ast.Call, name: str) -> Edit | None:
    """Edit removing keyword ``name=...`` from a call, or None when absent."""
    items = call_items(src, call)
    for i, (kw, _span) in enumerate(items):
        if kw == name:
            return remove_span_element(src, [s for _, s in items], i)
    return None


def add_keyword(src: Src, call: ast.Call, text: str) -> Edit:
    """Edit appending ``text`` (e.g. ``"num_warps=8"``) as the last argument of a call."""
    items = call_items(src, call)
    if not items:
        end = src.span(call)[1] - 1  # before ')'
        return Edit(end, end, text)
    last_start, last_end = items[-1][1]
    call_end = src.span(call)[1]
    between = src.text[last_end:call_end - 1]
    if "\n" in between:  # a multi-line call stays multi-line
        line_start = src.text.rfind("\n", 0, last_start) + 1
        indent = src.text[line_start:last_start]
        indent = indent if indent.strip() == "" else ""
        if between.lstrip().startswith(","):
            after_comma = last_end + between.index(",") + 1
            return Edit(after_comma, after_comma, f"\n{indent}{text},")
        return Edit(last_end, last_end, f",\n{indent}{text}")
    return Edit(last_end, last_end, f", {text}")


def dict_items(src: Src, d: ast.Dict) -> list[tuple[ast.expr | None, tuple[int, int]]]:
    """Entries of a dict literal as (key node, character span of ``key: value``)."""
    out = []
    for k, v in zip(d.keys, d.values, strict=True):
        start = src.span(k)[0] if k is not None else src.span(v)[0] - 2
        out.append((k, (start, src.span(v)[1])))
    return out


def str_const(node: ast.AST | None) -> str | None:
    """The value of a string constant node, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def int_const(node: ast.AST | None) -> int | None:
    """The value of an int constant node (not bool), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def names_in(node: ast.AST) -> set[str]:
    """All ``Name`` ids used in a node."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def reindent(text: str, old: str, new: str) -> str:
    """Replace the leading indentation ``old`` by ``new`` on every non-blank line of ``text``."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.strip() == "":
            out.append(line)
        elif line.startswith(old):
            out.append(new + line[len(old):])
        else:
            out.append(new + line.lstrip())
    return "".join(out)
