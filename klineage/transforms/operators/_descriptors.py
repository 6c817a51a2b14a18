"""2-D tile accesses read as tensor descriptors (what the tensor-descriptors operator rewrites).

A pointer tile access ``tl.load(base + i[:, None] * s0 + j[None, :] * s1, mask=(i[:, None] < D0) &
(j[None, :] < D1), other=0)`` with ``i = o0 + tl.arange(0, B0)`` and ``j = o1 + tl.arange(0, B1)`` reads
the same values as ``tl.make_tensor_descriptor(base, shape=[D0, D1], strides=[s0, 1], block_shape=[B0,
B1]).load([o0, o1])`` when ``s1`` is 1: the descriptor zero-fills what lies outside ``[0, D0) x [0, D1)``
exactly as the mask does. When the unit stride is on the first axis instead, the descriptor describes
the transposed tensor and its tile is read back transposed (``.T``). Every analysis here returns a
``Refusal`` (why) rather than guessing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from klineage.schema import pyast
from klineage.transforms._module import Module
from klineage.transforms._source import int_const
from klineage.transforms._triton import Kernel, kwarg, local_assignments, single_value, tl_func

_HINTS = {"multiple_of", "max_contiguous", "max_constancy"}
_DEPTH = 8


@dataclass(frozen=True)
class Refusal:
    """Why a kernel (or one access of it) is not rewritten."""

    reason: str


@dataclass(frozen=True)
class Index:
    """One tile axis: ``start + tl.arange(0, block)`` (source texts; ``start`` "0" when there is none)."""

    start: str
    block: str


@dataclass(frozen=True)
class Desc:
    """A tensor descriptor: ``base`` pointer (text), the kernel pointer parameter it derives from, its
    ``shape``, leading ``stride`` (the last one is 1) and ``block`` (texts, descriptor order); ``unit``
    is the kernel's own inner-stride expression when it is not the literal 1 (the launch must then
    guarantee it is 1)."""

    base: str
    param: str
    shape: tuple[str, str]
    stride: str
    block: tuple[str, str]
    unit: str | None = None


@dataclass(frozen=True)
class Access:
    """One tile load or store of a descriptor: the call, its offsets (descriptor order), whether the
    tile is the descriptor's transposed (``.T``), and for a store the value text."""

    call: ast.Call
    desc: Desc
    offsets: tuple[str, str]
    transposed: bool = False
    value: str | None = None


