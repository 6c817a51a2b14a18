"""A matmul kernel read as parts (what epilogue-fusion and split-k rewrite): the K loop, the
statements after it, the store of the accumulator; and the host statements around a launch."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from klineage.transforms._module import Module
from klineage.transforms._triton import Kernel, Launch, tl_func
from klineage.transforms.features import accumulators, dot_loops
from klineage.transforms.operators._common import grid_tuple


@dataclass(frozen=True)
class MatmulSplit:
    """A gemm-like kernel's body around its K loop: ``before`` the loop, the ``loop``, the statements
    after it that the store needs (``support``) and the ``epilogue`` ones, then the final ``store``."""

    kernel: Kernel
    acc: str
    before: list[ast.stmt]
    loop: ast.stmt
    support: list[ast.stmt]
    epilogue: list[ast.stmt]
    store: ast.Call
    cast: ast.stmt | None = None


def names(node: ast.AST, ctx: type = ast.Load) -> set[str]:
    """Names read (``ctx`` Load) or written (``ast.Store``) anywhere in ``node``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def targets(st: ast.stmt) -> set[str]:
    """Names a statement assigns."""
    return names(st, ast.Store)


def kernel_body(k: Kernel) -> list[ast.stmt]:
    """The kernel's statements without its docstring."""
    body = list(k.node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body


def store_call(st: ast.stmt, m: Module) -> ast.Call | None:
    """The ``tl.store`` call of an expression statement, else None."""
    if isinstance(st, ast.Expr) and tl_func(st.value, m.al) == "store":
        return st.value  # type: ignore[return-value]
    return None


def stored_value(store: ast.Call) -> ast.expr | None:
    """The value a ``tl.store`` writes, without a trailing ``.to(...)`` cast."""
    value = store.args[1] if len(store.args) > 1 else next(
        (kw.value for kw in store.keywords if kw.arg == "value"), None
    )
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to":
        value = value.func.value
    return value


def split_kernel(m: Module, k: Kernel) -> MatmulSplit | None:
    """The K loop, epilogue and store of a gemm-like kernel (one ``tl.dot`` in one top-level loop,
    one accumulator, a final ``tl.store`` of the accumulator, possibly through a plain cast
    ``c = acc.to(...)`` right before it: ``cast``); None for anything else."""
    if sum(1 for n in ast.walk(k.node) if tl_func(n, m.al) == "dot") != 1:
        return None
    loops = dot_loops(k, m.al)
    accs = accumulators(k, m.al)
    body = kernel_body(k)
    if len(accs) != 1 or not loops or loops[0] not in body or not body:
        return None
    acc = accs[0]
    store = store_call(body[-1], m)
    value = stored_value(store) if store is not None else None
    i = body.index(loops[0])
    after = body[i + 1 : -1]
    cast = None
    if (
        isinstance(value, ast.Name)
        and value.id != acc
        and after
        and isinstance(after[-1], ast.Assign)
        and len(after[-1].targets) == 1
        and isinstance(after[-1].targets[0], ast.Name)
        and after[-1].targets[0].id == value.id
        and isinstance(after[-1].value, ast.Call)
        and isinstance(after[-1].value.func, ast.Attribute)
        and after[-1].value.func.attr == "to"
        and isinstance(after[-1].value.func.value, ast.Name)
        and after[-1].value.func.value.id == acc
    ):
        cast, after = after[-1], after[:-1]  # ``c = acc.to(...)`` then ``tl.store(..., c)``
        value = ast.Name(acc)
    if store is None or not (isinstance(value, ast.Name) and value.id == acc):
        return None
    if any(not isinstance(st, (ast.Assign, ast.AugAssign)) for st in after):
        return None
    # classify backwards: epilogue = reads the accumulator, or feeds only epilogue statements
    epi: list[ast.stmt] = []
    keep: list[ast.stmt] = []
    needed_by_keep = names(store) - {acc}
    for st in reversed(after):
        tg = targets(st)
        reads_acc = acc in names(st.value)  # type: ignore[attr-defined]
        used_by_epi = any(tg & names(e) for e in epi)
        if reads_acc or (used_by_epi and not tg & needed_by_keep):
            if not reads_acc and tg & {acc}:
                return None
            epi.insert(0, st)
        else:
            keep.insert(0, st)
            needed_by_keep |= names(st)
    if any(acc in targets(st) for st in keep):
        return None
    if cast is not None and any(value.id in names(st) for st in keep + epi):
        return None
    return MatmulSplit(k, acc, body[:i], loops[0], keep, epi, store, cast)


def reduction_split(m: Module, k: Kernel) -> MatmulSplit | None:
    """A loop reduction read as a K loop (what split-k also splits; ``acc`` the accumulator): no ``tl.dot``;
    one top-level ``for`` loop of plain assignments whose only value carried from one iteration to the next
    is ``acc``, which starts as ``tl.zeros`` before the loop and is only added to inside it (``acc += x`` or
    ``acc = acc + x``); the loop followed directly by the final store of ``acc`` (possibly cast). Any order
    of the iterations then gives the same sum up to rounding, which is what splitting them needs."""
    if any(tl_func(n, m.al) == "dot" for n in ast.walk(k.node)):
        return None
    body = kernel_body(k)
    loops = [st for st in body if isinstance(st, (ast.For, ast.While))]
    if len(loops) != 1 or not isinstance(loops[0], ast.For) or len(body) < 2 or body[-2] is not loops[0]:
        return None
    loop = loops[0]
    store = store_call(body[-1], m)
    value = stored_value(store) if store is not None else None
    if store is None or not isinstance(value, ast.Name) or loop.orelse:
        return None
    acc = value.id
    inits = [st for st in body[:-2] if acc in targets(st)]
    if len(inits) != 1 or not isinstance(inits[0], ast.Assign) or tl_func(inits[0].value, m.al) != "zeros":
        return None
    flat = _flat_assignments(loop.body, acc)
    if flat is None:
        return None
    assigned = set().union(*(targets(st) for st, _ in flat))
    defined = names(loop.target, ast.Store)
    updates = 0
    for st, condition in flat:
        read = names(st.value) | condition  # type: ignore[attr-defined]
        if acc in targets(st):
            updates += 1
            if not _adds_to(st, acc) or condition:
                return None
            read = read - {acc}
        elif acc in read:
            return None  # the running sum is read: the iterations depend on each other's order
        if read & (assigned - defined):
            return None  # a value carried over from the previous iteration
        defined |= targets(st)
    if updates != 1 or names(store) & (assigned - {acc}):
        return None
    return MatmulSplit(k, acc, body[:-2], loop, [], [], store)


def _flat_assignments(body: list[ast.stmt], acc: str) -> list[tuple[ast.stmt, set[str]]] | None:
    """The loop body as plain assignments in order, each with the names its branch condition reads (empty
    outside a branch); None when it holds anything else. An ``if``/``else`` whose two branches assign the
    same names without touching ``acc`` (``if EVEN: x = tl.load(p) else: x = tl.load(p, mask=m)``, what
    mask-elision writes) is read as its branches' assignments, each under the condition's names."""
    out: list[tuple[ast.stmt, set[str]]] = []
    for st in body:
        if isinstance(st, (ast.Assign, ast.AugAssign)):
            out.append((st, set()))
            continue
        if not (isinstance(st, ast.If) and st.orelse):
            return None
        branches = (st.body, st.orelse)
        if not all(isinstance(b, ast.Assign) for branch in branches for b in branch):
            return None
        made = [set().union(*(targets(b) for b in branch)) for branch in branches]
        if made[0] != made[1] or acc in made[0]:
            return None
        condition = names(st.test)
        # one branch's assignments stand for both: the other only differs in how it computes the same names
        out.extend((b, condition) for branch in branches for b in branch)
    return out


def _adds_to(st: ast.stmt, acc: str) -> bool:
    """``acc += x`` or ``acc = acc + x`` / ``x + acc``, with ``x`` not reading ``acc``."""
    if isinstance(st, ast.AugAssign):
        return (isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name) and st.target.id == acc
                and acc not in names(st.value))
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
            and isinstance(st.value, ast.BinOp) and isinstance(st.value.op, ast.Add)):
        return False
    left, right = st.value.left, st.value.right
    for own, other in ((left, right), (right, left)):
        if isinstance(own, ast.Name) and own.id == acc and acc not in names(other):
            return True
    return False


def launch_stmt(m: Module, la: Launch) -> ast.Expr | None:
    """The statement of a plain ``kernel[grid](...)`` launch (not assigned, not through a helper)."""
    if la.helper is not None or la.func is None or not isinstance(la.stmt, ast.Expr) or la.stmt.value is not la.call:
        return None
    return la.stmt


def plain_grid(m: Module, la: Launch) -> bool:
    """True when the launch grid is a plain tuple (no meta function)."""
    gt = grid_tuple(m, la)
    return gt is not None and gt[1] is None


def next_stmt(func: ast.FunctionDef, st: ast.stmt) -> ast.stmt | None:
    """The statement right after ``st`` in its block of ``func``, else None."""
    for node in ast.walk(func):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and st in block:
                i = block.index(st)
                return block[i + 1] if i + 1 < len(block) else None
    return None
