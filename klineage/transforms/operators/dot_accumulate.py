"""The dot-accumulate operator: ``acc += tl.dot(a, b)`` as ``acc = tl.dot(a, b, acc)``."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import kwarg, tl_call, tl_func
from klineage.transforms.operator import Anchor
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._expression import ExpressionRewrite, paren


class DotAccumulate(ExpressionRewrite):
    """``acc = tl.dot(a, b, acc)`` instead of ``acc += tl.dot(a, b)``: apply turns ``acc += tl.dot(a, b)``
    / ``acc = e + tl.dot(a, b)`` into ``acc = tl.dot(a, b, e)``; simplify turns ``x = tl.dot(a, b, acc)``
    into ``x = acc + tl.dot(a, b)`` (``x += tl.dot(a, b)`` when x is acc)."""

    id = "dot-accumulate"
    feature = "dot_accumulate"
    name = "Accumulate inside tl.dot"
    intent = "Pass the accumulator to tl.dot so the MMA accumulates in place instead of a separate add."
    carrier = "acc += tl.dot(a, b) rewritten as acc = tl.dot(a, b, acc)"
    anchor_predicate = "has_dot and not dot_accumulate"
    anchor_description = "a tl.dot result added to an accumulator"

    def _forms(self, m: Module) -> tuple[list[ast.Call], list[tuple[ast.stmt, str, ast.Call, str]]]:
        present, applicable = [], []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if tl_call(n, m.al, "dot") and (len(n.args) >= 3 or kwarg(n, "acc") is not None):
                    present.append(n)
                if (
                    isinstance(n, ast.AugAssign)
                    and isinstance(n.op, ast.Add)
                    and tl_call(n.value, m.al, "dot")
                    and len(n.value.args) == 2
                    and not n.value.keywords
                ):
                    applicable.append((n, m.src.seg(n.target), n.value, m.src.seg(n.target)))
                elif (
                    isinstance(n, ast.Assign)
                    and len(n.targets) == 1
                    and isinstance(n.value, ast.BinOp)
                    and isinstance(n.value.op, ast.Add)
                ):
                    for d, other in ((n.value.right, n.value.left), (n.value.left, n.value.right)):
                        if tl_func(d, m.al) == "dot" and len(d.args) == 2 and not d.keywords:  # type: ignore
                            applicable.append((n, m.src.seg(n.targets[0]), d, m.src.seg(other)))  # type: ignore
                            break
        return present, applicable  # type: ignore[return-value]

    def _detect(self, m: Module) -> list[Anchor]:
        """tl.dot with an accumulator argument (present); ``acc += tl.dot(...)`` (applicable)."""
        present, applicable = self._forms(m)
        return [anchor("present", c, "tl.dot accumulates in place") for c in present] + [
            anchor("applicable", st, f"{t} += tl.dot(...)") for st, t, _, _ in applicable
        ]

    def _simplify_edits(self, m: Module) -> list[Edit]:
        edits = []
        for c in self._forms(m)[0]:
            acc = c.args[2] if len(c.args) >= 3 else kwarg(c, "acc")
            assert acc is not None
            kws = [m.src.seg(kw) for kw in c.keywords if kw.arg != "acc"]
            dot = f"{m.src.seg(c.func)}({', '.join([m.src.seg(a) for a in c.args[:2]] + kws)})"
            st = m.src.parent(c)
            if (
                isinstance(st, ast.Assign)
                and st.value is c
                and len(st.targets) == 1
                and m.src.seg(st.targets[0]) == m.src.seg(acc)
            ):
                edits.append(Edit(*m.src.span(st), f"{m.src.seg(acc)} += {dot}"))
            else:
                text = f"{paren(m, acc)} + {dot}"
                edits.append(Edit(*m.src.span(c), text if isinstance(st, ast.Assign) else f"({text})"))
        return edits

    def _apply_edits(self, m: Module) -> list[Edit]:
        edits = []
        for st, target, d, acc in self._forms(m)[1]:
            dot = f"{m.src.seg(d.func)}({m.src.seg(d.args[0])}, {m.src.seg(d.args[1])}, {acc})"
            edits.append(Edit(*m.src.span(st), f"{target} = {dot}"))
        return edits