class Reader:
    """Reads the index, pointer and mask expressions of one kernel."""

    def __init__(self, m: Module, k: Kernel, loop_vars: set[str]) -> None:
        self.m, self.k = m, k
        self.params = {p.name for p in k.params}
        self.loop_vars = loop_vars

    # -- names
    def value(self, name: str) -> ast.expr | None:
        """The single value of a kernel local (None for a parameter or a name assigned more than once)."""
        return None if name in self.params else single_value(self.k.node, name)

    def stable(self, node: ast.AST) -> bool:
        """Every name in ``node`` keeps one value in the kernel (a parameter, a local assigned once, or
        the target of an enclosing loop the body never reassigns)."""
        for n in ast.walk(node):
            if not isinstance(n, ast.Name):
                continue
            if n.id in self.params and not local_assignments(self.k.node, n.id):
                continue
            if n.id in self.loop_vars and not local_assignments(self.k.node, n.id):
                continue
            if n.id not in self.params and not local_assignments(self.k.node, n.id) and not self._for_target(n.id):
                continue  # a module name (tl, a global constant)
            if self.value(n.id) is None or self._for_target(n.id):
                return False
        return True

    def _for_target(self, name: str) -> bool:
        return any(isinstance(f, ast.For) and any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(f.target))
                   for f in ast.walk(self.k.node))

    def is_tile(self, node: ast.AST, depth: int = 0) -> bool:
        """True when ``node`` (through locals) involves ``tl.arange``, a load or a subscript (a tensor)."""
        if depth > _DEPTH:
            return True
        for n in ast.walk(node):
            if isinstance(n, ast.Subscript) or tl_func(n, self.m.al) in ("arange", "load", "zeros", "full"):
                return True
            if isinstance(n, ast.Name) and n.id not in self.params and n.id not in self.loop_vars:
                if not local_assignments(self.k.node, n.id) and not self._for_target(n.id):
                    continue  # a module name (tl, a global constant)
                v = self.value(n.id)
                if v is None or self.is_tile(v, depth + 1):
                    return True
        return False

    def unhint(self, node: ast.expr) -> ast.expr:
        """``tl.multiple_of(x, ...)`` / ``tl.max_contiguous(x, ...)`` -> ``x`` (hints are the identity)."""
        while isinstance(node, ast.Call) and tl_func(node, self.m.al) in _HINTS and node.args:
            node = node.args[0]
        return node

    # -- one axis
    def index(self, node: ast.expr, depth: int = 0) -> Index | None:
        """``start + tl.arange(0, B)`` read through locals and hints; None for any other form."""
        node = self.unhint(node)
        if depth > _DEPTH:
            return None
        if isinstance(node, ast.Name):
            v = self.value(node.id)
            return None if v is None else self.index(v, depth + 1)
        if tl_func(node, self.m.al) == "arange":
            call: ast.Call = node  # type: ignore[assignment]
            if len(call.args) == 2 and int_const(call.args[0]) == 0 and not call.keywords:
                return Index("0", self.m.src.seg(call.args[1]))
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.is_tile(node.left), self.is_tile(node.right)
            if left == right:
                return None
            tile, scalar = (node.left, node.right) if left else (node.right, node.left)
            inner = self.index(tile, depth + 1)
            if inner is None or not self.stable(scalar):
                return None
            text = _paren(self.m.src.seg(scalar), scalar)
            return Index(text if inner.start == "0" else f"{inner.start} + {text}", inner.block)
        return None

    @staticmethod
    def axis(node: ast.expr) -> tuple[int, ast.expr] | None:
        """``x[:, None]`` -> (0, x), ``x[None, :]`` -> (1, x); None otherwise (also for 3-D indexing)."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2):
            return None
        a, b = node.slice.elts
        full = [isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None for e in (a, b)]
        none = [isinstance(e, ast.Constant) and e.value is None for e in (a, b)]
        if full[0] and none[1]:
            return 0, node.value
        if none[0] and full[1]:
            return 1, node.value
        return None

    def term(self, node: ast.expr) -> tuple[int, Index, str] | Refusal | None:
        """A pointer term ``x[:, None] * s`` (or ``s * x[...]``, or ``x[...]`` for stride 1): (axis,
        index, stride text); a Refusal for a tile term of another form; None for a scalar term."""
        sub, stride = node, "1"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if isinstance(node.left, ast.Subscript) and not self.is_tile(node.right):
                sub, stride = node.left, self.m.src.seg(node.right)
                stride_node = node.right
            elif isinstance(node.right, ast.Subscript) and not self.is_tile(node.left):
                sub, stride = node.right, self.m.src.seg(node.left)
                stride_node = node.left
            else:
                tile = self.is_tile(node)
                return Refusal(f"'{self.m.src.seg(node)}' is not an index times a stride") if tile else None
            if not self.stable(stride_node):
                return Refusal(f"the stride '{stride}' changes inside the kernel")
            if int_const(stride_node) == 1:
                stride = "1"
        if isinstance(sub, ast.Subscript):
            if isinstance(sub.slice, ast.Tuple) and len(sub.slice.elts) > 2:
                return Refusal(f"'{self.m.src.seg(sub)}' indexes a {len(sub.slice.elts)}-D tile (descriptors "
                               "here are 2-D)")
            ax = self.axis(sub)
            if ax is None:
                return Refusal(f"'{self.m.src.seg(sub)}' is not a 2-D tile axis")
            idx = self.index(ax[1])
            if idx is None:
                return Refusal(f"'{self.m.src.seg(ax[1])}' is not an offset plus tl.arange(0, BLOCK)")
            return ax[0], idx, stride
        return Refusal(f"'{self.m.src.seg(node)}' is not a tile term") if self.is_tile(node) else None


_TIGHT = (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript)
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div)


def _paren(text: str, node: ast.AST) -> str:
    """``text`` wrapped in parentheses unless it can follow ``a + `` unchanged (an atom or arithmetic)."""
    if isinstance(node, _TIGHT) or (isinstance(node, ast.BinOp) and isinstance(node.op, _ARITH)):
        return text
    return f"({text})"


def paren(text: str, factor: bool = False) -> str:
    """A source expression ready to follow ``a + `` (or, with ``factor``, ``a * ``): parenthesized when
    it binds less tightly."""
    try:
        node = pyast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return f"({text})"
    if factor:
        return text if isinstance(node, _TIGHT) else f"({text})"
    return _paren(text, node)


def _expr(text: str) -> ast.expr:
    return pyast.parse(text.strip(), mode="eval").body


def flatten(node: ast.expr, op: type = ast.Add) -> list[ast.expr]:
    """The operands of a chain of one binary operator (left to right)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, op):
        return flatten(node.left, op) + flatten(node.right, op)
    return [node]


