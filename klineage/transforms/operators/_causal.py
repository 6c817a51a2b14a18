"""Recognising causal attention's key loops for causal-skip: the split forms (two key loops, or two
calls of a jit helper: off the diagonal unmasked, on it masked) and the single masked forms (one
loop, or one helper call with its causal flag on, masking every key block)."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

from klineage.transforms._module import Module
from klineage.transforms._triton import Kernel, kwarg, range_call, tl_func
from klineage.transforms.features import pid_derived
from klineage.transforms.operators._statements import assign, bodies, name_of, uses


@dataclass(frozen=True)
class LoopSplit:
    """Two consecutive key loops of ``kernel``: unmasked up to the diagonal, then masked up to
    ``bound`` (N, the loop's end before the split)."""

    kernel: Kernel
    unmasked: ast.For
    masked: ast.For
    bound: ast.expr


@dataclass(frozen=True)
class CallSplit:
    """Two calls of a jit helper looping over [lo, hi): ``body[first]`` off the diagonal and
    ``body[second]`` on it; ``lo``/``hi`` index the call arguments, ``bound`` is N."""

    kernel: Kernel
    body: list[ast.stmt]
    first: int
    second: int
    lo: int
    hi: int
    bound: ast.expr


@dataclass(frozen=True)
class CausalLoop:
    """A key loop ``range(0, bound, step)`` masking every block with ``where`` (and ``mask``, the
    statement computing the mask, when nothing else reads it); the queries of the block start at
    ``first_row`` and are ``rows`` long (all as source text)."""

    kernel: Kernel
    loop: ast.For
    where: ast.stmt
    mask: ast.stmt | None
    first_row: str
    rows: str
    step: str
    bound: str


@dataclass(frozen=True)
class CausalCall:
    """One call of a jit helper over every key block with its causal flag on: ``lo``/``hi``/``flag``
    index the call arguments; the query rows start at ``first_row``, ``rows`` long, key blocks of
    ``step`` (source text as the caller writes it)."""

    stmt: ast.stmt
    call: ast.Call
    lo: int
    hi: int
    flag: int
    first_row: str
    rows: str
    step: str


def _minimum_bound(m: Module, k: Kernel, node: ast.expr, derived: set[str]) -> ast.expr | None:
    """For a diagonal bound ``tl.minimum(diag, N)`` (diag depends on the program id, N does not; a
    local name is followed to its single assignment) return N."""
    if isinstance(node, ast.Name):
        assigns = [
            a for b in bodies(k.node) for st in b if (a := assign(st)) is not None and a[0] == node.id
        ]
        if len(assigns) != 1:
            return None
        node = assigns[0][1]
    if tl_func(node, m.al) != "minimum" or len(node.args) != 2:  # type: ignore[attr-defined]
        return None
    a, b = node.args  # type: ignore[attr-defined]
    da, db = uses([a], derived), uses([b], derived)
    if da and not db:
        return b
    if db and not da:
        return a
    return None


def _conjuncts(node: ast.expr) -> list[ast.expr]:
    """``a & b & c`` as [a, b, c]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def func_name(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else None


# ------------------------------------------------ present: the split forms (two loops, two helper calls)


def loop_splits(m: Module) -> list[LoopSplit]:
    """Two consecutive key loops: the unmasked one up to the diagonal, then the masked one."""
    out = []
    for k in m.kernels:
        derived = pid_derived(k.node, m.al)
        for body in bodies(k.node):
            for a, b in itertools.pairwise(body):
                ra, rb = range_call(a, m.al), range_call(b, m.al)
                if ra is None or rb is None or len(ra.args) != 3 or len(rb.args) != 3:
                    continue
                assert isinstance(a, ast.For) and isinstance(b, ast.For)
                if m.src.seg(a.target) != m.src.seg(b.target) or m.src.seg(ra.args[2]) != m.src.seg(rb.args[2]):
                    continue
                if m.src.seg(ra.args[1]) != m.src.seg(rb.args[0]) or not uses([ra.args[1]], derived):
                    continue
                n = _minimum_bound(m, k, rb.args[1], derived)
                masked = any(tl_func(x, m.al) == "where" for x in ast.walk(b))
                if n is not None and masked and len(b.body) > len(a.body):
                    out.append(LoopSplit(k, a, b, n))
    return out


def call_splits(m: Module) -> list[CallSplit]:
    """Two calls of a jit helper looping over [lo, hi): off the diagonal, then on it."""
    helpers = {k.name: k for k in m.kernels}
    out = []
    for k in m.kernels:
        derived = pid_derived(k.node, m.al)
        for body in bodies(k.node):
            for i, st in enumerate(body):
                first = helper_call(st, helpers)
                if first is None:
                    continue
                for j in range(i + 1, min(i + 3, len(body))):
                    second = helper_call(body[j], helpers)
                    if second is None:
                        if assign(body[j]) is None:
                            break
                        continue
                    found = _pair(m, k, body, i, j, first, second, derived, helpers)
                    if found is not None:
                        out.append(found)
                    break
    return out


def helper_call(st: ast.stmt, helpers: dict[str, Kernel]) -> ast.Call | None:
    """The call of a jit helper (positional arguments only) that ``st`` makes or assigns, else None."""
    value = st.value if isinstance(st, (ast.Assign, ast.Expr)) else None
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in helpers
        and not value.keywords
        and not any(isinstance(a, ast.Starred) for a in value.args)
    ):
        return value
    return None


def _pair(
    m: Module, k: Kernel, body: list[ast.stmt], i: int, j: int, c1: ast.Call, c2: ast.Call,
    derived: set[str], helpers: dict[str, Kernel],
) -> CallSplit | None:
    s1, s2 = body[i], body[j]
    if func_name(c1) != func_name(c2) or len(c1.args) != len(c2.args):
        return None
    if isinstance(s1, ast.Assign) != isinstance(s2, ast.Assign):
        return None
    if isinstance(s1, ast.Assign) and m.src.seg(s1.targets[0]) != m.src.seg(s2.targets[0]):  # type: ignore[attr-defined]
        return None
    diff = [x for x, (a, b) in enumerate(zip(c1.args, c2.args, strict=True)) if m.src.seg(a) != m.src.seg(b)]
    pairs = [
        (lo, hi)
        for lo in diff
        for hi in diff
        if lo < hi and m.src.seg(c1.args[hi]) == m.src.seg(c2.args[lo]) and uses([c2.args[lo]], derived)
    ]
    if len(pairs) != 1:
        return None
    lo, hi = pairs[0]
    flags = [x for x in diff if x not in (lo, hi)]
    if not flags or not all(
        isinstance(c1.args[x], ast.Constant) and c1.args[x].value is False  # type: ignore[attr-defined]
        and isinstance(c2.args[x], ast.Constant) and c2.args[x].value is True  # type: ignore[attr-defined]
        for x in flags
    ):
        return None
    helper = helpers[func_name(c1)]  # type: ignore[index]
    params = [p.name for p in helper.params]
    if len(params) != len(c1.args):
        return None
    # the helper loops over range(lo, hi, ...) and masks with tl.where under the flags
    rcs = [range_call(n, m.al) for n in ast.walk(helper.node) if isinstance(n, ast.For)]
    if not any(
        rc is not None and len(rc.args) >= 2
        and name_of(rc.args[0]) == params[lo] and name_of(rc.args[1]) == params[hi]
        for rc in rcs
    ):
        return None
    for x in flags:
        guarded = [
            n for n in ast.walk(helper.node) if isinstance(n, ast.If) and uses([n.test], {params[x]})
        ]
        if not any(tl_func(w, m.al) == "where" for g in guarded for w in ast.walk(g)):
            return None
    # statements between the calls: assignments used only by the second call
    between = body[i + 1 : j]
    names = {a[0] for st in between if (a := assign(st)) is not None}
    rest = [st for x, st in enumerate(body) if x not in range(i, j + 1)]
    if uses(rest, names):
        return None
    n = _minimum_bound(m, k, c2.args[hi], derived)
    if n is None:
        return None
    return CallSplit(k, body, i, j, lo, hi, n)


# ------------------------------------------- applicable: one loop or helper call masking every block


def causal_loops(m: Module) -> list[CausalLoop]:
    """Key loops ``range(0, N, step)`` of launched kernels masking every block causally."""
    out = []
    split = {id(x) for ls in loop_splits(m) for x in (ls.unmasked, ls.masked)}
    for k in m.launched:
        derived = pid_derived(k.node, m.al)
        top = {a[0]: a[1] for st in k.node.body if (a := assign(st)) is not None}
        for loop in [n for n in ast.walk(k.node) if isinstance(n, ast.For)]:
            rc = range_call(loop, m.al)
            if id(loop) in split or rc is None or len(rc.args) != 3 or kwarg(rc, "num_stages") is not None:
                continue
            if not (isinstance(rc.args[0], ast.Constant) and rc.args[0].value == 0):
                continue
            if not isinstance(loop.target, ast.Name) or uses([rc.args[1]], derived):
                continue
            found = _mask_in(m, loop, top, derived, m.src.seg(rc.args[2]), m.src.seg(rc.args[1]))
            if found is not None:
                out.append(CausalLoop(k, loop, *found, m.src.seg(rc.args[2]), m.src.seg(rc.args[1])))
    return out


def _mask_in(
    m: Module, loop: ast.For, top: dict[str, ast.expr], derived: set[str], step: str, bound: str
) -> tuple[ast.stmt, ast.stmt | None, str, str] | None:
    local = {a[0]: (st, a[1]) for st in loop.body if (a := assign(st)) is not None}
    var = loop.target.id  # type: ignore[attr-defined]
    for st in loop.body:
        a = assign(st)
        if a is None or tl_func(a[1], m.al) != "where" or len(a[1].args) != 3:  # type: ignore[attr-defined]
            continue
        cond, x, _neg = a[1].args  # type: ignore[attr-defined]
        if name_of(x) != a[0]:
            continue
        mask_stmt = None
        if isinstance(cond, ast.Name) and cond.id in local:
            mask_stmt, cond = local[cond.id]
            used = [n for s in loop.body if s is not st and s is not mask_stmt for n in ast.walk(s)]
            if any(isinstance(n, ast.Name) and n.id == assign(mask_stmt)[0] for n in used):  # type: ignore[index]
                mask_stmt = None  # still needed elsewhere: keep it
        terms = _conjuncts(cond)
        causal = [t for t in terms if _causal_cmp(m, t, top, local, derived, var, step) is not None]
        if len(causal) != 1:
            continue
        rest_ok = all(t is causal[0] or _key_bound(m, t, local, var, step, bound) for t in terms)
        if not rest_ok:
            continue
        a_text, bm = _causal_cmp(m, causal[0], top, local, derived, var, step)  # type: ignore[misc]
        return st, mask_stmt, a_text, bm
    return None


def _offsets(m: Module, node: ast.expr, defs: dict[str, ast.expr]) -> tuple[ast.expr, ast.expr] | None:
    """A name defined as ``A + tl.arange(0, B)``: (A, B)."""
    v = defs.get(node.id) if isinstance(node, ast.Name) else None
    if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add)):
        return None
    for base, ar in ((v.left, v.right), (v.right, v.left)):
        if tl_func(ar, m.al) == "arange" and len(ar.args) == 2 and m.src.seg(ar.args[0]) == "0":  # type: ignore
            return base, ar.args[1]  # type: ignore[attr-defined]
    return None


def _causal_cmp(
    m: Module, t: ast.expr, top: dict[str, ast.expr], local: dict[str, tuple[ast.stmt, ast.expr]],
    derived: set[str], var: str, step: str,
) -> tuple[str, str] | None:
    """``Q[:, None] >= K[None, :]`` with Q = A + arange(0, BM) (A from the program id) and
    K = loop var + arange(0, step): (A, BM)."""
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1):
        return None
    left, right = t.left, t.comparators[0]
    if isinstance(t.ops[0], ast.LtE):
        left, right = right, left
    elif not isinstance(t.ops[0], ast.GtE):
        return None
    if not (isinstance(left, ast.Subscript) and isinstance(right, ast.Subscript)):
        return None
    q = _offsets(m, left.value, top)
    kk = _offsets(m, right.value, {n: v for n, (_s, v) in local.items()})
    if q is None or kk is None:
        return None
    if name_of(kk[0]) != var or m.src.seg(kk[1]) != step or not uses([q[0]], derived):
        return None
    if m.src.seg(left.slice) != ":, None" or m.src.seg(right.slice) != "None, :":
        return None
    return m.src.seg(q[0]), m.src.seg(q[1])


def _key_bound(
    m: Module, t: ast.expr, local: dict[str, tuple[ast.stmt, ast.expr]], var: str, step: str, bound: str
) -> bool:
    """``K[None, :] < N`` with N the loop's upper bound: true on every block below the diagonal."""
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Lt)):
        return False
    left = t.left
    if not isinstance(left, ast.Subscript) or m.src.seg(t.comparators[0]) != bound:
        return False
    kk = _offsets(m, left.value, {n: v for n, (_s, v) in local.items()})
    return kk is not None and name_of(kk[0]) == var and m.src.seg(kk[1]) == step


