"""The fp32-accumulate operator: low-precision loads upcast so reductions accumulate in fp32."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import Kernel, is_tl_attr, kwarg, tl_call, tl_func
from klineage.transforms.features import accumulators, derived_names
from klineage.transforms.operator import Anchor
from klineage.transforms.operators._common import anchor, has_dot
from klineage.transforms.operators._expression import ExpressionRewrite


def _upcast_of(m: Module, n: ast.AST | None) -> ast.expr | None:
    """``x`` of an upcast ``x.to(tl.float32)``, else None."""
    if (
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and len(n.args) == 1
        and is_tl_attr(n.args[0], m.al, "float32")
    ):
        return n.func.value
    return None


def _is_upcast(m: Module, n: ast.AST | None) -> bool:
    return _upcast_of(m, n) is not None


class Fp32Accumulate(ExpressionRewrite):
    """Accumulate in fp32 whatever the storage dtype: apply upcasts the vector loads of non-dot
    kernels to fp32 (stores downcast implicitly) unless some upcast or fp32 accumulator is already
    there; simplify drops ``.to(tl.float32)`` on loads and gives tl.dot accumulators the dtype of the
    first pointer parameter (and tl.dot the same ``out_dtype``)."""

    id = "fp32-accumulate"
    feature = "fp32_accumulate"
    name = "fp32 accumulation"
    intent = "Upcast loaded values and accumulators to fp32 so reductions and dot products keep precision."
    carrier = ".to(tl.float32) on loads and dtype=tl.float32 accumulators (downcast at the store)"
    anchor_predicate = "row_reduction and not fp32_accumulate"
    anchor_description = "loads feeding reductions, or accumulators in the storage dtype"

    def _upcast_loads(self, m: Module) -> list[ast.Call]:
        return [
            n
            for k in m.kernels
            for n in ast.walk(k.node)
            if isinstance(n, ast.Call) and tl_call(_upcast_of(m, n), m.al, "load")
        ]

    def _fp32_accs(self, m: Module) -> list[tuple[Kernel, ast.Call, ast.expr, str]]:
        out: list[tuple[Kernel, ast.Call, ast.expr, str]] = []
        for k in m.kernels:
            accs = set(accumulators(k, m.al))
            for st in ast.walk(k.node):
                if (
                    isinstance(st, ast.Assign)
                    and len(st.targets) == 1
                    and isinstance(st.targets[0], ast.Name)
                    and st.targets[0].id in accs
                    and tl_call(st.value, m.al, "zeros", "full")
                ):
                    call = st.value
                    dt = kwarg(call, "dtype")
                    if dt is None and tl_call(call, m.al, "full") and len(call.args) >= 3:
                        dt = call.args[2]
                    if dt is not None and is_tl_attr(dt, m.al, "float32"):
                        out.append((k, call, dt, st.targets[0].id))
        return out

    def _vector_loads(self, m: Module) -> list[ast.Call]:
        out = []
        for k in m.kernels:
            if has_dot(k, m):
                continue
            vec = derived_names(k.node, m.al, "arange")
            for n in ast.walk(k.node):
                if (
                    tl_call(n, m.al, "load")
                    and n.args
                    and not _is_upcast(m, m.src.parent(n))
                    and any(isinstance(x, ast.Name) and x.id in vec for x in ast.walk(n.args[0]))
                ):
                    parent = m.src.parent(n)
                    if isinstance(parent, ast.Attribute) and parent.attr == "to":
                        continue
                    out.append(n)
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """fp32 upcasts / dot accumulators (present); vector loads of row kernels (applicable)."""
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