def factors(node: ast.expr) -> set[str]:
    """Source-independent names of a product's factors (``a * b * c`` -> {"a", "b", "c"})."""
    return {f.id for f in flatten(node, ast.Mult) if isinstance(f, ast.Name)}


def pointer(r: Reader, node: ast.expr) -> tuple[str, str, list[str], dict[int, tuple[Index, str]]] | Refusal:
    """A 2-D tile pointer: (base text, pointer parameter, base offset factors per offset term, {axis:
    (index, stride)}); the base is the scalar terms (a pointer parameter first)."""
    m = r.m
    if isinstance(node, ast.Name) and node.id not in r.params:
        if any(isinstance(a, ast.AugAssign) for a in local_assignments(r.k.node, node.id)):
            return Refusal(f"the pointers '{node.id}' are advanced by increments")
        v = r.value(node.id)
        if v is None:
            return Refusal(f"the pointers '{node.id}' are assigned more than once")
        node = v
    axes: dict[int, tuple[Index, str]] = {}
    scalars: list[ast.expr] = []
    for t in flatten(node):
        got = r.term(t)
        if isinstance(got, Refusal):
            return got
        if got is None:
            scalars.append(t)
            continue
        ax, idx, stride = got
        if ax in axes:
            return Refusal(f"two terms index tile axis {ax}")
        axes[ax] = (idx, stride)
    if len(axes) != 2:
        return Refusal(f"'{m.src.seg(node)}' is not a 2-D tile of pointers")
    if not scalars or not all(r.stable(s) for s in scalars):
        return Refusal("the base pointer changes inside the kernel")
    root = scalars[0]
    offsets: list[ast.expr] = list(scalars[1:])
    if isinstance(root, ast.Name) and root.id not in r.params:
        v = r.value(root.id)
        parts = flatten(v) if v is not None else []
        if not parts or not isinstance(parts[0], ast.Name) or parts[0].id not in r.params:
            return Refusal(f"the base '{root.id}' is not a pointer argument plus an offset")
        param = parts[0].id
        offsets = parts[1:] + offsets
    elif isinstance(root, ast.Name):
        param = root.id
    else:
        return Refusal(f"the base '{m.src.seg(root)}' does not start at a pointer argument")
    if any(r.is_tile(o) for o in offsets):
        return Refusal("the base offset is a tensor")
    base = " + ".join(m.src.seg(s) for s in scalars)
    return base, param, [",".join(sorted(factors(o))) for o in offsets], axes


