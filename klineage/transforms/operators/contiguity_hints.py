"""The contiguity-hints operator: ``tl.multiple_of`` / ``tl.max_contiguous`` on block offsets."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import Kernel, tl_call, tl_func
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._statements import assign

_HINTS = ("multiple_of", "max_contiguous")


class ContiguityHints(Operator):
    """``tl.multiple_of`` / ``tl.max_contiguous`` on block offsets."""

    id = "contiguity-hints"
    feature = "contiguity_hints"
    name = "Contiguity and alignment hints"
    intent = "Tell the compiler that block offsets are contiguous and aligned so loads and stores vectorize."
    carrier = "offset expressions wrapped in tl.max_contiguous(tl.multiple_of(..., B), B)"
    anchor_predicate = "n_kernels >= 1 and not contiguity_hints"
    anchor_description = "an offset vector pid * BLOCK + tl.arange(0, BLOCK) used for loads/stores"
    record = "hints"

    def _hint_calls(self, m: Module) -> list[ast.Call]:
        """Outermost hint calls."""
        out: list[ast.Call] = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if tl_call(n, m.al, *_HINTS) and not tl_call(m.src.parent(n), m.al, *_HINTS):
                    out.append(n)
        return out

    def _candidates(self, m: Module) -> list[tuple[Kernel, ast.Assign, str]]:
        out: list[tuple[Kernel, ast.Assign, str]] = []
        for k in m.kernels:
            for st in ast.walk(k.node):
                if not isinstance(st, ast.Assign) or assign(st) is None:
                    continue
                v = st.value
                if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add)):
                    continue
                for mul, ar in ((v.left, v.right), (v.right, v.left)):
                    if (
                        tl_call(ar, m.al, "arange")
                        and len(ar.args) == 2
                        and isinstance(mul, ast.BinOp)
                        and isinstance(mul.op, ast.Mult)
                    ):
                        block = m.src.seg(ar.args[1])
                        if block in (m.src.seg(mul.left), m.src.seg(mul.right)):
                            out.append((k, st, block))
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """Hint calls (present); ``pid * B + tl.arange(0, B)`` offsets without hints (applicable)."""
        out = [anchor("present", c, f"{tl_func(c, m.al)} hint", None) for c in self._hint_calls(m)]
        out += [
            anchor("applicable", st, f"block offsets {st.targets[0].id} in {k.name}", k)  # type: ignore
            for k, st, _ in self._candidates(m)
        ]
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Unwrap every hint; a statement reduced to ``x = x`` is deleted."""
        edits = []
        for call in self._hint_calls(m):
            inner: ast.expr = call
            while tl_func(inner, m.al) in _HINTS and inner.args:  # type: ignore[attr-defined]
                inner = inner.args[0]  # type: ignore[attr-defined]
            parent = m.src.parent(call)
            if (
                isinstance(parent, ast.Assign)
                and len(parent.targets) == 1
                and isinstance(inner, ast.Name)
                and isinstance(parent.targets[0], ast.Name)
                and parent.targets[0].id == inner.id
            ):
                edits.append(Edit(*m.src.line_span(parent.lineno, parent.end_lineno or parent.lineno), ""))
            else:
                edits.append(Edit(*m.src.span(call), m.src.seg(inner)))
        return self._removed(m, edits)

    def _apply(self, m: Module) -> Rewrite | None:
        """Wrap ``pid * B + tl.arange(0, B)`` offsets in ``tl.max_contiguous(tl.multiple_of(..., B), B)``;
        with the ``hints`` simplify recorded, put back the expert's hint calls and statements where
        they were (they may sit on other offsets than the ones this rule would pick)."""
        tl = m.tl
        edits = [
            Edit(
                *m.src.span(st.value),
                f"{tl}.max_contiguous({tl}.multiple_of({m.src.seg(st.value)}, {b}), {b})",
            )
            for _, st, b in self._candidates(m)
        ]
        return self._edited(m, edits, {}, "apply")
