"""Static features of a Triton candidate module, computed from the source with ``ast``.

The features are the *kernel* features of the condition language (DESIGN.md, "Conditions"):
booleans for patterns (``has_dot``, ``persistent``, ...), ints for tunables (``num_stages``,
``block_m``, ...; ``None`` when the source does not fix them). They are heuristics over structure,
meant for anchoring skills and for retrieval, never for correctness.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any

from klineage.schema.kernel_features import KERNEL_FEATURES
from klineage.transforms._module import Module
from klineage.transforms._source import Src, int_const
from klineage.transforms._triton import (
    REDUCTIONS,
    Aliases,
    Kernel,
    aliases,
    autotune_configs,
    is_row_reduction,
    kernels,
    kwarg,
    launches,
    loops,
    range_call,
    tl_func,
    tl_names,
    value_sites,
)

# ``kernel_features`` returns every name of ``KERNEL_FEATURES`` (declared once, in ``schema.kernel_features``),
# in that order. Two kinds:
#
#   - Features that name an optimization (``uses_autotune``, ``persistent``, ``mask_elision``, ``multi_row``,
#     ``single_pass_row``, ``online_softmax``, ... : every ``Operator.feature``) are not recognised here: each
#     is true exactly when one of its operators' ``detect`` finds the optimization present (``_optimizations``),
#     so a skill's contract, search's anchors and the walker see one recogniser.
#   - Structural facts no operator adds or removes, recognised below (booleans unless noted):
#     ``has_dot`` (a ``tl.dot`` in a kernel), ``n_dots`` (int); ``has_k_loop`` (a loop holding loads and
#     ``tl.dot``); ``num_stages`` / ``num_warps`` (int | None: the largest literal set at launch, in autotune
#     configs or, for stages, on ``tl.range``; None when the source leaves the Triton default);
#     ``block_m`` / ``block_n`` / ``block_k`` / ``block_size`` (int | None: the largest literal value of the
#     tile constexprs named ``*_M``/``*_N``/``*_K``, ``block_size`` for the others); ``n_autotune_configs``
#     (int); ``uses_heuristics``; ``row_reduction`` (``tl.sum``/``tl.max``/... in a kernel without ``tl.dot``);
#     ``has_atomic``; ``n_kernels`` (int: launched ``@triton.jit`` kernels); ``n_loops`` (int: loops in
#     kernels); ``uses_mask`` (a masked load or store); ``elementwise`` (no dot and no reduction).

def _calls(node: ast.AST, al: Aliases) -> list[tuple[str, ast.Call]]:
    return [(f, n) for n in ast.walk(node) if isinstance(n, ast.Call) and (f := tl_func(n, al))]


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


def dot_loops(k: Kernel, al: Aliases) -> list[ast.For | ast.While]:
    """Loops of a kernel that contain both ``tl.load`` and ``tl.dot`` (outermost first)."""
    out = []
    for loop in loops(k.node):
        names = tl_names(loop, al)
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


def _uses_mask(k: Kernel, al: Aliases) -> bool:
    for f, c in _calls(k.node, al):
        if f == "load" and (kwarg(c, "mask") is not None or len(c.args) >= 2):
            return True
        if f == "store" and (kwarg(c, "mask") is not None or len(c.args) >= 3):
            return True
    return False


def _optimizations(m: Module) -> dict[str, bool | None]:
    """Each feature that names an optimization, from its operators' ``detect`` (``Operator.feature``):
    true when one finds it present, None when the analysis of one failed and none found it (unknown,
    not guessed), false otherwise. One recogniser per optimization: the features cannot disagree with
    the operators that add and remove them."""
    from klineage.transforms.registry import all_operators

    out: dict[str, bool | None] = {}
    for op in all_operators():
        if op.feature is None or out.get(op.feature):
            continue
        try:
            present: bool | None = op.present_in(m)
        except Exception:  # an operator bug must not break the analysis of the kernel
            present = None
        prior = out.get(op.feature, False)
        out[op.feature] = True if present else None if present is None or prior is None else False
    return out


def kernel_features(source: str) -> dict[str, Any]:
    """Static features of a candidate module (see ``KERNEL_FEATURES``), a new dict on every call.
    Raises SyntaxError when the source does not parse."""
    return dict(_features(source))


@lru_cache(maxsize=512)  # search, the planner and the walker ask again for the same sources
def _features(source: str) -> dict[str, Any]:
    src = Src(source)
    al = aliases(src.tree)
    ks = kernels(src.tree, al)
    kernel_launches = launches(src.tree, ks)
    launched = {launch.kernel for launch in kernel_launches}
    calls = [fc for k in ks for fc in _calls(k.node, al)]
    names = {f for f, _ in calls}
    n_cfg = sum(len(autotune_configs(k.autotune, al, src.tree)) for k in ks)
    kernel_loops = [lp for k in ks for lp in loops(k.node)]
    feats: dict[str, Any] = {
        "has_dot": "dot" in names,
        "n_dots": sum(1 for f, _ in calls if f == "dot"),
        "has_k_loop": any(dot_loops(k, al) for k in ks),
        "num_stages": _meta_max(src, ks, al, "num_stages"),
        "num_warps": _meta_max(src, ks, al, "num_warps"),
        **_block_values(src, ks, al),
        "n_autotune_configs": n_cfg,
        "uses_heuristics": any(k.heuristics is not None for k in ks),
        "row_reduction": any(is_row_reduction(k, al) for k in ks),
        "has_atomic": any(f.startswith("atomic_") for f in names),
        "n_kernels": len(launched) if launched else len(ks),
        "n_loops": len(kernel_loops),
        "uses_mask": any(_uses_mask(k, al) for k in ks),
    }
    feats["elementwise"] = bool(ks) and not feats["has_dot"] and not (names & REDUCTIONS)
    feats.update(_optimizations(Module(src, al, ks, kernel_launches)))
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


def changed_kernels(before: str, after: str) -> tuple[str, ...]:
    """The ``@triton.jit`` kernels of ``after`` that ``before`` lacks or writes differently (decorators
    included: a new autotune config list changes its kernel), by name in source order; every kernel of
    ``after`` when either source does not parse."""
    from klineage.transforms._module import parse

    new, old = parse(after), parse(before)
    if new is None:
        return ()
    if old is None:
        return tuple(k.name for k in new.kernels)
    was = {k.name: ast.dump(k.node) for k in old.kernels}
    return tuple(k.name for k in new.kernels if was.get(k.name) != ast.dump(k.node))


__all__ = ["KERNEL_FEATURES", "changed_kernels", "kernel_features", "kernel_summary", "pid_derived"]
