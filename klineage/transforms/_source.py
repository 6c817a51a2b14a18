"""Span-level source editing on top of the stdlib ``ast``.

Rewrites never regenerate a file: they compute character spans of ast nodes in the original text and
replace just those spans, so comments, formatting and everything the rewrite does not touch survive.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from klineage.schema import pyast


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` (character offsets) with ``text``."""

    start: int
    end: int
    text: str


def shifted_edit(span: tuple[int, int], base: int, text: str) -> Edit:
    """An ``Edit`` of ``span`` (offsets in a whole source) relative to a slice that starts at ``base``."""
    return Edit(span[0] - base, span[1] - base, text)


class Src:
    """A parsed source: text, tree and a mapping from ast positions to character offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = pyast.parse(text)
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
        out.append(text[pos : e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


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


def append_item(src: Src, item_spans: Sequence[tuple[int, int]], close: int, text: str) -> Edit:
    """Edit appending ``text`` to a comma-separated sequence whose closing bracket is at ``close``;
    a multi-line sequence stays multi-line (one item per line, same indent, trailing comma kept)."""
    if not item_spans:
        return Edit(close, close, text)
    last_start, last_end = item_spans[-1]
    between = src.text[last_end:close]
    if "\n" in between:
        line_start = src.text.rfind("\n", 0, last_start) + 1
        indent = src.text[line_start:last_start]
        indent = indent if indent.strip() == "" else ""
        if between.lstrip().startswith(","):
            after_comma = last_end + between.index(",") + 1
            return Edit(after_comma, after_comma, f"\n{indent}{text},")
        return Edit(last_end, last_end, f",\n{indent}{text}")
    if between.strip().startswith(","):
        after_comma = last_end + between.index(",") + 1
        return Edit(after_comma, after_comma, f" {text},")
    return Edit(last_end, last_end, f", {text}")


def closing_bracket(src: Src, after: int, bracket: str = ")") -> int:
    """Offset of the first ``bracket`` at or after ``after`` that is not inside a comment."""
    i = after
    text = src.text
    while i < len(text):
        ch = text[i]
        if ch == "#":
            i = text.find("\n", i)
            if i < 0:
                break
        elif ch == bracket:
            return i
        i += 1
    raise ValueError("no closing bracket")


def add_keyword(src: Src, call: ast.Call, text: str) -> Edit:
    """Edit appending ``text`` (e.g. ``"num_warps=8"``) as the last argument of a call."""
    items = call_items(src, call)
    close = src.span(call)[1] - 1
    return append_item(src, [sp for _, sp in items], close, text)


def param_spans(src: Src, func: ast.FunctionDef) -> list[tuple[int, int]]:
    """Character spans of a function's positional parameters, annotation and default included."""
    args = [*func.args.posonlyargs, *func.args.args]
    defaults = [None] * (len(args) - len(func.args.defaults)) + list(func.args.defaults)
    spans = []
    for a, d in zip(args, defaults, strict=True):
        start, end = src.span(a)
        if d is not None:
            end = src.span(d)[1]
        spans.append((start, end))
    return spans


def add_param(src: Src, func: ast.FunctionDef, text: str) -> Edit:
    """Edit appending a parameter (e.g. ``"GROUP_SIZE_M: tl.constexpr = 8"``) to a function signature. A
    parameter without a default goes before the first one with a default (after them it would not parse:
    mask-elision's flag after grouped-order's ``GROUP_SIZE_M: tl.constexpr = 8``); launches pass such
    constexprs by keyword or leave them to the default, so no positional argument moves."""
    spans = param_spans(src, func)
    defaulted = len(func.args.defaults)
    if defaulted and "=" not in text:
        start = spans[len(spans) - defaulted][0]
        return Edit(start, start, f"{text}, ")
    after = spans[-1][1] if spans else src.offset(func.lineno, func.col_offset)
    if not spans:
        after = src.text.index("(", after) + 1
    return append_item(src, spans, closing_bracket(src, after), text)


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


def reindent(text: str, old: str, new: str) -> str:
    """Replace the leading indentation ``old`` by ``new`` on every non-blank line of ``text``."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.strip() == "":
            out.append(line)
        elif line.startswith(old):
            out.append(new + line[len(old) :])
        else:
            out.append(new + line.lstrip())
    return "".join(out)


def remove_items(src: Src, spans: Sequence[tuple[int, int]], drop: set[int]) -> list[Edit]:
    """Edits removing several items (by index) of one comma-separated sequence without overlaps."""
    n = len(spans)
    kept = [i for i in range(n) if i not in drop]
    edits: list[Edit] = []
    last_kept = max(kept) if kept else -1
    for i in sorted(drop):
        if i < last_kept:
            edits.append(Edit(spans[i][0], spans[i + 1][0], ""))
    tail = [i for i in sorted(drop) if i > last_kept]
    if tail:
        if last_kept >= 0:
            edits.append(Edit(spans[last_kept][1], spans[tail[-1]][1], ""))
        else:
            edits.append(remove_span_element(src, [(spans[0][0], spans[-1][1])], 0))
    return edits


def remove_keywords(src: Src, call: ast.Call, names: set[str]) -> list[Edit]:
    """Edits removing the keywords ``names`` from a call (absent ones are ignored)."""
    items = call_items(src, call)
    drop = {i for i, (kw, _) in enumerate(items) if kw in names}
    return remove_items(src, [sp for _, sp in items], drop) if drop else []
