"""Arithmetic operators: exp2, rsqrt, fp32-accumulate, dot-accumulate.

Each rewrites single expressions in place into an equivalent form that is cheaper or more exact.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from klineage.transforms._source import Edit, apply_edits
from klineage.transforms._triton import Kernel, is_tl_attr, kwarg, tl_func
from klineage.transforms.features import accumulators, derived_names
from klineage.transforms.operator import Anchor, Direction, Operator, Rewrite
from klineage.transforms.operators._common import Module, anchor, has_dot, parse
from klineage.transforms.operators._restore import check_params, hunks, require_list, rewrite_with_hunks

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def _paren(m: Module, node: ast.expr) -> str:
    text = m.src.seg(node)
    return text if isinstance(node, _ATOMIC) else f"({text})"


def _is_exp2(m: Module, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return False
    if tl_func(node, m.al) == "exp2":
        return True
    name = node.func
    return isinstance(name, ast.Attribute) and name.attr == "exp2" and is_tl_attr(name.value, m.al, "math")


def _const_value(m: Module, node: ast.expr) -> float | None:
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


class _ExpressionRewrite(Operator):
    """An operator that rewrites expressions in place. Subclasses say which edits remove the
    optimization (``_simplify_edits``) and which add it (``_apply_edits``); ``simplify`` records the
    edited hunks so that ``apply(rewrites=...)`` puts the expert's own expressions back byte for byte."""

    def _simplify_edits(self, m: Module) -> list[Edit]:
        raise NotImplementedError

    def _apply_edits(self, m: Module) -> list[Edit]:
        raise NotImplementedError

    def _edited(self, source: str, make_edits: Callable[[Module], list[Edit]], direction: Direction) -> Rewrite | None:
        """``source`` with ``make_edits(module)`` applied (None when it does not parse or nothing is
        edited); a simplify records its hunks as the ``rewrites`` parameter."""
        m = parse(source)
        edits = make_edits(m) if m is not None else []
        if not edits:
            return None
        params = {"rewrites": hunks(source, edits)} if direction == "simplify" else {}
        return self._rewrite(source, apply_edits(source, edits), params, direction)

    def simplify(self, source: str) -> Rewrite | None:
        """Remove the optimization everywhere it is present (see the class docstring for the
        rewrite); None when it is nowhere."""
        return self._edited(source, self._simplify_edits, "simplify")

    def apply(self, source: str, rewrites: list[dict[str, Any]] | None = None, **params: Any) -> Rewrite | None:
        """Add the optimization everywhere it applies (see the class docstring); None when nowhere.
        With the ``rewrites`` simplify recorded, the expert's expressions go back exactly as written."""
        check_params(self.id, params, ())
        if require_list(self.id, "rewrites", rewrites) is not None:
            return rewrite_with_hunks(self, source, rewrites, {"rewrites": rewrites})
        return self._edited(source, self._apply_edits, "apply")


class Exp2(_ExpressionRewrite):
    """``exp(x)`` as ``exp2(x * log2(e))``: apply turns ``exp(x)`` into ``exp2(x * 1.4426950408889634)``
    (``exp(x * ln 2)`` into ``exp2(x)``); simplify turns ``exp2(a * LOG2E)`` into ``exp(a)`` and any
    other ``exp2(x)`` into ``exp(x * ln 2)``."""

    id = "exp2"
    name = "exp2 instead of exp"
    intent = "Compute exponentials with the hardware exp2 instruction, folding log2(e) into a multiply."
    carrier = "tl.exp calls rewritten as tl.exp2(x * 1.4426950408889634)"
    anchor_predicate = "not uses_exp2 and (row_reduction or online_softmax or n_dots >= 2)"
    anchor_description = "tl.exp calls in softmax-like code"

    def _calls(self, m: Module, exp2: bool) -> list[ast.Call]:
        out = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if (exp2 and _is_exp2(m, n)) or (not exp2 and tl_func(n, m.al) == "exp" and len(n.args) == 1):  # type: ignore
                    out.append(n)
        return out  # type: ignore[return-value]

    def detect(self, source: str) -> list[Anchor]:
        """exp2 calls (present); exp calls (applicable)."""
        m = parse(source)
        if m is None:
            return []
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
                    v = _const_value(m, b)
                    if v is not None and math.isclose(v, LOG2E, rel_tol=1e-9):
                        text = f"{m.tl}.exp({m.src.seg(a)})"
                        break
            if text is None:
                text = f"{m.tl}.exp({_paren(m, x)} * {LN2})"
            edits.append(Edit(*m.src.span(c), text))
        return edits

    def _apply_edits(self, m: Module) -> list[Edit]:
        edits = []
        for c in self._calls(m, False):
            x = c.args[0]
            text = None
            if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mult):
                v = _const_value(m, x.right)
                if v is not None and math.isclose(v, LN2, rel_tol=1e-9):
                    text = f"{m.tl}.exp2({m.src.seg(x.left)})"
            if text is None:
                text = f"{m.tl}.exp2({_paren(m, x)} * {LOG2E})"
            edits.append(Edit(*m.src.span(c), text))
        return edits


