"""split-k: partition a matmul's K loop (or any loop reduction's loop) across a program axis, with fp32
partial tiles in a workspace and a second, deterministic reduction pass (no atomics).

``apply`` takes a gemm-like kernel (one ``tl.dot`` in one ``range(0, K, BLOCK_K)`` loop whose loads
index with the loop variable, no pointer increments, a final store of the accumulator, no epilogue), or
a loop reduction read the same way (``_matmul.reduction_split``: a column sum's loop over rows, whose
only value carried between iterations is an accumulator added to, stored right after the loop),
launched on a plain tuple grid of at most two axes with an output tensor the host creates contiguous
(``torch.empty`` / ``torch.empty_like`` / ``torch.zeros``). The kernel gets a last grid axis of
``SPLIT_K`` programs, each walking every ``SPLIT_K``-th loop step, and stores its fp32 partial tile
into slice ``pid_k`` of a ``(SPLIT_K, *out.shape)`` fp32 workspace (the output pointer is moved by
``pid_k * split_numel``; the store's cast goes to fp32, a no-op); a reduction kernel then sums the
slices in a fixed order and writes the output once. An epilogue after the loop is refused: it would
have to move after the reduction. ``simplify`` recognises that form and removes it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, ClassVar

from klineage.transforms._module import Module
from klineage.transforms._source import Edit, int_const, param_spans
from klineage.transforms._triton import (
    Kernel,
    Launch,
    dotted,
    kwarg,
    launch_args,
    range_call,
    single_value,
    tl_func,
    unique_name,
)
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_int
from klineage.transforms.operators._common import anchor, grid_tuple
from klineage.transforms.operators._matmul import (
    kernel_body,
    launch_stmt,
    next_stmt,
    reduction_split,
    split_kernel,
)

_MAKERS = {"empty", "empty_like", "zeros", "zeros_like"}


def _out_param(m: Module, k: Kernel, store: ast.Call) -> str | None:
    """The pointer parameter the final store writes through (followed through kernel locals); None
    when not exactly one, or when the kernel also loads through it."""
    params = {p.name for p in k.params if not p.constexpr}
    seen: set[str] = set()
    todo = [n.id for n in ast.walk(store.args[0]) if isinstance(n, ast.Name)]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in params:
            found.add(name)
        v = single_value(k.node, name)
        if v is not None:
            todo += [n.id for n in ast.walk(v) if isinstance(n, ast.Name)]
    # pointer-like: the base of pointer arithmetic (``ptr + offsets``)
    cands = sorted(p for p in found if _is_pointer(k, p))
    if len(cands) != 1:
        return None
    out = cands[0]
    for n in ast.walk(k.node):
        if tl_func(n, m.al) == "load" and out in {x.id for x in ast.walk(n.args[0]) if isinstance(x, ast.Name)}:  # type: ignore[attr-defined]
            return None
    return out


def _reads_argument(heuristics: ast.Call, name: str) -> bool:
    """Whether a ``@triton.heuristics`` decorator may read the launch argument ``name`` (its name appears as a
    string anywhere in the decorator, e.g. ``args["out_ptr"]``). The loop is split into whole steps
    (``range(pid_k * S, stop, S * SPLIT)``), so heuristics of the loop's bounds and steps stay true."""
    return any(isinstance(n, ast.Constant) and n.value == name for n in ast.walk(heuristics))


def _is_pointer(k: Kernel, name: str) -> bool:
    """A parameter used as the left operand of ``+`` (a pointer base) and never compared."""
    added = any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and isinstance(n.left, ast.Name) and n.left.id == name
        for n in ast.walk(k.node)
    )
    compared = any(
        isinstance(n, ast.Compare) and name in {x.id for x in ast.walk(n) if isinstance(x, ast.Name)}
        for n in ast.walk(k.node)
    )
    return added and not compared


