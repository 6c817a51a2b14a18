"""The exp2 operator: ``exp(x)`` computed as ``exp2(x * log2(e))``."""

from __future__ import annotations

import ast
import math

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import tl_func
from klineage.transforms.operator import Anchor
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._expression import LN2, LOG2E, ExpressionRewrite, const_value, is_exp2, paren


class Exp2(ExpressionRewrite):
    """``exp(x)`` as ``exp2(x * log2(e))``: apply turns ``exp(x)`` into ``exp2(x * 1.4426950408889634)``
    (``exp(x * ln 2)`` into ``exp2(x)``); simplify turns ``exp2(a * LOG2E)`` into ``exp(a)`` and any
    other ``exp2(x)`` into ``exp(x * ln 2)``."""

    id = "exp2"
    feature = "uses_exp2"
    name = "exp2 instead of exp"
    intent = "Compute exponentials with the hardware exp2 instruction, folding log2(e) into a multiply."
    carrier = "tl.exp calls rewritten as tl.exp2(x * 1.4426950408889634)"
    anchor_predicate = "not uses_exp2 and (row_reduction or online_softmax or n_dots >= 2)"
    anchor_description = "tl.exp calls in softmax-like code"

    def _calls(self, m: Module, exp2: bool) -> list[ast.Call]:
        out = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if (exp2 and is_exp2(m, n)) or (not exp2 and tl_func(n, m.al) == "exp" and len(n.args) == 1):  # type: ignore
                    out.append(n)
        return out  # type: ignore[return-value]

    def _detect(self, m: Module) -> list[Anchor]:
        """exp2 calls (present); exp calls (applicable)."""
        return [anchor("present", c, "exp2") for c in self._calls(m, True)] + [
            anchor("applicable", c, "exp") for c in self._calls(m, False)
        ]

    def _simplify_edits(self, m: Module) -> list[Edit]:
        edits = []
        for c in self._calls(m, True):
            x = c.args[0]
            text = None
            if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mult):
                for a, b in ((x.left, x.right), (x.right, x.left)):
                    v = const_value(m, b)
                    if v is not None and math.isclose(v, LOG2E, rel_tol=1e-9):
                        text = f"{m.tl}.exp({m.src.seg(a)})"
                        break
            if text is None:
                text = f"{m.tl}.exp({paren(m, x)} * {LN2})"
            edits.append(Edit(*m.src.span(c), text))
        return edits

    def _apply_edits(self, m: Module) -> list[Edit]:
        edits = []
        for c in self._calls(m, False):
            x = c.args[0]
            text = None
            if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mult):
                v = const_value(m, x.right)
                if v is not None and math.isclose(v, LN2, rel_tol=1e-9):
                    text = f"{m.tl}.exp2({m.src.seg(x.left)})"
            if text is None:
                text = f"{m.tl}.exp2({paren(m, x)} * {LOG2E})"
            edits.append(Edit(*m.src.span(c), text))
        return edits
