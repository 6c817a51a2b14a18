"""Static features of a Triton candidate module, computed from the source with ``ast``.

The features are the *kernel* features of the condition language (DESIGN.md, "Conditions"):
booleans for patterns (``has_dot``, ``persistent``, ...), ints for tunables (``num_stages``,
``block_m``, ...; ``None`` when the source does not fix them). They are heuristics over structure,
meant for anchoring skills and for retrieval, never for correctness.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from klineage.schema.kernel_features import KERNEL_FEATURES
from klineage.transforms._source import Src, int_const
from klineage.transforms._triton import (
    Aliases,
    Kernel,
    aliases,
    autotune_configs,
    dotted,
    is_tl_attr,
    kernels,
    kwarg,
    launches,
    loops,
    range_call,
    sets_register_cap,
    tl_func,
    value_sites,
)

# ``kernel_features`` returns every name of ``KERNEL_FEATURES`` (declared once, in ``schema.kernel_features``),
# in that order. How each is recognised (booleans unless noted):
#
#   - ``has_dot``: a ``tl.dot`` in a kernel; ``n_dots`` (int): how many.
#   - ``has_k_loop``: a loop containing both loads and ``tl.dot`` (a GEMM-style reduction loop).
#   - ``num_stages`` / ``num_warps`` (int | None): the largest value set at launch, in autotune configs
#     or (stages) on ``tl.range``; None when the source leaves the Triton default.
#   - ``block_m`` / ``block_n`` / ``block_k`` / ``block_size`` (int | None): the largest literal value
#     of the tile constexprs (named ``*_M``/``*_N``/``*_K``; ``block_size`` for the others).
#   - ``uses_autotune``, ``n_autotune_configs`` (int), ``uses_heuristics``.
#   - ``row_reduction``: ``tl.sum``/``tl.max``/... over an axis in a kernel without ``tl.dot``.
#   - ``online_softmax``: a loop keeping a running max (``tl.maximum(m, ...)``) and rescaling by ``exp``.
#   - ``persistent``: programs loop over work items with a program-count stride (grid from SM count).
#   - ``uses_tma``: tensor descriptors or block pointers.
#   - ``grouped_order``: a GROUP_SIZE program-id swizzle (or ``tl.swizzle2d``).
#   - ``uses_exp2``, ``uses_rsqrt``, ``eviction_hints``, ``contiguity_hints``, ``has_atomic``.
#   - ``int64_offsets``: casts to ``tl.int64``.
#   - ``causal_skip``: attention loop bounds that depend on the program id (blocks above the diagonal
#     are skipped).
#   - ``mask_elision``: a constexpr branch selects unmasked loads (EVEN_K style).
#   - ``epilogue_fusion``: the accumulator of a ``tl.dot`` loop is transformed before its store.
#   - ``fp32_accumulate``: fp32 accumulators (``tl.zeros(..., dtype=tl.float32)``) or fp32 upcasts of loads.
#   - ``dot_accumulate``: ``acc = tl.dot(a, b, acc)`` (accumulate inside the MMA).
#   - ``multi_row``: a row kernel that processes a 2-D tile of several rows per program.
#   - ``single_pass_row``: a row kernel without a column loop (the whole row in one tile).
#   - ``split_k``: K is partitioned across programs (atomics or a SPLIT_K constexpr in a dot kernel).
#   - ``n_kernels`` (int): launched ``@triton.jit`` kernels; ``n_loops`` (int): loops in kernels.
#   - ``uses_mask``: a masked load or store.
#   - ``elementwise``: no dot and no reduction.
#   - ``register_cap``: ``maxnreg`` set (not None) on a call: an autotune config or a launch.

_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum"}
_TMA = {
    "make_tensor_descriptor",
    "_experimental_make_tensor_descriptor",
    "make_block_ptr",
    "load_tensor_descriptor",
    "TensorDescriptor",
}


def _calls(node: ast.AST, al: Aliases) -> list[tuple[str, ast.Call]]:
    return [(f, n) for n in ast.walk(node) if isinstance(n, ast.Call) and (f := tl_func(n, al))]


def _tl_names(node: ast.AST, al: Aliases) -> set[str]:
    return {f for f, _ in _calls(node, al)}


def derived_names(kernel: ast.FunctionDef, al: Aliases, source: str = "program_id") -> set[str]:
    """Names in a kernel whose value depends on a ``tl.<source>`` call (transitively through
    assignments and loop targets)."""
    return pid_derived(kernel, al, source)


def pid_derived(kernel: ast.FunctionDef, al: Aliases, source: str = "program_id") -> set[str]:
    """Names in a kernel whose value depends on ``tl.program_id`` (transitively through assignments
    and for-loop targets)."""
    derived: set[str] = set()
    changed = True
    assigns = [n for n in ast.walk(kernel) if isinstance(n, (ast.Assign, ast.AugAssign, ast.For))]
    while changed:
        changed = False
        for a in assigns:
            value = a.iter if isinstance(a, ast.For) else a.value
            uses = any(tl_func(n, al) == source for n in ast.walk(value)) or any(
                isinstance(n, ast.Name) and n.id in derived for n in ast.walk(value)
            )
            if not uses:
                continue
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id not in derived:
                        derived.add(n.id)
                        changed = True
    return derived


def _block_values(src: Src, ks: list[Kernel], al: Aliases) -> dict[str, int | None]:
    out: dict[str, int | None] = {"block_m": None, "block_n": None, "block_k": None, "block_size": None}
    for k in ks:
        for p in k.constexprs:
            up = p.upper()
            if "BLOCK" not in up and "TILE" not in up:
                continue
            key = "block_size"
            for suffix in ("M", "N", "K"):
                if re.search(rf"(_|SIZE){suffix}$", up) or up.endswith(f"_{suffix}"):
                    key = f"block_{suffix.lower()}"
            vals = [int_const(s.node) for s in value_sites(src, k, p, al)]
            ints = [v for v in vals if v is not None]
            if ints:
                out[key] = max([*ints, out[key] or 0])
    return out


def _meta_max(src: Src, ks: list[Kernel], al: Aliases, name: str) -> int | None:
    vals: list[int] = []
    for k in ks:
        vals += [v for s in value_sites(src, k, name, al) if (v := int_const(s.node)) is not None]
        if name == "num_stages":
            for loop in loops(k.node):
                rc = range_call(loop, al)
                if rc is not None and (v := int_const(kwarg(rc, "num_stages"))) is not None:
                    vals.append(v)
    return max(vals) if vals else None


def _grouped(src: Src, k: Kernel, al: Aliases) -> bool:
    """A GROUP constexpr used in the body whose written values (if any are literal) exceed 1."""
    for p in k.constexprs:
        if "GROUP" not in p.upper():
            continue
        if not any(isinstance(n, ast.Name) and n.id == p for st in k.node.body for n in ast.walk(st)):
            continue
        vals = [int_const(s.node) for s in value_sites(src, k, p, al)]
        args = k.node.args
        positional = [*args.posonlyargs, *args.args]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        vals += [
            int_const(d) for a, d in zip(positional, defaults, strict=True) if a.arg == p and d is not None
        ]
        ints = [v for v in vals if v is not None]
        if not ints or max(ints) > 1:
            return True
    return False


def _online_softmax(k: Kernel, al: Aliases) -> bool:
    for loop in loops(k.node):
        running = set()
        for n in ast.walk(loop):
            if (
                isinstance(n, ast.Call)
                and tl_func(n, al) == "maximum"
                and n.args
                and isinstance(n.args[0], ast.Name)
            ):
                running.add(n.args[0].id)
        if not running:
            continue
        for n in ast.walk(loop):
            if isinstance(n, ast.Call) and tl_func(n, al) in ("exp", "exp2") and n.args and \
                    any(isinstance(x, ast.Name) and x.id in running for x in ast.walk(n.args[0])):
                return True
    return False


def _persistent(src: Src, k: Kernel, al: Aliases) -> bool:
    for loop in loops(k.node):
        rc = range_call(loop, al)
        if rc is None or len(rc.args) < 3:
            continue
        start, step = rc.args[0], rc.args[2]
        start_pid = any(tl_func(n, al) == "program_id" for n in ast.walk(start)) or any(
            isinstance(n, ast.Name) and n.id in pid_derived(k.node, al) for n in ast.walk(start)
        )
        step_np = any(tl_func(n, al) == "num_programs" for n in ast.walk(step)) or (
            isinstance(step, ast.Name) and "SM" in step.id.upper()
        )
        if start_pid and step_np:
            return True
    return False


def _mask_elision(k: Kernel, al: Aliases) -> bool:
    cex = set(k.constexprs)
    for n in ast.walk(k.node):
        if isinstance(n, ast.If):
            test = n.test.operand if isinstance(n.test, ast.UnaryOp) else n.test
            if isinstance(test, ast.Name) and test.id in cex and n.orelse:
                loads = [c for c in ast.walk(n) if tl_func(c, al) == "load"]
                masked = [c for c in loads if kwarg(c, "mask") is not None or len(c.args) >= 2]  # type: ignore
                if loads and masked and len(masked) < len(loads):
                    return True
    return False


def dot_loops(k: Kernel, al: Aliases) -> list[ast.For | ast.While]:
    """Loops of a kernel that contain both ``tl.load`` and ``tl.dot`` (outermost first)."""
    out = []
    for loop in loops(k.node):
        names = _tl_names(loop, al)
        if "dot" in names and (
            "load" in names
            or "load_tensor_descriptor" in names
            or any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load"
                for n in ast.walk(loop)
            )
        ):
            out.append(loop)
    return out


def accumulators(k: Kernel, al: Aliases) -> list[str]:
    """Names that ``tl.dot`` results are accumulated into (``acc += tl.dot``, ``acc = tl.dot(a, b, acc)``)."""
    out: list[str] = []
    for n in ast.walk(k.node):
        if (
            isinstance(n, ast.AugAssign)
            and isinstance(n.target, ast.Name)
            and any(tl_func(c, al) == "dot" for c in ast.walk(n.value))
        ):
            out.append(n.target.id)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            for c in ast.walk(n.value):
                if tl_func(c, al) == "dot" and isinstance(c, ast.Call):
                    acc = c.args[2] if len(c.args) >= 3 else kwarg(c, "acc")
                    if isinstance(acc, ast.Name) and acc.id == n.targets[0].id:
                        out.append(acc.id)
                    elif (
                        isinstance(n.value, ast.BinOp)
                        and isinstance(n.value.op, ast.Add)
                        and n.targets[0].id in {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)}
                    ):
                        out.append(n.targets[0].id)
    return list(dict.fromkeys(out))


def epilogue_statements(k: Kernel, al: Aliases) -> list[ast.stmt]:
    """Statements after the top-level K loop that transform its accumulator before the store."""
    accs = set(accumulators(k, al))
    if not accs:
        return []
    body = k.node.body
    out: list[ast.stmt] = []
    for i, stmt in enumerate(body):
        if stmt in dot_loops(k, al):
            for later in body[i + 1 :]:
                if isinstance(later, (ast.Assign, ast.AugAssign)):
                    targets = later.targets if isinstance(later, ast.Assign) else [later.target]
                    tnames = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                    vnames = {n.id for n in ast.walk(later.value) if isinstance(n, ast.Name)}
                    if vnames & accs and not _is_plain_cast(later.value):
                        out.append(later)
                        accs |= tnames
            break
    return out


def _is_plain_cast(value: ast.expr) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "to"
        and isinstance(value.func.value, ast.Name)
    )


def _fp32(k: Kernel, al: Aliases) -> bool:
    for n in ast.walk(k.node):
        if isinstance(n, ast.Call):
            f = tl_func(n, al)
            if f in ("zeros", "full") and any(is_tl_attr(x, al, "float32") for x in ast.walk(n)):
                return True
            if (
                isinstance(n.func, ast.Attribute)
                and n.func.attr == "to"
                and n.args
                and is_tl_attr(n.args[0], al, "float32")
            ):
                return True
    return False


def _multi_row(k: Kernel, al: Aliases) -> bool:
    if "dot" in _tl_names(k.node, al):
        return False
    red_axis1 = False
    for f, c in _calls(k.node, al):
        if f in _REDUCTIONS:
            axis = kwarg(c, "axis")
            if axis is None and len(c.args) >= 2:
                axis = c.args[1]
            if int_const(axis) == 1:
                red_axis1 = True
    return red_axis1


def _row_reduction(k: Kernel, al: Aliases) -> bool:
    names = _tl_names(k.node, al)
    return bool(names & _REDUCTIONS) and "dot" not in names and "program_id" in names


def _int64(k: Kernel, al: Aliases) -> bool:
    return any(is_tl_attr(n, al, "int64") for n in ast.walk(k.node))


def _bounds_use(fn: ast.FunctionDef, al: Aliases, names: set[str]) -> bool:
    """Whether a ``range`` loop of ``fn`` has a start or stop that reads one of ``names``."""
    for loop in loops(fn):
        rc = range_call(loop, al)
        if rc is not None and any(isinstance(n, ast.Name) and n.id in names
                                  for a in rc.args[:2] for n in ast.walk(a)):
            return True
    return False


def _causal(k: Kernel, al: Aliases, helpers: dict[str, Kernel]) -> bool:
    """Two dots (in the kernel or the jit helpers it calls) and a key loop whose bounds depend on the
    program id: in the kernel itself, or in a helper called with program-id-derived bounds."""
    called = [(c, helpers[c.func.id]) for c in ast.walk(k.node)
              if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in helpers
              and c.func.id != k.name]
    dots = sum(1 for f, _ in _calls(k.node, al) if f == "dot")
    dots += sum(1 for _, h in called for f, _ in _calls(h.node, al) if f == "dot")
    if dots < 2:
        return False
    derived = pid_derived(k.node, al)
    if _bounds_use(k.node, al, derived):
        return True
    for call, helper in called:
        params = [a.arg for a in (*helper.node.args.posonlyargs, *helper.node.args.args)]
        reads = {params[i] for i, a in enumerate(call.args[:len(params)])
                 if any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(a))}
        reads |= {kw.arg for kw in call.keywords
                  if kw.arg and any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(kw.value))}
        if reads and _bounds_use(helper.node, al, reads):
            return True
    return False


def _uses_mask(k: Kernel, al: Aliases) -> bool:
    for f, c in _calls(k.node, al):
        if f == "load" and (kwarg(c, "mask") is not None or len(c.args) >= 2):
            return True
        if f == "store" and (kwarg(c, "mask") is not None or len(c.args) >= 3):
            return True
    return False


def _single_pass_row(src: Src, k: Kernel, al: Aliases) -> bool:
    if not _row_reduction(k, al) or _multi_row(k, al):
        return False
    return not any("load" in _tl_names(loop, al) for loop in loops(k.node))


def kernel_features(source: str) -> dict[str, Any]:
    """Static features of a candidate module (see ``KERNEL_FEATURES``). Raises SyntaxError when the
    source does not parse."""
    src = Src(source)
    al = aliases(src.tree)
    ks = kernels(src.tree, al)
    launched = {launch.kernel for launch in launches(src.tree, ks)}
    calls = [fc for k in ks for fc in _calls(k.node, al)]
    names = {f for f, _ in calls}
    attr_calls = {
        n.func.attr
        for k in ks
        for n in ast.walk(k.node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    all_dotted = {dotted(n.func) or "" for n in ast.walk(src.tree) if isinstance(n, ast.Call)}
    n_cfg = sum(len(autotune_configs(k.autotune, al, src.tree)) for k in ks)
    kernel_loops = [lp for k in ks for lp in loops(k.node)]
    feats: dict[str, Any] = {
        "has_dot": "dot" in names,
        "n_dots": sum(1 for f, _ in calls if f == "dot"),
        "has_k_loop": any(dot_loops(k, al) for k in ks),
        "num_stages": _meta_max(src, ks, al, "num_stages"),
        "num_warps": _meta_max(src, ks, al, "num_warps"),
        **_block_values(src, ks, al),
        "uses_autotune": any(k.autotune is not None for k in ks),
        "n_autotune_configs": n_cfg,
        "uses_heuristics": any(k.heuristics is not None for k in ks),
        "row_reduction": any(_row_reduction(k, al) for k in ks),
        "online_softmax": any(_online_softmax(k, al) for k in ks),
        "persistent": any(_persistent(src, k, al) for k in ks),
        "uses_tma": bool((names | attr_calls | {d.rpartition(".")[2] for d in all_dotted}) & _TMA),
        "grouped_order": "swizzle2d" in names or any(_grouped(src, k, al) for k in ks),
        "uses_exp2": "exp2" in names
        or any(
            (dotted(c.func) or "").endswith("math.exp2")
            for k in ks
            for c in ast.walk(k.node)
            if isinstance(c, ast.Call)
        ),
        "uses_rsqrt": "rsqrt" in names,
        "eviction_hints": any(
            kwarg(c, "eviction_policy") is not None for f, c in calls if f in ("load", "store")
        ),
        "contiguity_hints": bool(names & {"multiple_of", "max_contiguous", "max_constancy"}),
        "has_atomic": any(f.startswith("atomic_") for f in names),
        "int64_offsets": any(_int64(k, al) for k in ks),
        "causal_skip": any(_causal(k, al, {h.name: h for h in ks}) for k in ks),
        "mask_elision": any(_mask_elision(k, al) for k in ks),
        "epilogue_fusion": any(epilogue_statements(k, al) for k in ks),
        "fp32_accumulate": any(_fp32(k, al) for k in ks),
        "dot_accumulate": any(
            tl_func(c, al) == "dot" and (len(c.args) >= 3 or kwarg(c, "acc") is not None)
            for k in ks
            for c in ast.walk(k.node)
            if isinstance(c, ast.Call)
        ),
        "multi_row": any(_multi_row(k, al) for k in ks),
        "single_pass_row": any(_single_pass_row(src, k, al) for k in ks),
        "split_k": ("dot" in names and any(f.startswith("atomic_") for f in names))
        or any("SPLIT" in p.upper() for k in ks for p in k.constexprs),
        "n_kernels": len(launched) if launched else len(ks),
        "n_loops": len(kernel_loops),
        "uses_mask": any(_uses_mask(k, al) for k in ks),
        "register_cap": any(sets_register_cap(n) for n in ast.walk(src.tree) if isinstance(n, ast.Call)),
    }
    feats["elementwise"] = bool(ks) and not feats["has_dot"] and not (names & _REDUCTIONS)
    return {name: feats[name] for name in KERNEL_FEATURES}


def _family(f: dict[str, Any]) -> str:
    if f["has_dot"] and f["n_dots"] >= 2 and (f["online_softmax"] or f["causal_skip"]):
        return "an attention-style kernel (two matrix products per block with a softmax between them)"
    if f["has_dot"]:
        return "a matrix-multiplication kernel (tl.dot" + (" inside a K loop)" if f["has_k_loop"] else ")")
    if f["row_reduction"]:
        return "a row-reduction kernel (one reduction per row, e.g. softmax, normalization or cross-entropy)"
    if f["elementwise"]:
        return "an elementwise kernel"
    return "a Triton kernel"


def kernel_summary(source: str) -> str:
    """A one-paragraph English description of a candidate, built from ``kernel_features`` (for
    embedding search). Raises SyntaxError when the source does not parse."""
    f = kernel_features(source)
    parts = [
        f"Triton module with {f['n_kernels']} launched kernel{'s' if f['n_kernels'] != 1 else ''}: "
        f"{_family(f)}."
    ]
    tiles = [f"{k}={f[k]}" for k in ("block_m", "block_n", "block_k", "block_size") if f[k] is not None]
    if tiles:
        parts.append("Tile sizes " + ", ".join(tiles) + ".")
    launch = []
    if f["num_warps"] is not None:
        launch.append(f"{f['num_warps']} warps")
    if f["num_stages"] is not None:
        launch.append(f"{f['num_stages']} pipeline stages")
    if launch:
        parts.append("Launched with " + " and ".join(launch) + ".")
    if f["uses_autotune"]:
        parts.append(f"Autotuned over {f['n_autotune_configs']} configurations.")
    phrases = {
        "uses_heuristics": "uses triton.heuristics",
        "has_k_loop": "loops over K loading tiles into tl.dot",
        "online_softmax": "keeps a running max and sum (online softmax)",
        "single_pass_row": "keeps a whole row in registers in a single pass",
        "multi_row": "processes several rows per program",
        "persistent": "is persistent (programs loop over work items, grid from the SM count)",
        "uses_tma": "uses tensor descriptors or block pointers (TMA)",
        "grouped_order": "swizzles program ids in groups for L2 reuse",
        "uses_exp2": "uses exp2",
        "uses_rsqrt": "uses rsqrt",
        "eviction_hints": "sets cache eviction hints on loads",
        "contiguity_hints": "gives contiguity hints (multiple_of / max_contiguous)",
        "has_atomic": "uses atomics",
        "int64_offsets": "computes 64-bit offsets",
        "causal_skip": "skips blocks above the causal diagonal",
        "mask_elision": "elides boundary masks when shapes divide the tiles",
        "epilogue_fusion": "fuses an epilogue into the accumulator before the store",
        "fp32_accumulate": "accumulates in fp32",
        "dot_accumulate": "accumulates inside tl.dot",
        "split_k": "splits K across programs",
        "uses_mask": "masks boundary loads and stores",
        "register_cap": "caps the registers per thread (maxnreg)",
    }
    present = [text for key, text in phrases.items() if f[key]]
    if present:
        parts.append(
            "It " + ", ".join(present[:-1]) + (" and " if len(present) > 1 else "") + present[-1] + "."
        )
    absent = [
        text
        for key, text in phrases.items()
        if not f[key] and key in ("uses_autotune", "persistent", "grouped_order", "uses_tma", "mask_elision")
    ]
    if absent:
        parts.append("It does not: " + "; ".join(absent) + ".")
    return " ".join(parts)


__all__ = ["KERNEL_FEATURES", "kernel_features", "kernel_summary", "pid_derived"]