@dataclass(frozen=True)
class SplitCandidate:
    """What ``apply`` rewrites in one matmul kernel: its launch, K loop, output parameter, the grid
    tuple and the host name of the output tensor."""

    launch: Launch
    loop: ast.For
    out_param: str
    grid: ast.expr
    host_out: str


@dataclass(frozen=True)
class PidK:
    """``pid_k = tl.program_id(a)`` at ``body[index]`` followed by ``ptr = ptr + pid_k * numel``;
    ``split`` is the SPLIT_K constexpr parameter."""

    index: int
    pid_k: str
    ptr: str
    numel: str
    split: str


@dataclass(frozen=True)
class SplitForm:
    """The split-k form ``apply`` writes, with the nodes ``simplify`` edits."""

    kernel: Kernel
    launch: Launch
    body_index: int
    loop: ast.For
    numel: str
    split: str
    reduce: Kernel
    reduce_launch: Launch
    ws: ast.Name
    ws_assign: ast.Assign
    grid: ast.expr


class SplitK(Operator):
    """K partitioned across programs, fp32 partials reduced by a second kernel."""

    id = "split-k"
    feature = "split_k"
    name = "Split K across programs"
    intent = (
        "Give a matmul (or a loop reduction such as a column sum) with few output tiles and a long reduction "
        "loop more programs: each computes a slice of the loop into an fp32 workspace and a second pass sums "
        "the slices (deterministic, no atomics)."
    )
    carrier = "a SPLIT_K grid axis and constexpr, the K-loop bounds, a workspace and a reduction kernel"
    anchor_predicate = "n_loops >= 1 and not split_k"
    anchor_description = (
        "a matmul kernel with a range(0, K, BLOCK_K) loop and no epilogue, or a loop reduction into one "
        "accumulator stored after the loop, launched on a tuple grid with a host-created contiguous output"
    )
    default_params: ClassVar[dict[str, Any]] = {"split_k": 4}
    params = (Param("split_k", lambda v: is_int(v) and v >= 2, "an int >= 2"),)

    # -- analysis
    def _candidate(self, m: Module, k: Kernel) -> SplitCandidate | None:
        """A matmul kernel or loop reduction ``apply`` can split: one reduction loop from 0, no epilogue, one
        launch with a plain tuple grid of its own, the output a fresh torch tensor."""
        if k.autotune is not None:
            return None
        sp = split_kernel(m, k) or reduction_split(m, k)
        if sp is None or sp.epilogue or not isinstance(sp.loop, ast.For):
            return None
        rc = range_call(sp.loop, m.al)
        if rc is None or len(rc.args) != 3 or int_const(rc.args[0]) != 0 or dotted(rc.func) != "range":
            return None
        if any(isinstance(n, ast.AugAssign) and not (isinstance(n.target, ast.Name) and n.target.id == sp.acc)
               for n in ast.walk(sp.loop)):
            return None  # pointer increments: the split would have to move them too
        if not isinstance(sp.loop.target, ast.Name):
            return None
        out = _out_param(m, k, sp.store)
        lts = m.launches_of(k)
        if out is None or len(lts) != 1:
            return None
        if k.heuristics is not None and _reads_argument(k.heuristics, out):
            return None  # the output argument becomes the fp32 workspace: a heuristic of it would change meaning
        la = lts[0]
        gt = grid_tuple(m, la)
        if launch_stmt(m, la) is None or gt is None or len(gt[0].elts) > 2:  # type: ignore[attr-defined]
            return None
        if isinstance(la.grid, ast.Name) and sum(
            isinstance(n, ast.Name) and n.id == la.grid.id and isinstance(n.ctx, ast.Load)
            for n in ast.walk(la.func)  # type: ignore[arg-type]
        ) != 1:
            return None  # the grid is shared with another launch: it must not gain an axis
        arg = launch_args(la, k).get(out)
        if not isinstance(arg, ast.Name) or any(kw.arg == out for kw in la.call.keywords):
            return None
        made = single_value(la.func, arg.id)
        if not (isinstance(made, ast.Call) and (dotted(made.func) or "").startswith("torch.")
                and (dotted(made.func) or "").rpartition(".")[2] in _MAKERS):
            return None
        return SplitCandidate(la, sp.loop, out, gt[0], arg.id)

    def _split_form(self, m: Module) -> list[SplitForm]:
        """Recognised split-k forms (what apply writes), with the nodes simplify edits."""
        out = []
        by_name = {k.name: k for k in m.kernels}
        for k in m.launched:
            lts = m.launches_of(k)
            if len(lts) != 1 or launch_stmt(m, lts[0]) is None:
                continue
            la = lts[0]
            body = kernel_body(k)
            found = self._pid_k(m, k, body)
            if found is None:
                continue
            i, pid_k, ptr, numel, split = found.index, found.pid_k, found.ptr, found.numel, found.split
            loop = next((lp for lp in ast.walk(k.node) if isinstance(lp, ast.For) and range_call(lp, m.al) is not None
                         and self._split_range(range_call(lp, m.al), pid_k, split) is not None), None)  # type: ignore[arg-type]
            if loop is None:
                continue
            nxt = next_stmt(la.func, la.stmt)  # type: ignore[arg-type]
            red = next((x for x in m.launches if isinstance(nxt, ast.Expr) and x.call is nxt.value), None)
            if red is None or red.kernel not in by_name or not self._is_reduce(m, by_name[red.kernel]):
                continue
            args = launch_args(la, k)
            ws = args.get(ptr)
            gt = grid_tuple(m, la)
            if not isinstance(ws, ast.Name) or gt is None or len(gt[0].elts) < 2:  # type: ignore[attr-defined]
                continue
            ws_assign = next((st for st in ast.walk(la.func) if isinstance(st, ast.Assign)  # type: ignore[arg-type]
                              and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                              and st.targets[0].id == ws.id), None)
            if ws_assign is None or kwarg(la.call, numel) is None or kwarg(la.call, split) is None:
                continue
            out.append(SplitForm(k, la, i, loop, numel, split, by_name[red.kernel], red, ws, ws_assign, gt[0]))
        return out

    def _pid_k(self, m: Module, k: Kernel, body: list[ast.stmt]) -> PidK | None:
        """``pid_k = tl.program_id(a)`` followed by ``ptr = ptr + pid_k * numel``."""
        cex = set(k.constexprs)
        params = [p.name for p in k.params]
        for i, st in enumerate(body[:-1]):
            if not (isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name)
                    and tl_func(st.value, m.al) == "program_id"):
                continue
            nx = body[i + 1]
            v = nx.value if isinstance(nx, ast.Assign) else None
            if (isinstance(nx, ast.Assign) and isinstance(nx.targets[0], ast.Name) and isinstance(v, ast.BinOp)
                    and isinstance(v.op, ast.Add) and isinstance(v.left, ast.Name) and v.left.id == nx.targets[0].id
                    and isinstance(v.right, ast.BinOp) and isinstance(v.right.op, ast.Mult)
                    and isinstance(v.right.left, ast.Name) and v.right.left.id == st.targets[0].id
                    and isinstance(v.right.right, ast.Name) and v.right.right.id in params):
                split = params[-1] if params and params[-1] in cex else None
                if split is None or params[-2] != v.right.right.id:
                    return None
                return PidK(i, st.targets[0].id, nx.targets[0].id, v.right.right.id, split)
        return None

    @staticmethod
    def _split_range(rc: ast.Call, pid_k: str, split: str) -> tuple[ast.expr, ast.expr] | None:
        """``range(pid_k * S, stop, S * SPLIT)`` -> (S, stop)."""
        if len(rc.args) != 3:
            return None
        a, stop, c = rc.args
        if (isinstance(a, ast.BinOp) and isinstance(a.op, ast.Mult) and isinstance(a.left, ast.Name)
                and a.left.id == pid_k and isinstance(c, ast.BinOp) and isinstance(c.op, ast.Mult)
                and isinstance(c.right, ast.Name) and c.right.id == split
                and ast.dump(c.left) == ast.dump(a.right)):
            return a.right, stop
        return None

    def _is_reduce(self, m: Module, r: Kernel) -> bool:
        """The reduction kernel apply writes: a ``tl.static_range`` loop summing loads, one store."""
        return (
            any(isinstance(lp, ast.For) and tl_func(lp.iter, m.al) == "static_range" for lp in ast.walk(r.node))
            and sum(1 for n in ast.walk(r.node) if tl_func(n, m.al) == "store") == 1
            and not any(tl_func(n, m.al) == "dot" for n in ast.walk(r.node))
        )

    # -- directions
    def _detect(self, m: Module) -> list[Anchor]:
        """The split-k form apply writes (present); matmul kernels apply can split (applicable)."""
        found = self._split_form(m)
        out = [anchor("present", f.kernel.node, f"{f.kernel.name} splits K over programs", f.kernel)
               for f in found]
        done = {f.kernel.name for f in found} | {f.reduce.name for f in found}
        for k in m.launched:
            if k.name not in done and self._candidate(m, k) is not None:
                out.append(anchor("applicable", k.node, f"{k.name}: one reduction loop, a tuple grid", k))
        return out

    def _apply(self, m: Module, split_k: int = 4) -> Rewrite | None:
        """Split the reduction loop of each recognised kernel over ``split_k`` programs (a new last grid
        axis), with fp32 partials in a workspace and a reduction kernel summing them in order."""
        if "torch" not in {
            a.asname or a.name for n in m.src.tree.body if isinstance(n, ast.Import) for a in n.names
        }:
            return None
        edits: list[Edit] = []
        tl, tri = m.tl, m.triton
        for k in m.launched:
            cand = self._candidate(m, k)
            if cand is None:
                continue
            la, loop, out, grid, host_out = cand.launch, cand.loop, cand.out_param, cand.grid, cand.host_out
            body = kernel_body(k)
            pid_k = unique_name(m.src.tree, "pid_k")
            split = unique_name(m.src.tree, "SPLIT_K")
            numel = unique_name(m.src.tree, "split_numel")
            ws = unique_name(m.src.tree, "partials")
            red = unique_name(m.src.tree, f"{k.name}_splitk_reduce")
            axis = len(grid.elts)  # type: ignore[attr-defined]
            indent = m.src.indent_of(body[0].lineno)
            pos = m.src.line_span(body[0].lineno, body[0].lineno)[0]
            edits.append(Edit(pos, pos, f"{indent}{pid_k} = {tl}.program_id({axis})\n"
                                        f"{indent}{out} = {out} + {pid_k} * {numel}\n"))
            rc = range_call(loop, m.al)
            assert rc is not None
            step = m.src.seg(rc.args[2])
            edits.append(Edit(*m.src.span(rc.args[0]), f"{pid_k} * {step}"))
            edits.append(Edit(*m.src.span(rc.args[2]), f"{step} * {split}"))
            spans = param_spans(m.src, k.node)
            edits.append(Edit(spans[-1][1], spans[-1][1], f", {numel}, {split}: {tl}.constexpr"))
            # grid: one more axis
            elts = grid.elts  # type: ignore[attr-defined]
            last_end = m.src.span(elts[-1])[1]
            edits.append(Edit(last_end, last_end, f", {split_k}"))
            # launch: the workspace in place of the output, the two new arguments
            arg = launch_args(la, k)[out]
            edits.append(Edit(*m.src.span(arg), ws))
            call_end = m.src.span(la.call)[1] - 1
            edits.append(Edit(call_end, call_end, f", {numel}={host_out}.numel(), {split}={split_k}"))
            stmt = la.stmt
            assert stmt is not None
            s_indent = m.src.indent_of(stmt.lineno)
            first = m.src.line_span(stmt.lineno, stmt.lineno)[0]
            edits.append(Edit(first, first, f"{s_indent}{ws} = torch.empty(({split_k},) + tuple({host_out}.shape), "
                                            f"device={host_out}.device, dtype=torch.float32)\n"))
            end = m.src.line_span(stmt.end_lineno or stmt.lineno, stmt.end_lineno or stmt.lineno)[1]
            edits.append(Edit(end, end, f"{s_indent}{red}[({tri}.cdiv({host_out}.numel(), 1024),)]"
                                        f"({ws}, {host_out}, {host_out}.numel(), SPLIT={split_k}, BLOCK=1024)\n"))
            kend = m.src.line_span(k.node.end_lineno or k.node.lineno, k.node.end_lineno or k.node.lineno)[1]
            jit = m.src.seg(k.jit)
            edits.append(Edit(kend, kend, (
                f"\n\n@{jit}\n"
                f"def {red}(ws_ptr, out_ptr, n, SPLIT: {tl}.constexpr, BLOCK: {tl}.constexpr):\n"
                f"    offs = {tl}.program_id(0) * BLOCK + {tl}.arange(0, BLOCK)\n"
                f"    mask = offs < n\n"
                f"    acc = {tl}.zeros([BLOCK], dtype={tl}.float32)\n"
                f"    for s in {tl}.static_range(SPLIT):\n"
                f"        acc += {tl}.load(ws_ptr + s * n + offs, mask=mask, other=0.0)\n"
                f"    {tl}.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)\n"
            )))
        return self._edited(m, edits, {"split_k": split_k}, "apply")

    def _simplify(self, m: Module) -> Rewrite | None:
        """Remove the split-k form apply writes: the reduction kernel and its launch, the workspace,
        the program axis, the K-loop split and the two kernel parameters."""
        edits: list[Edit] = []
        for f in self._split_form(m):
            k, la = f.kernel, f.launch
            body = kernel_body(k)
            i = f.body_index
            edits.append(Edit(*m.src.line_span(body[i].lineno, body[i + 1].end_lineno or body[i + 1].lineno), ""))
            rc, counter = range_call(f.loop, m.al), body[i]
            # what _split_form recognised: a range loop, the split counter assigned before it, a grid tuple
            assert rc is not None and isinstance(counter, ast.Assign) and isinstance(counter.targets[0], ast.Name)
            assert isinstance(f.grid, (ast.Tuple, ast.List))
            split_range = self._split_range(rc, counter.targets[0].id, f.split)
            assert split_range is not None, "_split_form checked the split range"
            step = split_range[0]
            edits.append(Edit(*m.src.span(rc.args[0]), "0"))
            edits.append(Edit(*m.src.span(rc.args[2]), m.src.seg(step)))
            spans = param_spans(m.src, k.node)
            edits.append(Edit(spans[-3][1], spans[-1][1], ""))
            elts = f.grid.elts
            edits.append(Edit(m.src.span(elts[-2])[1], m.src.span(elts[-1])[1], ""))
            red_la = f.reduce_launch
            host_out = m.src.seg(red_la.call.args[1])
            edits.append(Edit(*m.src.span(f.ws), host_out))
            kws = [kw for kw in la.call.keywords if kw.arg in (f.numel, f.split)]
            prev_end = max(m.src.span(x)[1] for x in [*la.call.args, *[kw for kw in la.call.keywords if kw not in kws]])
            edits.append(Edit(prev_end, max(m.src.span(kw)[1] for kw in kws), ""))
            ws_st = f.ws_assign
            edits.append(Edit(*m.src.line_span(ws_st.lineno, ws_st.end_lineno or ws_st.lineno), ""))
            rs = red_la.stmt
            assert rs is not None, "the reduction is launched by a statement of host code"
            edits.append(Edit(*m.src.line_span(rs.lineno, rs.end_lineno or rs.lineno), ""))
            r = f.reduce
            first, last = m.src.stmt_lines(r.node)
            while first > 1 and m.src.lines[first - 2].strip() == "":
                first -= 1
            edits.append(Edit(m.src.line_span(first, first)[0], m.src.line_span(last, last)[1], ""))
        return self._edited(m, edits, {}, "simplify")