class Rsqrt(_ExpressionRewrite):
    """``1 / sqrt(x)`` as ``rsqrt(x)``: apply turns ``1 / tl.sqrt(x)`` into ``tl.rsqrt(x)`` and
    ``y / tl.sqrt(x)`` into ``y * tl.rsqrt(x)``; simplify turns ``tl.rsqrt(x)`` into ``1.0 / tl.sqrt(x)``."""

    id = "rsqrt"
    name = "rsqrt instead of 1/sqrt"
    intent = "Replace a square root and a division by one reciprocal-square-root instruction."
    carrier = "1.0 / tl.sqrt(x) (or y / tl.sqrt(x)) rewritten with tl.rsqrt"
    anchor_predicate = "row_reduction and not uses_rsqrt"
    anchor_description = "a division by tl.sqrt (normalization kernels)"

    def detect(self, source: str) -> list[Anchor]:
        """rsqrt calls (present); divisions by tl.sqrt (applicable)."""
        m = parse(source)
        if m is None:
            return []
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
            and tl_func(n.right, m.al) == "sqrt"
            and len(n.right.args) == 1
        )  # type: ignore[attr-defined]

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


def _is_upcast(m: Module, n: ast.AST) -> bool:
    return (
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and len(n.args) == 1
        and is_tl_attr(n.args[0], m.al, "float32")
    )


class Fp32Accumulate(_ExpressionRewrite):
    """Accumulate in fp32 whatever the storage dtype: apply upcasts the vector loads of non-dot
    kernels to fp32 (stores downcast implicitly) unless some upcast or fp32 accumulator is already
    there; simplify drops ``.to(tl.float32)`` on loads and gives tl.dot accumulators the dtype of the
    first pointer parameter (and tl.dot the same ``out_dtype``)."""

    id = "fp32-accumulate"
    name = "fp32 accumulation"
    intent = "Upcast loaded values and accumulators to fp32 so reductions and dot products keep precision."
    carrier = ".to(tl.float32) on loads and dtype=tl.float32 accumulators (downcast at the store)"
    anchor_predicate = "(has_dot or row_reduction) and not fp32_accumulate"
    anchor_description = "loads feeding reductions, or accumulators in the storage dtype"

    def _upcast_loads(self, m: Module) -> list[ast.Call]:
        return [
            n
            for k in m.kernels
            for n in ast.walk(k.node)
            if _is_upcast(m, n) and tl_func(n.func.value, m.al) == "load"
        ]  # type: ignore

    def _fp32_accs(self, m: Module) -> list[tuple[Kernel, ast.Call, ast.expr, str]]:
        out = []
        for k in m.kernels:
            accs = set(accumulators(k, m.al))
            for st in ast.walk(k.node):
                if (
                    isinstance(st, ast.Assign)
                    and len(st.targets) == 1
                    and isinstance(st.targets[0], ast.Name)
                    and st.targets[0].id in accs
                    and tl_func(st.value, m.al) in ("zeros", "full")
                ):
                    call = st.value
                    dt = kwarg(call, "dtype")  # type: ignore[arg-type]
                    if dt is None and tl_func(call, m.al) == "full" and len(call.args) >= 3:  # type: ignore
                        dt = call.args[2]  # type: ignore[attr-defined]
                    if dt is not None and is_tl_attr(dt, m.al, "float32"):
                        out.append((k, call, dt, st.targets[0].id))  # type: ignore[arg-type]
        return out

    def _vector_loads(self, m: Module) -> list[ast.Call]:
        out = []
        for k in m.kernels:
            if has_dot(k, m):
                continue
            vec = derived_names(k.node, m.al, "arange")
            for n in ast.walk(k.node):
                if (
                    tl_func(n, m.al) == "load"
                    and n.args
                    and not _is_upcast(m, m.src.parent(n))
                    and any(isinstance(x, ast.Name) and x.id in vec for x in ast.walk(n.args[0]))
                ):  # type: ignore
                    parent = m.src.parent(n)
                    if isinstance(parent, ast.Attribute) and parent.attr == "to":
                        continue
                    out.append(n)
        return out  # type: ignore[return-value]

    def detect(self, source: str) -> list[Anchor]:
        """fp32 upcasts / dot accumulators (present); vector loads of row kernels (applicable)."""
        m = parse(source)
        if m is None:
            return []
        out = [anchor("present", c, "load upcast to fp32") for c in self._upcast_loads(m)]
        out += [anchor("present", c, f"fp32 accumulator {name}", k) for k, c, _, name in self._fp32_accs(m)]
        if not out:
            out = [anchor("applicable", c, "load in the storage dtype") for c in self._vector_loads(m)]
        return out

    def _simplify_edits(self, m: Module) -> list[Edit]:
        edits = [Edit(*m.src.span(c), m.src.seg(c.func.value)) for c in self._upcast_loads(m)]  # type: ignore
        for k, _call, dt, _name in self._fp32_accs(m):
            ptr = next((p.name for p in k.params if "ptr" in p.name.lower()), None)
            if ptr is None:
                continue
            elt = f"{ptr}.dtype.element_ty"
            edits.append(Edit(*m.src.span(dt), elt))
            for n in ast.walk(k.node):
                if tl_func(n, m.al) == "dot" and kwarg(n, "out_dtype") is None:  # type: ignore[arg-type]
                    end = m.src.span(n)[1] - 1
                    edits.append(Edit(end, end, f", out_dtype={elt}"))
        return edits

    def _apply_edits(self, m: Module) -> list[Edit]:
        if self._upcast_loads(m) or self._fp32_accs(m):
            return []
        return [Edit(*m.src.span(c), f"{m.src.seg(c)}.to({m.tl}.float32)") for c in self._vector_loads(m)]


