"""tensor-descriptors: the 2-D tile loads of a matmul's K loop (and its output tile store) through
device-side tensor descriptors (TMA on Hopper) instead of pointer arithmetic and masks.

``apply`` takes a launched kernel whose innermost ``tl.dot`` loop loads every tile as
``tl.load(base + i[:, None] * s0 + j[None, :] * s1, mask=(i[:, None] < D0) & (j[None, :] < D1),
other=0)`` with ``i``, ``j`` an offset plus ``tl.arange(0, BLOCK)`` (``_descriptors``). One stride must be
the literal 1 (the contiguous axis: descriptors need a unit last stride; a tile whose unit stride is
on its first axis is read through the transposed descriptor, ``.load(...).T``), or, when both are
kernel arguments, the launch checks at run time that the last one is 1. Each tile becomes
``desc.load([o0, o1])`` on a descriptor made before the loop (out-of-bounds reads zero-filled: the
masks go); the final store of the accumulator becomes ``desc.store(...)`` when it is such a tile too
(out-of-bounds writes are dropped). The launch gets a guard that raises a ValueError unless every base
pointer and row stride is 16-byte aligned (what TMA requires; the interpreter asserts it too) and the
global scratch allocator device-side descriptors need (``triton.set_allocator`` with ``torch.empty``;
on the GPU the launch asks it for 128 bytes per program and descriptor, the interpreter never calls it).

``simplify`` reverses a kernel whose descriptors are made once (``tl.make_tensor_descriptor`` with 2-D
``shape``/``strides=[s, 1]``/``block_shape``) and only loaded from (``.load([o0, o1])``, maybe ``.T``)
or stored to (``.store([o0, o1], v)``): each access becomes the masked pointer tile it stands for,
and the guard and allocator go when no descriptor is left. It records what it removed, so ``apply``
given that record puts back exactly the original.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from klineage.schema import pyast
from klineage.transforms._module import Module
from klineage.transforms._source import Edit, apply_edits, int_const, shifted_edit, str_const
from klineage.transforms._triton import (
    Kernel,
    Launch,
    dotted,
    kwarg,
    launch_args,
    local_assignments,
    single_value,
    tl_func,
    unique_name,
)
from klineage.transforms.features import accumulators, dot_loops
from klineage.transforms.operator import Anchor, Operator, Rewrite
from klineage.transforms.operators._common import anchor
from klineage.transforms.operators._descriptors import Access, Desc, Reader, Refusal, access, paren
from klineage.transforms.operators._dispatch import (
    copy_base_name,
    delete_definition,
    dispatch_text,
    keep_else_branch,
    renamed_definition,
    whole_lines,
)
from klineage.transforms.operators._matmul import kernel_body, launch_stmt, store_call, stored_value

_MADE = {"make_tensor_descriptor", "_experimental_make_tensor_descriptor", "make_block_ptr"}


@dataclass(frozen=True)
class DescriptorDispatch:
    """A launch ``apply`` turned into ``if <TMA can describe the operands>: copy[...] else: general[...]``."""

    node: ast.If
    copy: Kernel
    general: Kernel


@dataclass(frozen=True)
class Plan:
    """What ``apply`` writes for one kernel: the K loop, the load accesses, the store access (or None)
    and the launch whose host code gets the guard and the allocator."""

    kernel: Kernel
    loop: ast.For
    loads: list[Access]
    store: Access | None
    store_stmt: ast.stmt | None
    launch: Launch
    host: dict[str, str]


_STRIDE_OF = re.compile(r"^\s*([A-Za-z_]\w*)\.stride\(\s*(-?\d+)\s*\)\s*$")


def _last_dim_first(first: str | None, second: str | None) -> bool:
    """Whether the host passes a 2-D tensor's last-dim stride as a tile's first stride and its first-dim
    stride as the second (``w.stride(1), w.stride(0)``: nn.Linear's (N, K) weight read as B[k, n]). Such a
    tile is contiguous along its first axis whenever the tensor is contiguous: it is read through the
    transposed descriptor, and the launch checks ``w.stride(1) == 1`` (the row-major guess would check
    ``w.stride(0) == 1``, false for every contiguous weight, and leave the descriptor copy dead)."""
    a = _STRIDE_OF.match(first or "")
    b = _STRIDE_OF.match(second or "")
    return bool(a and b and a.group(1) == b.group(1) and a.group(2) in ("1", "-1") and b.group(2) in ("0", "-2"))


def _names(text: str) -> set[str]:
    return {n.id for n in ast.walk(pyast.parse(text, mode="eval")) if isinstance(n, ast.Name)}


class TensorDescriptors(Operator):
    """A matmul's tile loads and output store through device-side tensor descriptors (TMA)."""

    id = "tensor-descriptors"
    feature = "uses_tma"
    name = "Tensor descriptors (TMA) for the tile loads and store"
    intent = (
        "Load a matmul's operand tiles (and store its output tile) through device-side tensor descriptors: "
        "on Hopper the TMA unit copies whole tiles asynchronously, bounds are handled in hardware "
        "(out-of-range reads zero-filled, writes dropped), so the pointer arithmetic and masks go."
    )
    carrier = (
        "tl.make_tensor_descriptor before the K loop, desc.load / desc.store in place of the masked "
        "tl.load / tl.store, and an alignment guard plus triton.set_allocator at the launch"
    )
    anchor_predicate = "has_dot and has_k_loop and not uses_tma"
    anchor_description = (
        "a matmul K loop loading 2-D tiles as base + i[:, None] * s0 + j[None, :] * s1 with one unit stride "
        "and a mask bounding both axes, launched once from host code"
    )
    record = "code"

    # -- analysis
    def _plan(self, m: Module, k: Kernel) -> Plan | Refusal:
        """What apply writes for kernel ``k``, or why it does not."""
        if any(tl_func(n, m.al) in _MADE for n in ast.walk(k.node)):
            return Refusal("it already uses tensor descriptors or block pointers")
        loops = dot_loops(k, m.al)
        inner = [lp for lp in loops if not any(o is not lp and o in list(ast.walk(lp)) for o in loops)]
        loop = inner[0] if len(inner) == 1 else None
        if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Name):
            return Refusal("no single for-loop over K with loads and tl.dot")
        r = Reader(m, k, {loop.target.id})
        loads = [n for n in ast.walk(loop) if tl_func(n, m.al) == "load"]
        if not loads:
            return Refusal("the K loop loads nothing through pointers")
        lts = m.launches_of(k)
        passed = {p: m.src.seg(v) for p, v in launch_args(lts[0], k).items()} if len(lts) == 1 else {}
        got: list[Access] = []
        for call in loads:
            a = access(r, call, lambda s0, s1: _last_dim_first(passed.get(s0), passed.get(s1)))  # type: ignore[arg-type]
            if isinstance(a, Refusal):
                return a
            got.append(a)
        if any(len(d.block) != 2 for d in (a.desc for a in got)):
            return Refusal("a tile that is not 2-D")
        for a in got:
            why = self._defined_before(m, k, a.desc, loop)
            if why:
                return Refusal(why)
        store, store_stmt = self._store(m, k)
        if len(lts) != 1 or launch_stmt(m, lts[0]) is None:
            return Refusal("it is not launched once from a plain kernel[grid](...) statement")
        if any(d.general is k for d in self._dispatches(m)):
            return Refusal("its launch already dispatches to a tensor-descriptor copy of it")
        if "torch" not in {a.asname or a.name for n in m.src.tree.body if isinstance(n, ast.Import) for a in n.names}:
            return Refusal("the module does not import torch (the allocator needs torch.empty)")
        args = launch_args(lts[0], k)
        host = {p: m.src.seg(v) for p, v in args.items()}
        for d in {a.desc for a in [*got, *([store] if store else [])]}:
            for text in (d.stride, d.unit, d.param):
                if text is not None and any(n not in host for n in _names(text)):
                    return Refusal(f"the launch does not pass what '{text}' is made of (the alignment guard "
                                   "needs it on the host)")
        return Plan(k, loop, got, store, store_stmt, lts[0], host)

    @staticmethod
    def _defined_before(m: Module, k: Kernel, d: Desc, stmt: ast.stmt) -> str | None:
        """Why the descriptor of ``d`` cannot be made right before ``stmt`` (None when it can): a name it
        reads is assigned at or after that statement."""
        for text in (d.base, *d.shape, d.stride):
            for name in _names(text):
                for a in local_assignments(k.node, name):
                    if a.lineno >= stmt.lineno:
                        return f"'{name}' is assigned after the descriptor of '{d.param}' would be made"
        return None

    def _store(self, m: Module, k: Kernel) -> tuple[Access | None, ast.stmt | None]:
        """The final store of the accumulator as a descriptor access (None: left as it is)."""
        body = kernel_body(k)
        call = store_call(body[-1], m) if body else None
        if call is None or len(call.args) < 2:
            return None, None
        value = stored_value(call)
        accs = set(accumulators(k, m.al))
        if isinstance(value, ast.Name) and value.id not in accs:
            v = single_value(k.node, value.id)
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "to":
                value = v.func.value
        if not (isinstance(value, ast.Name) and value.id in accs):
            return None, None
        a = access(Reader(m, k, set()), call)
        if isinstance(a, Refusal) or self._defined_before(m, k, a.desc, body[-1]):
            return None, None
        return a, body[-1]

    def refusals(self, source: str) -> dict[str, str]:
        """Why ``apply`` leaves each launched kernel of ``source`` alone (kernel name -> reason)."""
        from klineage.transforms._module import parse

        m = parse(source)
        if m is None:
            return {}
        out = {}
        for k in m.launched:
            p = self._plan(m, k)
            if isinstance(p, Refusal):
                out[k.name] = p.reason
        return out

    # -- directions
    def _detect(self, m: Module) -> list[Anchor]:
        """Kernels making tensor descriptors (present); kernels apply can rewrite (applicable)."""
        out = []
        for k in m.kernels:
            if any(tl_func(n, m.al) == "make_tensor_descriptor" for n in ast.walk(k.node)):
                out.append(anchor("present", k.node, f"{k.name} loads through tensor descriptors", k))
        for k in m.launched:
            p = self._plan(m, k)
            if isinstance(p, Plan):
                out.append(anchor("applicable", p.loop, f"{k.name}: {len(p.loads)} tile loads in its K loop", k))
        return out

    def _apply(self, m: Module) -> Rewrite | None:
        """For every kernel with a plan: a copy of it that loads its K loop's tiles (and stores its output
        tile) through descriptors, right after it, and a dispatch at its launch: the copy when every
        base pointer and row stride is 16-byte aligned and every inner stride it assumes is 1 (what TMA
        needs), the kernel as it was otherwise, so the module stays correct on every layout."""
        edits: list[Edit] = []
        taken: set[str] = set()
        tl = m.tl

        def fresh(base: str) -> str:
            name, i = unique_name(m.src.tree, base), 2
            while name in taken:
                name, i = unique_name(m.src.tree, f"{base}_{i}"), i + 1
            taken.add(name)
            return name

        for k in m.launched:
            p = self._plan(m, k)
            if isinstance(p, Refusal):
                continue
            names: dict[Desc, str] = {}

            def name_of(d: Desc, names: dict[Desc, str] = names) -> str:
                if d not in names:
                    names[d] = fresh(d.param.removesuffix("_ptr") + "_desc")
                return names[d]

            in_kernel: list[Edit] = []  # edits of the copy, in offsets of the whole source
            made: list[Desc] = []
            for a in p.loads:
                if a.desc not in made:
                    made.append(a.desc)
                text = f"{name_of(a.desc)}.load([{a.offsets[0]}, {a.offsets[1]}])" + (".T" if a.transposed else "")
                in_kernel.append(Edit(*m.src.span(a.call), text))
            indent = m.src.indent_of(p.loop.lineno)
            pos = m.src.line_span(p.loop.lineno, p.loop.lineno)[0]
            in_kernel.append(Edit(pos, pos, "".join(self._make(tl, name_of(d), d, indent) for d in made)))
            if p.store is not None and p.store_stmt is not None:
                a = p.store
                new = a.desc not in names
                name = name_of(a.desc)
                stored = f"{name}.store([{a.offsets[0]}, {a.offsets[1]}], {a.value})"
                in_kernel.append(Edit(*m.src.span(a.call), stored))
                if new:
                    s_pos = m.src.line_span(p.store_stmt.lineno, p.store_stmt.lineno)[0]
                    in_kernel.append(Edit(s_pos, s_pos, self._make(tl, name, a.desc,
                                                                   m.src.indent_of(p.store_stmt.lineno))))
            copy_name = fresh(copy_base_name(k.name, "tma"))
            start, end = m.src.line_span(*m.src.stmt_lines(k.node))
            text = m.src.text[start:end]
            rewritten = apply_edits(text, [shifted_edit((e.start, e.end), start, e.text) for e in in_kernel])
            copy = renamed_definition(rewritten, k.name, copy_name)
            edits.append(Edit(end, end, "\n\n" + copy))
            edits.append(self._host(m, p, list(names), copy_name, fresh("tma_scratch")))
        return self._edited(m, edits, {}, "apply")

    @staticmethod
    def _make(tl: str, name: str, d: Desc, indent: str) -> str:
        return (f"{indent}{name} = {tl}.make_tensor_descriptor({d.base}, shape=[{d.shape[0]}, {d.shape[1]}], "
                f"strides=[{d.stride}, 1], block_shape=[{d.block[0]}, {d.block[1]}])\n")

    def _host(self, m: Module, p: Plan, descs: list[Desc], copy_name: str, scratch: str) -> Edit:
        """The launch of ``p`` as a dispatch: the descriptor copy ``copy_name`` (with the global scratch
        allocator device-side descriptors need) when TMA can describe every operand, else the launch as
        it was."""

        def host(text: str) -> str:
            node = pyast.parse(text, mode="eval")
            spans = sorted(((n.col_offset, n.end_col_offset, n.id) for n in ast.walk(node)
                            if isinstance(n, ast.Name)), reverse=True)
            for start, end, name in spans:
                text = text[:start] + paren(p.host[name], factor=True) + text[end:]
            return text

        checks: list[str] = []
        units: list[str] = []
        for d in descs:
            t = paren(p.host[d.param], factor=True)
            for c in (f"{t}.data_ptr()", f"{paren(host(d.stride), factor=True)} * {t}.element_size()"):
                if c not in checks:
                    checks.append(c)
            if d.unit is not None and f"{host(d.unit)} == 1" not in units:
                units.append(f"{host(d.unit)} == 1")
        stmt = p.launch.stmt
        assert stmt is not None
        ind = m.src.indent_of(stmt.lineno)
        pad = " " * len("if not any(v % 16 for v in (")
        rows = [", ".join(checks[i:i + 2]) for i in range(0, len(checks), 2)]
        test = " and ".join([*units, f"not any(v % 16 for v in ({(',' + chr(10) + ind + pad).join(rows)}))"])
        device = f"{paren(p.host[descs[0].param], factor=True)}.device"
        s_first, s_last = m.src.stmt_lines(stmt)
        s_start, s_end = m.src.line_span(s_first, s_last)
        c_start = m.src.line_span(whole_lines(m.src, stmt)[0], s_last)[0]  # comments above go with the launch
        launch = m.src.text[s_start:s_end]
        renames = [shifted_edit(m.src.span(p.launch.call.func.value), s_start, copy_name)]  # type: ignore[attr-defined]
        grid = p.launch.grid
        value = single_value(p.launch.func, grid.id) if isinstance(grid, ast.Name) else None
        if isinstance(value, ast.Tuple) and m.src.seg(value).startswith("("):
            # the copy launches with the grid's tuple written out, so each launch owns its grid (tile-size
            # and autotune rewrite one launch's grid, and refuse a grid two launches read)
            renames.append(shifted_edit(m.src.span(grid), s_start, m.src.seg(value)))
        copy_launch = apply_edits(launch, renames)
        special = (
            f"{ind}def {scratch}(size, alignment, stream):\n"
            f"{ind}    # global scratch for the device-side descriptors (the launch asks for it per program)\n"
            f"{ind}    return torch.empty(size, device={device}, dtype=torch.int8)\n"
            "\n"
            f"{ind}{m.triton}.set_allocator({scratch})\n"
            + copy_launch
        )
        return Edit(c_start, s_end, dispatch_text(ind, test, special, m.src.text[c_start:s_end],
                                                  "TMA copies whole tiles: 16-byte aligned rows, unit inner strides"))

    # -- simplify
    def _dispatches(self, m: Module) -> list[DescriptorDispatch]:
        """The dispatches ``apply`` writes: an ``if`` whose body ends launching a kernel that makes tensor
        descriptors and whose ``else`` is the launch of another kernel."""
        making = [k for k in m.kernels if any(tl_func(n, m.al) == "make_tensor_descriptor" for n in ast.walk(k.node))]
        found = []
        for copy in making:
            for la in m.launches_of(copy):
                if la.func is None or launch_stmt(m, la) is None:
                    continue
                for node in ast.walk(la.func):
                    if not (isinstance(node, ast.If) and node.body and node.body[-1] is la.stmt
                            and len(node.orelse) == 1):
                        continue
                    general = [k for k in m.launched if k is not copy
                               and any(g.stmt is node.orelse[0] for g in m.launches_of(k))]
                    if len(general) == 1:
                        found.append(DescriptorDispatch(node, copy, general[0]))
        return found

    def _simplify(self, m: Module) -> Rewrite | None:
        """A dispatch ``apply`` wrote goes back to its ``else`` launch, and the descriptor copy goes.
        Otherwise every descriptor of a recognised kernel goes back to masked pointer tiles, and the
        allocator goes when no kernel of the module makes descriptors any more."""
        found = self._dispatches(m)
        if found:
            undone = [keep_else_branch(m, d.node) for d in found]
            undone += [delete_definition(m, d.copy.node) for d in found if len(m.launches_of(d.copy)) == 1]
            return self._removed(m, undone)
        edits: list[Edit] = []
        done: list[Kernel] = []
        for k in m.kernels:
            got = self._unmake(m, k)
            if got:
                edits += got
                done.append(k)
        if not edits:
            return None
        left = [k for k in m.kernels if k not in done
                and any(tl_func(n, m.al) == "make_tensor_descriptor" for n in ast.walk(k.node))]
        if not left:
            funcs = {la.func for k in done for la in m.launches_of(k) if la.func is not None}
            for func in sorted(funcs, key=lambda f: f.lineno):
                edits += self._host_removals(m, func)
        return self._removed(m, edits)

    def _unmake(self, m: Module, k: Kernel) -> list[Edit] | None:
        """The edits turning every descriptor of ``k`` back into pointer tiles; None when one of them is
        not in the recognised form (the kernel is then left whole)."""
        tl = m.tl
        r = Reader(m, k, set())
        made = [st for st in ast.walk(k.node) if isinstance(st, ast.Assign)
                and tl_func(st.value, m.al) == "make_tensor_descriptor"]
        if not made:
            return None
        edits: list[Edit] = []
        for st in made:
            d = self._desc_of(m, r, st)
            if d is None:
                return None
            target = st.targets[0]
            if not isinstance(target, ast.Name):
                return None
            name = target.id
            uses = [n for n in ast.walk(k.node) if isinstance(n, ast.Name) and n.id == name
                    and isinstance(n.ctx, ast.Load)]
            for u in uses:
                e = self._access_back(m, tl, d, u)
                if e is None:
                    return None
                edits.append(e)
            edits.append(Edit(*m.src.line_span(*m.src.stmt_lines(st)), ""))
        return edits

    @staticmethod
    def _desc_of(m: Module, r: Reader, st: ast.Assign) -> Desc | None:
        """The descriptor ``st`` makes (2-D, unit last stride, zero padding), names assigned once."""
        call: ast.Call = st.value  # type: ignore[assignment]
        if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
            return None
        if len(local_assignments(r.k.node, st.targets[0].id)) != 1:
            return None
        names = ("base", "shape", "strides", "block_shape")
        parts = {n: (call.args[i] if i < len(call.args) else kwarg(call, n)) for i, n in enumerate(names)}
        pad = kwarg(call, "padding_option")
        if pad is not None and str_const(pad) != "zero":
            return None
        if any(v is None for v in parts.values()) or any(kw.arg not in (*names, "padding_option")
                                                          for kw in call.keywords):
            return None
        lists = [parts[n] for n in names[1:]]
        pairs = [x.elts for x in lists if isinstance(x, (ast.List, ast.Tuple)) and len(x.elts) == 2]
        base = parts["base"]
        if len(pairs) != 3 or base is None:
            return None
        shape, strides, block = pairs
        if int_const(strides[1]) != 1 or not all(r.stable(x) for x in [base, *shape, strides[0]]):
            return None
        seg = m.src.seg
        root = dotted(base) or ""
        return Desc(seg(base), root, (seg(shape[0]), seg(shape[1])), seg(strides[0]),
                    (seg(block[0]), seg(block[1])))

    def _access_back(self, m: Module, tl: str, d: Desc, use: ast.Name) -> Edit | None:
        """The pointer form of one ``desc.load([o0, o1])`` (``.T``) or ``desc.store([o0, o1], v)``."""
        attr = m.src.parent(use)
        call = m.src.parent(attr) if attr is not None else None
        if not (isinstance(attr, ast.Attribute) and attr.attr in ("load", "store") and isinstance(call, ast.Call)
                and call.func is attr and not call.keywords and call.args
                and isinstance(call.args[0], (ast.List, ast.Tuple)) and len(call.args[0].elts) == 2):
            return None
        o0, o1 = (m.src.seg(e) for e in call.args[0].elts)
        i0 = self._index(tl, o0, d.block[0])
        i1 = self._index(tl, o1, d.block[1])
        base, st = d.base, paren(d.stride, factor=True)
        d0, d1 = (paren(s) for s in d.shape)
        if attr.attr == "store":
            if len(call.args) != 2 or not isinstance(m.src.parent(call), ast.Expr):
                return None
            ptr = f"{base} + {i0}[:, None] * {st} + {i1}[None, :]"
            mask = f"({i0}[:, None] < {d0}) & ({i1}[None, :] < {d1})"
            return Edit(*m.src.span(call), f"{tl}.store({ptr}, {m.src.seg(call.args[1])}, mask={mask})")
        if len(call.args) != 1:
            return None
        outer = m.src.parent(call)
        if isinstance(outer, ast.Attribute) and outer.attr == "T" and outer.value is call:
            ptr = f"{base} + {i1}[:, None] + {i0}[None, :] * {st}"
            mask = f"({i1}[:, None] < {d1}) & ({i0}[None, :] < {d0})"
            return Edit(*m.src.span(outer), f"{tl}.load({ptr}, mask={mask}, other=0.0)")
        ptr = f"{base} + {i0}[:, None] * {st} + {i1}[None, :]"
        mask = f"({i0}[:, None] < {d0}) & ({i1}[None, :] < {d1})"
        return Edit(*m.src.span(call), f"{tl}.load({ptr}, mask={mask}, other=0.0)")

    @staticmethod
    def _index(tl: str, start: str, block: str) -> str:
        if start.strip() == "0":
            return f"{tl}.arange(0, {block})"
        return f"({paren(start)} + {tl}.arange(0, {block}))"

    def _host_removals(self, m: Module, func: ast.FunctionDef) -> list[Edit]:
        """In a launching function: ``triton.set_allocator(f)`` with its local ``def f`` (a single
        ``return torch.empty(...)``), with the blank lines between them."""
        gone: list[ast.stmt] = []
        for st in ast.walk(func):
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
                    and (dotted(st.value.func) or "").endswith("set_allocator") and len(st.value.args) == 1
                    and isinstance(st.value.args[0], ast.Name)):
                continue
            fname = st.value.args[0].id
            defs = [d for d in ast.walk(func) if isinstance(d, ast.FunctionDef) and d.name == fname]
            uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == fname]
            if (len(defs) == 1 and len(uses) == 1 and len(defs[0].body) == 1 and isinstance(defs[0].body[0], ast.Return)
                    and isinstance(defs[0].body[0].value, ast.Call)
                    and dotted(defs[0].body[0].value.func) == "torch.empty"):
                gone += [st, defs[0]]
        if not gone:
            return []
        gone.sort(key=lambda s: s.lineno)
        spans = [list(m.src.stmt_lines(s)) for s in gone]
        merged = [spans[0]]
        for first, last in spans[1:]:
            between = m.src.lines[merged[-1][1]:first - 1]
            if all(not line.strip() for line in between):
                merged[-1][1] = last
            else:
                merged.append([first, last])
        return [Edit(*m.src.line_span(first, last), "") for first, last in merged]
