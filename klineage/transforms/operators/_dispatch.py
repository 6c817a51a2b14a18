"""A host dispatch between a specialised copy of a kernel and the general kernel it was copied from.

Operators whose rewrite holds only for some inputs (single-pass rows: rows that fit in registers;
tensor descriptors: 16-byte aligned rows) keep the kernel they start from and add a copy, launched
when its condition holds::

    if <condition>:
        <the copy's launch>
    else:
        <the original launch>

so the rewritten module is correct on every input. ``simplify`` takes the dispatch back to its
``else`` branch and deletes the copy.
"""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, Src, reindent


def copy_base_name(kernel_name: str, variant: str) -> str:
    """The name of a kernel's specialised copy: ``variant`` before a ``_kernel`` suffix
    (``rmsnorm_kernel`` -> ``rmsnorm_single_pass_kernel``), else after the name; the caller makes it unique."""
    base = kernel_name.removesuffix("_kernel")
    return f"{base}_{variant}" + ("_kernel" if base != kernel_name else "")


def whole_lines(src: Src, stmt: ast.stmt, comments: bool = True) -> tuple[int, int]:
    """First and last line of a statement, with the comment lines right above it when asked."""
    first, last = src.stmt_lines(stmt)
    while comments and first > 1 and src.lines[first - 2].strip().startswith("#"):
        first -= 1
    return first, last


def dispatch_text(indent: str, test: str, special: str, general: str, comment: str) -> str:
    """``if test: special else: general`` at ``indent``; ``special`` and ``general`` are whole lines at
    ``indent``, ``comment`` (one line, no ``#``) says why the special branch pays."""
    return (
        f"{indent}if {test}:\n"
        f"{indent}    # {comment}\n"
        + reindent(special, indent, indent + "    ")
        + f"{indent}else:\n"
        + reindent(general, indent, indent + "    ")
    )


def keep_else_branch(m: Module, node: ast.If) -> Edit:
    """The edit replacing a dispatch by its ``else`` branch at the dispatch's indentation (comment lines
    above the branch's first statement go with it; a comment right after ``else:`` only)."""
    first, last = m.src.stmt_lines(node)
    o_first = whole_lines(m.src, node.orelse[0])[0]
    o_last = m.src.stmt_lines(node.orelse[-1])[1]
    if o_first <= (node.body[-1].end_lineno or 0) + 1:  # comments above else: keep only after it
        o_first = m.src.stmt_lines(node.orelse[0])[0]
    o_start, o_end = m.src.line_span(o_first, o_last)
    kept = reindent(m.src.text[o_start:o_end], m.src.indent_of(node.orelse[0].lineno), m.src.indent_of(node.lineno))
    return Edit(*m.src.line_span(first, last), kept)


def delete_definition(m: Module, st: ast.stmt) -> Edit:
    """The edit deleting a statement with its comment lines; a definition standing between blank lines
    takes the blank lines above it along."""
    first, last = whole_lines(m.src, st)
    lines = m.src.lines
    after_blank = last >= len(lines) or lines[last].strip() == ""
    if after_blank:
        while first > 1 and lines[first - 2].strip() == "":
            first -= 1
    return Edit(*m.src.line_span(first, last), "")


def renamed_definition(text: str, old: str, new: str) -> str:
    """``text`` (a function definition, decorators included) with ``def old(`` renamed ``def new(``;
    signature lines that continue under the opening parenthesis move with it."""
    at = text.find(f"def {old}(")
    if at < 0:
        raise ValueError(f"no 'def {old}(' in the definition")
    line_start = text.rfind("\n", 0, at) + 1
    paren_col = at - line_start + len(f"def {old}(")
    head, rest = text[:at], text[at + len(f"def {old}"):]
    lines = rest.split("\n")
    shift = len(new) - len(old)
    depth = lines[0].count("(") - lines[0].count(")")
    for i in range(1, len(lines)):
        if depth <= 0:
            break
        line = lines[i]
        if shift and len(line) - len(line.lstrip(" ")) == paren_col:
            lines[i] = " " * (paren_col + shift) + line.lstrip(" ") if shift > 0 else line[-shift:]
        depth += line.count("(") - line.count(")")
    return f"{head}def {new}" + "\n".join(lines)
