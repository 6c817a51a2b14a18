"""The epilogue-fusion operator: an elementwise kernel that reloads a matmul's output, fused into
the matmul's store (one kernel, one write of the tile)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from klineage.transforms._module import Module
from klineage.transforms._source import Edit
from klineage.transforms._triton import Kernel, Launch, tl_func, unique_name
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._matmul import (
    MatmulSplit,
    kernel_body,
    launch_stmt,
    next_stmt,
    plain_grid,
    split_kernel,
    store_call,
)


@dataclass(frozen=True)
class UnfusedPair:
    """A matmul (its split and launch) and the epilogue kernel launched right after it, which
    reloads the matmul's output at ``body[reload]`` and stores it back at ``body[store]``."""

    matmul: MatmulSplit
    matmul_launch: Launch
    epilogue: Kernel
    epilogue_launch: Launch
    reload: int
    store: int


class EpilogueFusion(Operator):
    """Bias / activation / residual applied to the fp32 accumulator before the store."""

    id = "epilogue-fusion"
    feature = "epilogue_fusion"
    name = "Fuse the epilogue into the matmul"
    intent = (
        "Apply the elementwise epilogue (bias, activation, residual) to the fp32 accumulator in "
        "registers before the store, instead of in a second kernel that reads the output back."
    )
    carrier = "the statements between the K loop and the store of a matmul kernel (or a second kernel launch)"
    anchor_predicate = "has_dot and not epilogue_fusion"
    anchor_description = (
        "a matmul kernel launch followed by an elementwise kernel with the same signature, grid and "
        "arguments that reloads the matmul's output tile, transforms it and stores it back"
    )

    # -- analysis
    def _fused(self, m: Module) -> list[tuple[MatmulSplit, Launch]]:
        """Gemm-like kernels with epilogue statements that simplify can split out, with their launch."""
        return self._matmuls(m, with_epilogue=True)

    @staticmethod
    def _matmuls(m: Module, with_epilogue: bool) -> list[tuple[MatmulSplit, Launch]]:
        """Launched gemm-like kernels (no autotune / heuristics, no cast of the accumulator, one plain
        launch) with (``with_epilogue``) or without statements between the K loop and the store."""
        out = []
        for k in m.launched:
            if k.autotune is not None or k.heuristics is not None:
                continue
            sp = split_kernel(m, k)
            lts = m.launches_of(k)
            if sp is None or sp.cast is not None or bool(sp.epilogue) != with_epilogue or len(lts) != 1:
                continue
            if launch_stmt(m, lts[0]) is None or not plain_grid(m, lts[0]):
                continue
            out.append((sp, lts[0]))
        return out

    def _pairs(self, m: Module) -> list[UnfusedPair]:
        """Each recognised unfused matmul + epilogue-kernel pair."""
        out = []
        by_name = {k.name: k for k in m.kernels}
        for sp, la in self._matmuls(m, with_epilogue=False):
            nxt = next_stmt(la.func, la.stmt)  # type: ignore[arg-type]
            if not (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Call)):
                continue
            la2 = next((x for x in m.launches if x.call is nxt.value), None)
            if la2 is None or la2.kernel not in by_name or la2.kernel == sp.kernel.name:
                continue
            k2 = by_name[la2.kernel]
            if len(m.launches_of(k2)) != 1 or k2.autotune is not None or k2.heuristics is not None:
                continue
            if any(tl_func(n, m.al) == "dot" for n in ast.walk(k2.node)):
                continue
            if [p.name for p in k2.params] != [p.name for p in sp.kernel.params]:
                continue
            if m.src.seg(la2.grid) != m.src.seg(la.grid) or self._args(m, la2) != self._args(m, la):
                continue
            found = self._reload(m, sp, k2)
            if found is not None:
                out.append(UnfusedPair(sp, la, k2, la2, *found))
        return out

    @staticmethod
    def _args(m: Module, la: Launch) -> list[str]:
        return [m.src.seg(a) for a in la.call.args] + [m.src.seg(kw) for kw in la.call.keywords]

    def _reload(self, m: Module, sp: MatmulSplit, k2: Kernel) -> tuple[int, int] | None:
        """In the epilogue kernel: ``acc = tl.load(<the matmul's store pointer>, ...).to(tl.float32)``,
        the epilogue statements, and a final store with the matmul's pointer and mask; the statements
        before the reload are statements of the matmul (same text)."""
        body = kernel_body(k2)
        store = store_call(body[-1], m) if body else None
        if store is None or not store.args:
            return None
        ptr, mask = self._ptr_mask(m, sp.store)
        if self._ptr_mask(m, store) != (ptr, mask) or m.src.seg(store) != m.src.seg(sp.store):
            return None
        k1_texts = {m.src.seg(st) for st in [*sp.before, *sp.support]}
        for i, st in enumerate(body[:-1]):
            if (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == sp.acc
            ):
                v = st.value
                if not (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "to"):
                    if m.src.seg(st) in k1_texts:
                        continue  # the matmul's own initialisation, overwritten by the reload
                    return None
                load = v.func.value
                if tl_func(load, m.al) != "load" or self._ptr_mask(m, load) != (ptr, mask):  # type: ignore[arg-type]
                    return None
                if not all(m.src.seg(b) in k1_texts for b in body[:i]):
                    return None
                epi = body[i + 1 : -1]
                if not epi or any(not isinstance(e, (ast.Assign, ast.AugAssign)) for e in epi):
                    return None
                return i, len(body) - 1
        return None

    @staticmethod
    def _ptr_mask(m: Module, call: ast.Call) -> tuple[str, str | None]:
        mask = next((kw.value for kw in call.keywords if kw.arg == "mask"), None)
        if mask is None and len(call.args) > 2 and tl_func(call, m.al) == "store":
            mask = call.args[2]
        return m.src.seg(call.args[0]), (m.src.seg(mask) if mask is not None else None)

    # -- the three directions
    def _detect(self, m: Module) -> list[Anchor]:
        """A matmul kernel whose epilogue simplify can split out (present); a recognised unfused
        matmul + epilogue-kernel pair (applicable)."""
        out = [anchor("present", sp.kernel.node, f"{sp.kernel.name} applies its epilogue to the accumulator",
                      sp.kernel) for sp, _ in self._fused(m)]
        out += [
            anchor("applicable", p.epilogue_launch.call,
                   f"{p.epilogue.name} reloads {p.matmul.kernel.name}'s output tile", p.matmul.kernel)
            for p in self._pairs(m)
        ]
        return out

    def _simplify(self, m: Module) -> Rewrite | None:
        """Move each fused epilogue into a second kernel (the matmul's signature, same grid and
        arguments) launched right after the matmul: it reloads the stored tile, upcasts it to fp32
        and applies the epilogue (the matmul's output is rounded once more in between)."""
        edits: list[Edit] = []
        for sp, la in self._fused(m):
            k = sp.kernel
            name = unique_name(m.src.tree, f"{k.name}_epilogue")
            indent = m.src.indent_of(sp.store.lineno)
            for st in sp.epilogue:
                first, last = m.src.stmt_lines(st)
                edits.append(Edit(*m.src.line_span(first, last), ""))
            ptr, mask = self._ptr_mask(m, sp.store)
            tl = m.tl
            load = f"{tl}.load({ptr}" + (f", mask={mask}, other=0.0" if mask else "") + f").to({tl}.float32)"
            lines = [self._lines(m, st) for st in [*sp.before, *sp.support]]
            lines.append(f"{indent}{sp.acc} = {load}\n")
            lines += [self._lines(m, st) for st in sp.epilogue]
            lines.append(self._lines(m, k.node.body[-1]))
            sig_start = m.src.offset(k.node.lineno, k.node.col_offset)
            sig_end = m.src.offset(k.node.body[0].lineno, 0)
            header = m.src.text[sig_start:sig_end]
            header = header.replace(f"def {k.name}(", f"def {name}(", 1)
            jit = "".join(f"@{m.src.seg(d)}\n" for d in k.node.decorator_list)
            text = "\n\n" + jit + header + "".join(lines)
            end = m.src.line_span(k.node.end_lineno or k.node.lineno, k.node.end_lineno or k.node.lineno)[1]
            edits.append(Edit(end, end, text))
            stmt = la.stmt
            assert stmt is not None
            st_end = m.src.line_span(stmt.end_lineno or stmt.lineno, stmt.end_lineno or stmt.lineno)[1]
            call_text = m.src.seg(la.call)
            s_indent = m.src.indent_of(stmt.lineno)
            edits.append(Edit(st_end, st_end, f"{s_indent}{name}{call_text[len(la.kernel):]}\n"))
        return self._edited(m, edits, {}, "simplify")

    @staticmethod
    def _lines(m: Module, st: ast.stmt) -> str:
        first, last = m.src.stmt_lines(st)
        return m.src.text[slice(*m.src.line_span(first, last))]

    def _apply(self, m: Module) -> Rewrite | None:
        """Fuse each recognised epilogue kernel into the matmul before it: its statements between the
        reload and the store move before the matmul's store (on the fp32 accumulator), and the
        epilogue kernel and its launch go. None when no pair is recognised."""
        edits: list[Edit] = []
        for p in self._pairs(m):
            sp, k2, la2, i, j = p.matmul, p.epilogue, p.epilogue_launch, p.reload, p.store
            body = kernel_body(k2)
            epi = "".join(self._lines(m, st) for st in body[i + 1 : j])
            if m.src.indent_of(body[i + 1].lineno) != m.src.indent_of(sp.store.lineno):
                continue
            store_stmt = sp.kernel.node.body[-1]
            pos = m.src.line_span(*m.src.stmt_lines(store_stmt))[0]
            edits.append(Edit(pos, pos, epi))
            first, last = m.src.stmt_lines(k2.node)
            start, end = m.src.line_span(first, last)
            # the blank lines above the epilogue kernel go with it
            while first > 1 and m.src.lines[first - 2].strip() == "" and first - 1 > (
                sp.kernel.node.end_lineno or 0
            ):
                first -= 1
            start = m.src.line_span(first, first)[0]
            edits.append(Edit(start, end, ""))
            stmt = la2.stmt
            assert stmt is not None
            edits.append(Edit(*m.src.line_span(stmt.lineno, stmt.end_lineno or stmt.lineno), ""))
        return self._edited(m, edits, {}, "apply")
