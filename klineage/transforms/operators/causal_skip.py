"""The causal-skip operator: causal attention visits only the key blocks at or below the diagonal;
the mask is applied on the diagonal blocks only.

Recognised structurally: which loop bound is the diagonal, which ``tl.where`` is the causal mask,
which jit-helper flag switches it on.
"""

from __future__ import annotations

import ast

from klineage.schema import pyast
from klineage.transforms._module import Module
from klineage.transforms._source import Edit, apply_edits, shifted_edit
from klineage.transforms._triton import range_call
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._causal import (
    CausalCall,
    call_splits,
    causal_calls,
    causal_loops,
    func_name,
    helper_call,
    loop_splits,
)
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._statements import stmt_span


def _comment_start(m: Module, stmt: ast.stmt) -> int:
    """Offset of the first of the comment lines right above a statement (or of the statement)."""
    first = m.src.stmt_lines(stmt)[0]
    while first > 1 and m.src.lines[first - 2].strip().startswith("#"):
        first -= 1
    return m.src.line_span(first, first)[0]


def _simple(text: str) -> bool:
    try:
        node = pyast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
    )


class CausalSkip(Operator):
    """Causal attention visits only the key blocks at or below the diagonal; the mask is applied on
    the diagonal blocks only."""

    id = "causal-skip"
    feature = "causal_skip"
    name = "Skip key blocks above the causal diagonal"
    intent = (
        "Stop the key loop of causal attention at the diagonal and run the blocks strictly below it "
        "without the causal mask, so about half of the QK^T and PV work disappears."
    )
    carrier = (
        "the key-block loop of an attention kernel: split into an unmasked loop up to the query block's "
        "first row and a masked loop over the diagonal block(s), upper bound min(diagonal end, N)"
    )
    anchor_predicate = "has_dot and n_dots >= 2 and not causal_skip"
    anchor_description = (
        "an attention loop over every key block that applies a causal tl.where mask "
        "(offs_m[:, None] >= offs_n[None, :]) on each block"
    )
    record = "code"


    def _detect(self, m: Module) -> list[Anchor]:
        """A split key loop (present); a single key loop with a causal tl.where mask (applicable)."""
        out = []
        for ls in loop_splits(m):
            a, b = ls.unmasked, ls.masked
            out.append(Anchor("present", a.lineno, b.end_lineno or b.lineno, "unmasked + diagonal key loops",
                              ls.kernel.name))
        for cs in call_splits(m):
            first, second = cs.body[cs.first], cs.body[cs.second]
            out.append(
                Anchor("present", first.lineno, second.end_lineno or second.lineno,
                       "off-diagonal (unmasked) and diagonal (masked) key-block helper calls", cs.kernel.name)
            )
        for cl in causal_loops(m):
            out.append(anchor("applicable", cl.loop, "key loop masking every block causally", cl.kernel))
        for cc in causal_calls(m):
            out.append(anchor("applicable", cc.stmt,
                              f"{func_name(cc.call)} called over every key block, causal mask on"))
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """One loop (or helper call) over every key block up to N, the causal mask on each block."""
        edits = []
        for ls in loop_splits(m):
            a, b, n = ls.unmasked, ls.masked, ls.bound
            ra, rb = range_call(a, m.al), range_call(b, m.al)
            assert ra is not None and rb is not None
            edits.append(Edit(_comment_start(m, a), stmt_span(m, a, a)[1], ""))
            cb = _comment_start(m, b)
            if cb < stmt_span(m, b, b)[0]:
                edits.append(Edit(cb, stmt_span(m, b, b)[0], ""))
            edits.append(Edit(*m.src.span(rb.args[0]), m.src.seg(ra.args[0])))
            edits.append(Edit(*m.src.span(rb.args[1]), m.src.seg(n)))
        for cs in call_splits(m):
            body, i, j, lo, hi, n = cs.body, cs.first, cs.second, cs.lo, cs.hi, cs.bound
            c1, c2 = helper_call(body[i], {}) or body[i].value, body[j].value  # type: ignore[attr-defined]
            s2 = body[j]
            base = m.src.line_span(m.src.stmt_lines(s2)[0], m.src.stmt_lines(s2)[0])[0]
            end = stmt_span(m, s2, s2)[1]
            inner = [
                shifted_edit(m.src.span(c2.args[lo]), base, m.src.seg(c1.args[lo])),
                shifted_edit(m.src.span(c2.args[hi]), base, m.src.seg(n)),
            ]
            text = apply_edits(m.src.text[base:end], inner)
            # comment lines right above the first call describe the split: they go with it
            first = m.src.stmt_lines(body[i])[0]
            while first > 1 and m.src.lines[first - 2].strip().startswith("#"):
                first -= 1
            start = m.src.line_span(first, first)[0]
            indent = m.src.indent_of(body[i].lineno)
            note = f"{indent}# every key block up to {m.src.seg(n)}, the causal mask on each\n"
            edits.append(Edit(start, end, note + text))
        try:
            return self._removed(m, edits)
        except ValueError:  # overlapping edits
            return None


    @staticmethod
    def _split_call(m: Module, found: CausalCall) -> Edit:
        """The edit replacing one masked helper call by an unmasked call below the diagonal and a
        masked one over the diagonal block(s)."""
        st, call, lo, hi, flag = found.stmt, found.call, found.lo, found.hi, found.flag
        a_text, bm, step = found.first_row, found.rows, found.step
        a_p = a_text if _simple(a_text) else f"({a_text})"
        diag = f"{a_p} // {step} * {step}"
        start, end = stmt_span(m, st, st)

        def with_args(new: dict[int, str]) -> str:
            return apply_edits(m.src.text[start:end], [
                shifted_edit(m.src.span(call.args[x]), start, text) for x, text in new.items()
            ])

        ind = m.src.indent_of(st.lineno)
        n_text = m.src.seg(call.args[hi])
        return Edit(start, end, (
            f"{ind}# key blocks below the diagonal: every key precedes every query, no causal mask\n"
            + with_args({hi: diag, flag: "False"})
            + f"{ind}# diagonal block(s): causal mask; blocks above the diagonal are skipped\n"
            + with_args({lo: diag, hi: f"{m.tl}.minimum({a_text} + {bm}, {n_text})"})
        ))

    def _apply(self, m: Module) -> Rewrite | None:
        """Split a causally masked key loop ``range(0, N, BN)`` into ``range(0, A // BN * BN, BN)``
        without the mask (every key precedes every query there) and ``range(A // BN * BN,
        tl.minimum(A + BM, N), BN)`` with it; blocks past the diagonal are never visited. A jit helper
        called over [0, N) with a causal flag (``_causal_calls``) becomes two calls the same way, the
        flag off below the diagonal. With the ``code`` simplify recorded, the expert's split (loops or
        helper calls) goes back exactly."""
        found = causal_loops(m)
        if not found:
            calls = causal_calls(m)
            if not calls:
                return None
            return self._edited(m, [self._split_call(m, calls[0])], {}, "apply")
        edits = []
        for cl in found[:1]:
            loop, where, mask_stmt, a_text, bm, step, n = (
                cl.loop, cl.where, cl.mask, cl.first_row, cl.rows, cl.step, cl.bound
            )
            rc = range_call(loop, m.al)
            assert rc is not None
            a_p = a_text if _simple(a_text) else f"({a_text})"
            diag = f"{a_p} // {step} * {step}"
            start, end = stmt_span(m, loop, loop)
            text = m.src.text[start:end]

            def rel(node: ast.AST, new: str, _start: int = start) -> Edit:
                s, e = m.src.span(node)
                return Edit(s - _start, e - _start, new)

            def drop(st: ast.stmt, _start: int = start) -> Edit:
                s, e = stmt_span(m, st, st)
                return Edit(s - _start, e - _start, "")

            ind = m.src.indent_of(loop.lineno)
            below = [rel(rc.args[1], diag), drop(where)] + ([drop(mask_stmt)] if mask_stmt is not None else [])
            diagonal = [rel(rc.args[0], diag), rel(rc.args[1], f"{m.tl}.minimum({a_text} + {bm}, {n})")]
            new = (
                f"{ind}# key blocks below the diagonal: every key precedes every query, no causal mask\n"
                + apply_edits(text, below)
                + f"{ind}# diagonal block(s): causal mask; blocks above the diagonal are skipped\n"
                + apply_edits(text, diagonal)
            )
            edits.append(Edit(start, end, new))
        return self._edited(m, edits, {}, "apply")
