"""Shared pieces of the expression operators (exp2, rsqrt, fp32-accumulate, dot-accumulate): the
template rewriting single expressions in place, and the constants and readers they share."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import is_tl_attr, tl_func
from klineage.transforms.operator import Operator, Rewrite

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def paren(m: Module, node: ast.expr) -> str:
    """The source of ``node``, parenthesised unless it is atomic."""
    text = m.src.seg(node)
    return text if isinstance(node, _ATOMIC) else f"({text})"


def is_exp2(m: Module, node: ast.AST) -> bool:
    """True for a one-argument ``tl.exp2`` / ``tl.math.exp2`` call."""
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return False
    if tl_func(node, m.al) == "exp2":
        return True
    name = node.func
    return isinstance(name, ast.Attribute) and name.attr == "exp2" and is_tl_attr(name.value, m.al, "math")


def const_value(m: Module, node: ast.expr) -> float | None:
    """A numeric literal, or the value of a module-level ``NAME = <number>``; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.Name):
        for st in m.src.tree.body:
            if (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == node.id
                and isinstance(st.value, ast.Constant)
                and isinstance(st.value.value, (int, float))
            ):
                return float(st.value.value)
    return None


class ExpressionRewrite(Operator):
    """An operator that rewrites expressions in place. Subclasses say which edits remove the
    optimization (``_simplify_edits``) and which add it (``_apply_edits``); ``simplify`` records the
    edited hunks so that ``apply(rewrites=...)`` puts the expert's own expressions back byte for byte."""

    record = "rewrites"

    def _simplify_edits(self, m: Module) -> list[Edit]:
        raise NotImplementedError

    def _apply_edits(self, m: Module) -> list[Edit]:
        raise NotImplementedError

    def _simplify(self, m: Module) -> Rewrite | None:
        """Remove the optimization everywhere it is present (see the subclass docstring for the
        rewrite); None when it is nowhere."""
        return self._removed(m, self._simplify_edits(m))

    def _apply(self, m: Module) -> Rewrite | None:
        """Add the optimization everywhere it applies (see the subclass docstring); None when nowhere.
        With the ``rewrites`` simplify recorded, the expert's expressions go back exactly as written."""
        return self._edited(m, self._apply_edits(m), {}, "apply")