def bounds(r: Reader, node: ast.expr | None) -> dict[int, tuple[Index, str]] | Refusal:
    """A tile mask ``(i[:, None] < D0) & (j[None, :] < D1)``: {axis: (index, bound text)}."""
    if node is None:
        return Refusal("an unmasked tile access (the descriptor's shape is unknown)")
    if isinstance(node, ast.Name) and node.id not in r.params:
        v = r.value(node.id)
        if v is None:
            return Refusal(f"the mask '{node.id}' is assigned more than once")
        node = v
    out: dict[int, tuple[Index, str]] = {}
    for c in flatten(node, ast.BitAnd):
        if not (isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], ast.Lt)):
            return Refusal(f"the mask term '{r.m.src.seg(c)}' is not 'index < bound'")
        ax = r.axis(c.left)
        idx = r.index(ax[1]) if ax is not None else None
        bound = c.comparators[0]
        if ax is None or idx is None or ax[0] in out or r.is_tile(bound) or not r.stable(bound):
            return Refusal(f"the mask term '{r.m.src.seg(c)}' is not a tile bound")
        out[ax[0]] = (idx, r.m.src.seg(bound))
    if len(out) != 2:
        return Refusal("the mask does not bound both tile axes")
    return out


def access(r: Reader, call: ast.Call, unit_first: Callable[[str, str], bool] | None = None) -> Access | Refusal:
    """A ``tl.load`` / ``tl.store`` of a 2-D tile read as a descriptor access. When both tile strides are
    kernel arguments, the last axis is taken as the contiguous one (the launch checks it) unless
    ``unit_first(s0, s1)`` says the host passes a tensor's last-dim stride as ``s0`` (then the tile is read
    through the transposed descriptor and the launch checks ``s0``)."""
    m = r.m
    store = tl_func(call, m.al) == "store"
    allowed = {"mask"} | (set() if store else {"other"})
    extra = [kw.arg for kw in call.keywords if kw.arg not in allowed]
    nargs = 2 if store else 1
    if extra or len(call.args) > nargs + (1 if store else 2) or len(call.args) < nargs:
        return Refusal(f"'{m.src.seg(call)[:60]}' passes {', '.join(map(str, extra)) or 'arguments'} a "
                       "descriptor access does not take")
    mask = kwarg(call, "mask") or (call.args[nargs] if len(call.args) > nargs else None)
    if not store:
        other = kwarg(call, "other") or (call.args[2] if len(call.args) > 2 else None)
        if other is not None and not (isinstance(other, ast.Constant) and other.value in (0, 0.0)
                                      and not isinstance(other.value, bool)):
            return Refusal(f"the load pads with {m.src.seg(other)} (descriptors zero-fill)")
    ptr = pointer(r, call.args[0])
    if isinstance(ptr, Refusal):
        return ptr
    base, param, offset_factors, axes = ptr
    bnd = bounds(r, mask)
    if isinstance(bnd, Refusal):
        return bnd
    for ax in (0, 1):
        if axes[ax][0] != bnd[ax][0]:
            return Refusal(f"the mask of axis {ax} bounds another index than the pointer")
    s0, s1 = axes[0][1], axes[1][1]
    if s1 == "1" and s0 != "1":
        order, unit = (0, 1), None
    elif s0 == "1" and s1 != "1":
        order, unit = (1, 0), None
    elif s0 != "1" and s1 != "1":
        if int_const(_expr(s1)) is not None or int_const(_expr(s0)) is not None:
            return Refusal(f"no unit inner stride (strides {s0} and {s1}): descriptors need a contiguous last "
                           "dimension")
        if unit_first is not None and unit_first(s0, s1):  # e.g. nn.Linear's (N, K) weight read as B[k, n]
            order, unit = (1, 0), s0
        else:
            order, unit = (0, 1), s1  # row-major by default: the launch must guarantee the unit stride
    else:
        return Refusal("both tile axes have stride 1")
    lead = axes[order[0]][1]
    if any(lead not in f.split(",") for f in offset_factors):
        return Refusal(f"the base offset is not a multiple of the row stride '{lead}' (alignment unknown)")
    desc = Desc(base, param, (bnd[order[0]][1], bnd[order[1]][1]), lead,
                (axes[order[0]][0].block, axes[order[1]][0].block), unit)
    offsets = (axes[order[0]][0].start, axes[order[1]][0].start)
    if store:
        if order != (0, 1):
            return Refusal("a transposed tile store")
        return Access(call, desc, offsets, False, m.src.seg(call.args[1]))
    return Access(call, desc, offsets, order == (1, 0))