def causal_calls(m: Module) -> list[CausalCall]:
    """One call of a jit helper that loops over ``range(lo, hi, BN)`` with lo = 0 passed, and whose
    single True constexpr flag guards the causal comparison ``P[:, None] >= <key offsets>`` (P a
    helper parameter the caller binds to ``A + tl.arange(0, BM)``, A from the program id):
    (``CausalCall``)."""
    helpers = {k.name: k for k in m.kernels}
    split = {id(cs.body[x]) for cs in call_splits(m) for x in (cs.first, cs.second)}
    out = []
    for k in m.launched:
        derived = pid_derived(k.node, m.al)
        defs = {a[0]: a[1] for b in bodies(k.node) for st in b if (a := assign(st)) is not None}
        for body in bodies(k.node):
            for st in body:
                call = helper_call(st, helpers)
                if call is None or id(st) in split:
                    continue
                found = _causal_call(m, st, helpers[func_name(call)], call, defs, derived)  # type: ignore[index]
                if found is not None:
                    out.append(found)
    return out


def _causal_call(
    m: Module, st: ast.stmt, helper: Kernel, call: ast.Call, defs: dict[str, ast.expr], derived: set[str]
) -> CausalCall | None:
    params = [p.name for p in helper.params]
    if len(params) != len(call.args):
        return None
    for loop in (n for n in ast.walk(helper.node) if isinstance(n, ast.For)):
        rc = range_call(loop, m.al)
        if rc is None or len(rc.args) != 3 or not isinstance(loop.target, ast.Name):
            continue
        lo, hi = name_of(rc.args[0]), name_of(rc.args[1])
        if lo not in params or hi not in params:
            continue
        lo_i, hi_i = params.index(lo), params.index(hi)
        if not (isinstance(call.args[lo_i], ast.Constant) and call.args[lo_i].value == 0):  # type: ignore[attr-defined]
            continue
        step = name_of(rc.args[2])
        step_text = m.src.seg(call.args[params.index(step)]) if step in params else m.src.seg(rc.args[2])
        flags = [
            x for x, a in enumerate(call.args)
            if isinstance(a, ast.Constant) and a.value is True and helper.param(params[x]).constexpr  # type: ignore[union-attr]
        ]
        hits = [(x, q) for x in flags if (q := _guarded_causal(m, helper, params, x, loop)) is not None]
        if len(hits) != 1:
            continue
        flag, q_param = hits[0]
        offsets = _offsets(m, call.args[params.index(q_param)], defs)
        if offsets is None or not uses([offsets[0]], derived):
            continue
        return CausalCall(st, call, lo_i, hi_i, flag, m.src.seg(offsets[0]), m.src.seg(offsets[1]), step_text)
    return None


