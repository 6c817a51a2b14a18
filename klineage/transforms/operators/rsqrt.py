"""The rsqrt operator: ``1 / sqrt(x)`` as one ``rsqrt(x)``."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import tl_call, tl_func
from klineage.transforms.operator import Anchor
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._expression import ExpressionRewrite


class Rsqrt(ExpressionRewrite):
    """``1 / sqrt(x)`` as ``rsqrt(x)``: apply turns ``1 / tl.sqrt(x)`` into ``tl.rsqrt(x)`` and
    ``y / tl.sqrt(x)`` into ``y * tl.rsqrt(x)``; simplify turns ``tl.rsqrt(x)`` into ``1.0 / tl.sqrt(x)``."""

    id = "rsqrt"
    feature = "uses_rsqrt"
    name = "rsqrt instead of 1/sqrt"
    intent = "Replace a square root and a division by one reciprocal-square-root instruction."
    carrier = "1.0 / tl.sqrt(x) (or y / tl.sqrt(x)) rewritten with tl.rsqrt"
    anchor_predicate = "row_reduction and not uses_rsqrt"
    anchor_description = "a division by tl.sqrt (normalization kernels)"

    def _detect(self, m: Module) -> list[Anchor]:
        """rsqrt calls (present); divisions by tl.sqrt (applicable)."""
        out = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if tl_func(n, m.al) == "rsqrt":
                    out.append(anchor("present", n, "rsqrt", k))
                elif self._div(m, n):
                    out.append(anchor("applicable", n, "division by tl.sqrt", k))
        return out

    @staticmethod
    def _div(m: Module, n: ast.AST) -> bool:
        return (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Div)
            and tl_call(n.right, m.al, "sqrt")
            and len(n.right.args) == 1
        )

    def _simplify_edits(self, m: Module) -> list[Edit]:
        edits = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if tl_func(n, m.al) == "rsqrt" and len(n.args) == 1:  # type: ignore[attr-defined]
                    text = f"1.0 / {m.tl}.sqrt({m.src.seg(n.args[0])})"  # type: ignore[attr-defined]
                    if isinstance(m.src.parent(n), (ast.BinOp, ast.UnaryOp, ast.Attribute, ast.Subscript)):
                        text = f"({text})"
                    edits.append(Edit(*m.src.span(n), text))
        return edits

    def _apply_edits(self, m: Module) -> list[Edit]:
        edits = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if not self._div(m, n):
                    continue
                arg = m.src.seg(n.right.args[0])  # type: ignore[attr-defined]
                left = n.left  # type: ignore[attr-defined]
                if isinstance(left, ast.Constant) and left.value == 1:
                    text = f"{m.tl}.rsqrt({arg})"
                else:
                    text = f"{m.src.seg(left)} * {m.tl}.rsqrt({arg})"
                    if isinstance(m.src.parent(n), (ast.BinOp, ast.UnaryOp, ast.Attribute, ast.Subscript)):
                        text = f"({text})"
                edits.append(Edit(*m.src.span(n), text))
        return edits
