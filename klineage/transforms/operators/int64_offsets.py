"""The int64-offsets operator: pid-derived indices cast to int64 before they multiply a stride."""

from __future__ import annotations

import ast

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import Kernel, is_tl_attr, tl_call
from klineage.transforms.features import pid_derived
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import anchor


class Int64Offsets(Operator):
    """64-bit row offsets."""

    id = "int64-offsets"
    feature = "int64_offsets"
    name = "64-bit offsets"
    intent = "Compute row offsets in 64 bits so rows x stride beyond 2^31 elements do not overflow."
    carrier = "program-id derived indices cast with .to(tl.int64) before multiplying by a stride"
    anchor_predicate = "n_kernels >= 1 and not int64_offsets"
    anchor_description = "a program-id derived index multiplied by a stride or size parameter"
    record = "casts"

    def _casts(self, m: Module) -> list[tuple[ast.Call, ast.expr]]:
        out = []
        for k in m.kernels:
            for n in ast.walk(k.node):
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "to"
                    and n.args
                    and is_tl_attr(n.args[0], m.al, "int64")
                ):
                    out.append((n, n.func.value))
                elif tl_call(n, m.al, "cast") and len(n.args) >= 2 and is_tl_attr(n.args[1], m.al, "int64"):
                    out.append((n, n.args[0]))
        return out

    def _candidates(self, m: Module) -> list[tuple[Kernel, ast.expr]]:
        out = []
        for k in m.kernels:
            # An index comes from the program id and never from loaded data: casting a loaded value
            # (``x * scale`` with x = tl.load(...)) would truncate it (seen on heldout/scaled_softmax).
            pid = pid_derived(k.node, m.al) - pid_derived(k.node, m.al, "load")
            runtime = {p.name for p in k.params if not p.constexpr}
            for n in ast.walk(k.node):
                if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)):
                    continue
                for idx, other in ((n.left, n.right), (n.right, n.left)):
                    base = idx.value if isinstance(idx, ast.Subscript) else idx
                    if (
                        isinstance(base, ast.Name)
                        and base.id in pid
                        and isinstance(other, ast.Name)
                        and other.id in runtime
                    ):
                        out.append((k, idx))
                        break
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """int64 casts (present); pid-derived index x runtime stride products (applicable)."""
        out = [anchor("present", c, "cast to tl.int64") for c, _ in self._casts(m)]
        if not out:
            out = [
                anchor("applicable", e, f"32-bit index {m.src.seg(e)} times a stride", k)
                for k, e in self._candidates(m)
            ]
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Remove every cast to tl.int64 (32-bit offsets)."""
        casts = self._casts(m)
        inner_ids = {id(x) for c, _ in casts for x in ast.walk(c) if x is not c}
        edits = [Edit(*m.src.span(c), m.src.seg(e)) for c, e in casts if id(c) not in inner_ids]
        return self._removed(m, edits)

    def _apply(self, m: Module) -> Rewrite | None:
        """Cast the pid-derived index of every ``index * stride`` product to tl.int64; with the
        ``casts`` simplify recorded, put back the expert's casts (where and how they were written)."""
        if self._casts(m):
            return None
        seen: set[int] = set()
        edits = []
        for _, e in self._candidates(m):
            if id(e) in seen:
                continue
            seen.add(id(e))
            edits.append(Edit(*m.src.span(e), f"{m.tl}.cast({m.src.seg(e)}, {m.tl}.int64)"))
        return self._edited(m, edits, {}, "apply")