def _guarded_causal(m: Module, helper: Kernel, params: list[str], flag: int, loop: ast.For) -> str | None:
    """The helper parameter P of the causal mask ``keep = P[:, None] >= (v + O[None, :])`` (v the
    loop variable, O = tl.arange(0, step); ``<=`` mirrored), assigned whole in the body of an
    ``if FLAG:``, with no other comparison on v or P there (a window or a strict ``>`` would
    make the unmasked blocks below the diagonal wrong); None otherwise."""
    var, step = loop.target.id, m.src.seg(range_call(loop, m.al).args[2])  # type: ignore[attr-defined,union-attr]
    defs = {a[0]: a[1] for b in bodies(helper.node) for st in b if (a := assign(st)) is not None}
    for node in ast.walk(helper.node):
        if not (isinstance(node, ast.If) and name_of(node.test) == params[flag]):
            continue
        compares = [t for st in node.body for t in ast.walk(st) if isinstance(t, ast.Compare)
                    and uses([t], {var, *params})]
        mask = next((a[1] for st in node.body if (a := assign(st)) is not None and a[1] in compares), None)
        if len(compares) != 1 or mask is None or len(mask.ops) != 1:
            continue
        left, right = mask.left, mask.comparators[0]
        if isinstance(mask.ops[0], ast.LtE):
            left, right = right, left
        elif not isinstance(mask.ops[0], ast.GtE):
            continue
        if not (isinstance(left, ast.Subscript) and name_of(left.value) in params
                and m.src.seg(left.slice) == ":, None"):
            continue
        if _key_offsets(m, right, defs, var, step):
            return left.value.id  # type: ignore[attr-defined]
    return None


def _key_offsets(m: Module, node: ast.expr, defs: dict[str, ast.expr], var: str, step: str) -> bool:
    """``v + O[None, :]`` / ``O[None, :] + v`` with O = tl.arange(0, step), or ``K[None, :]`` with
    K = v + tl.arange(0, step): the keys of the block starting at v."""
    if isinstance(node, ast.Subscript) and m.src.seg(node.slice) == "None, :":
        kk = _offsets(m, node.value, defs)
        return kk is not None and name_of(kk[0]) == var and m.src.seg(kk[1]) == step
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return False
    for v, o in ((node.left, node.right), (node.right, node.left)):
        if name_of(v) != var or not (isinstance(o, ast.Subscript) and m.src.seg(o.slice) == "None, :"):
            continue
        ar = defs.get(name_of(o.value) or "")
        if (tl_func(ar, m.al) == "arange" and len(ar.args) == 2  # type: ignore[union-attr]
                and m.src.seg(ar.args[0]) == "0" and m.src.seg(ar.args[1]) == step):  # type: ignore[union-attr]
            return True
    return False