class DotAccumulate(_ExpressionRewrite):
    """``acc = tl.dot(a, b, acc)`` instead of ``acc += tl.dot(a, b)``: apply turns ``acc += tl.dot(a, b)``
    / ``acc = e + tl.dot(a, b)`` into ``acc = tl.dot(a, b, e)``; simplify turns ``x = tl.dot(a, b, acc)``
    into ``x = acc + tl.dot(a, b)`` (``x += tl.dot(a, b)`` when x is acc)."""

    id = "dot-accumulate"
    name = "Accumulate inside tl.dot"
    intent = "Pass the accumulator to tl.dot so the MMA accumulates in place instead of a separate add."
    carrier = "acc += tl.dot(a, b) rewritten as acc = tl.dot(a, b, acc)"
    anchor_predicate = "has_dot and not dot_accumulate"
    anchor_description = "a tl.dot result added to an accumulator"

    def _forms(self, m: Module) -> tuple[list[ast.Call], list[tuple[ast.stmt, str, ast.Call, str]]]:
        present, applicable = [], []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if tl_func(n, m.al) == "dot" and (len(n.args) >= 3 or kwarg(n, "acc") is not None):  # type: ignore
                    present.append(n)
                if (
                    isinstance(n, ast.AugAssign)
                    and isinstance(n.op, ast.Add)
                    and tl_func(n.value, m.al) == "dot"
                    and len(n.value.args) == 2
                    and not n.value.keywords
                ):  # type: ignore[attr-defined]
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

    def detect(self, source: str) -> list[Anchor]:
        """tl.dot with an accumulator argument (present); ``acc += tl.dot(...)`` (applicable)."""
        m = parse(source)
        if m is None:
            return []
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
                text = f"{_paren(m, acc)} + {dot}"
                edits.append(Edit(*m.src.span(c), text if isinstance(st, ast.Assign) else f"({text})"))
        return edits

    def _apply_edits(self, m: Module) -> list[Edit]:
        edits = []
        for st, target, d, acc in self._forms(m)[1]:
            dot = f"{m.src.seg(d.func)}({m.src.seg(d.args[0])}, {m.src.seg(d.args[1])}, {acc})"
            edits.append(Edit(*m.src.span(st), f"{target} = {dot}"))
        return edits
