"""The static gate: what a candidate module may contain, decided from its syntax tree alone.

DESIGN.md ("Contracts", "Validator"): a candidate imports only ``torch``, ``triton``,
``triton.language`` and ``math``, defines ``run(*inputs)`` which launches at least one
``@triton.jit`` kernel, does no tensor arithmetic in host code (the work must be the kernel's), has no
``try``/``except`` fallback, and no dunder, reflection, stream, thread or timer tricks.

Host code may only *allocate* tensors and read their metadata: ``torch.empty*``, ``zeros*``, ``full*``,
``ones*``, ``arange``, views/reshapes/contiguous, ``.shape``/``.stride()``/``.numel()``/``.dtype``/
``.device``, device properties. Anything else under ``torch.`` is refused (a whitelist); known compute
methods (``.sum()``, ``.exp()``, ``.matmul()``, ...) and the ``@`` operator are refused by name. This is the
first line only: the worker also audits every ATen op the candidate's host code runs
(``harness.CandidateAudit``), so arithmetic hidden behind ``+``/``*`` is still caught, at integrity.

Standard library only: the service parent runs this without importing torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from klineage.schema import pyast

ALLOWED_MODULES: frozenset[str] = frozenset({"torch", "triton", "triton.language", "math"})
"""Modules a candidate may import (plus ``triton.language.*`` submodules such as ``extra.libdevice``)."""

# torch.<path> the host code may name: allocation, dtypes, device and properties. Everything else is refused.
TORCH_ALLOWED: frozenset[str] = frozenset({
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like",
    "torch.ones", "torch.ones_like", "torch.full", "torch.full_like", "torch.arange",
    "torch.device", "torch.dtype", "torch.Size", "torch.Tensor", "torch.finfo", "torch.iinfo",
    "torch.float16", "torch.half", "torch.bfloat16", "torch.float32", "torch.float", "torch.float64",
    "torch.double", "torch.int8", "torch.uint8", "torch.int16", "torch.int32", "torch.int", "torch.int64",
    "torch.long", "torch.bool", "torch.float8_e4m3fn", "torch.float8_e5m2",
    "torch.cuda", "torch.cuda.is_available", "torch.cuda.current_device", "torch.cuda.device",
    "torch.cuda.get_device_properties", "torch.cuda.get_device_capability", "torch.cuda.device_count",
    "torch.cuda.get_device_name", "torch.get_default_dtype",
})
# Paths whose attributes are plain values (dtypes, finfo, ...): ``torch.float16.itemsize`` is fine.
TORCH_VALUE_PREFIXES: frozenset[str] = frozenset({
    "torch.float16", "torch.half", "torch.bfloat16", "torch.float32", "torch.float", "torch.float64",
    "torch.double", "torch.int8", "torch.uint8", "torch.int16", "torch.int32", "torch.int", "torch.int64",
    "torch.long", "torch.bool", "torch.Tensor", "torch.Size", "torch.device", "torch.dtype",
})
TORCH_STREAMY: frozenset[str] = frozenset({
    "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.Event", "torch.cuda.graph", "torch.cuda.CUDAGraph",
    "torch.cuda.set_stream", "torch.cuda.current_stream", "torch.cuda.default_stream",
    "torch.cuda.synchronize", "torch.cuda.graphs", "torch.cuda.streams", "torch.cuda.ExternalStream",
    "torch.multiprocessing", "torch.cuda.set_device", "torch.cuda.nvtx", "torch.profiler", "torch.cuda.Graph",
})
TRITON_ALLOWED: frozenset[str] = frozenset({
    "triton.jit", "triton.autotune", "triton.heuristics", "triton.Config", "triton.cdiv",
    "triton.next_power_of_2", "triton.set_allocator", "triton.language",
})
# Tensor methods that compute (refused in host code). Views, metadata and allocation methods are fine.
COMPUTE_METHODS: frozenset[str] = frozenset({
    "sum", "mean", "prod", "exp", "exp2", "log", "log2", "log1p", "expm1", "softmax", "log_softmax",
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "einsum", "dot", "vdot", "outer",
    "max", "min", "amax", "amin", "argmax", "argmin", "cumsum", "cumprod", "logsumexp", "logcumsumexp",
    "norm", "var", "std", "var_mean", "std_mean", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu",
    "silu", "erf", "sin", "cos", "abs", "neg", "reciprocal", "pow", "square", "clamp", "clip",
    "where", "masked_fill", "masked_fill_", "index_select", "gather", "scatter", "scatter_add",
    "scatter_reduce", "index_add", "index_add_", "topk", "kthvalue", "median", "mode", "lerp",
    "add_", "sub_", "mul_", "div_", "exp_", "copy_", "addcmul", "addcdiv", "layer_norm", "rms_norm",
    "cross_entropy", "nll_loss", "scaled_dot_product_attention", "linear", "conv1d", "conv2d",
    "sub", "mul", "div", "true_divide", "floor_divide", "fmod", "remainder", "tril", "triu",
    "cumulative_trapezoid", "trapz", "diff", "flip", "roll", "nan_to_num", "softplus", "mish",
    "sort", "argsort", "unique", "allclose", "isclose", "equal", "all", "any", "count_nonzero",
    "maximum", "minimum", "fmax", "fmin", "sign", "floor", "ceil", "round", "trunc", "frac",
    "tensordot", "kron", "cross", "cdist", "histc", "bincount", "logaddexp", "hypot", "atan2",
})
FORBIDDEN_BUILTINS: frozenset[str] = frozenset({
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals", "vars",
    "breakpoint", "input", "help", "exit", "quit", "memoryview", "dir", "type", "object", "super",
    "classmethod", "staticmethod", "property", "__import__", "__builtins__", "__loader__", "__spec__",
})
# Builtins the candidate's module sees at run time (the worker's second line behind this gate).
SAFE_BUILTINS: tuple[str, ...] = (
    "abs", "all", "any", "bool", "callable", "dict", "divmod", "enumerate", "filter", "float", "frozenset",
    "hasattr", "hash", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum",
    "tuple", "zip", "None", "True", "False", "NotImplemented", "Ellipsis", "ArithmeticError",
    "AssertionError", "Exception", "IndexError", "KeyError", "NotImplementedError", "RuntimeError",
    "TypeError", "ValueError", "ZeroDivisionError", "OverflowError", "StopIteration",
)


# -- the whitelist --------------------------------------------------------------------------------------
# triton.language names a kernel may use: the public functions, types and dtypes of ``triton.language``
# (Triton 3.6 ``__all__``) minus its module-valued entries (``extra``, ``math``, ``target_info``) and
# ``core`` (whose attributes reach ``builtins``); ``tl.math.<fn>`` and ``libdevice.<fn>`` are separate.
TL_ALLOWED: frozenset[str] = frozenset({
    "PropagateNan", "TRITON_MAX_TENSOR_NUMEL", "abs", "add", "advance", "arange", "argmax", "argmin",
    "associative_scan", "assume", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
    "atomic_or", "atomic_xchg", "atomic_xor", "bfloat16", "bitonic_merge", "block_type", "broadcast",
    "broadcast_to", "cast", "cat", "cdiv", "ceil", "clamp", "condition", "const", "constexpr", "constexpr_type",
    "cos", "cumprod", "cumsum", "debug_barrier", "device_assert", "device_print", "div_rn", "dot", "dot_scaled",
    "dtype", "erf", "exp", "exp2", "expand_dims", "fdiv", "flip", "float16", "float32", "float64", "float8e4b15",
    "float8e4b8", "float8e4nv", "float8e5", "float8e5b16", "floor", "fma", "full", "gather", "histogram",
    "int1", "int16", "int32", "int64", "int8", "interleave", "join", "load", "load_tensor_descriptor", "log",
    "log2", "make_block_ptr", "make_tensor_descriptor", "map_elementwise", "max", "max_constancy",
    "max_contiguous", "maximum", "min", "minimum", "mul", "multiple_of", "num_programs", "pair_uniform_to_normal",
    "permute", "philox", "philox_impl", "pi32_t", "pointer_type", "program_id", "rand", "rand4x", "randint",
    "randint4x", "randn", "randn4x", "range", "ravel", "reduce", "reduce_or", "reshape", "rsqrt", "sigmoid",
    "sin", "slice", "softmax", "sort", "split", "sqrt", "sqrt_rn", "static_assert", "static_print",
    "static_range", "store", "store_tensor_descriptor", "sub", "sum", "swizzle2d", "tensor", "tensor_descriptor",
    "topk", "trans", "tuple", "uint16", "uint32", "uint64", "uint8", "uint_to_uniform_float", "umulhi", "view",
    "void", "where", "xor_sum", "zeros", "zeros_like",
})
TL_MATH_ALLOWED: frozenset[str] = frozenset({
    "abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "rsqrt", "sin",
    "sqrt", "sqrt_rn", "umulhi",
})
MATH_ALLOWED: frozenset[str] = frozenset({
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "comb", "copysign", "cos", "cosh",
    "degrees", "dist", "e", "erf", "erfc", "exp", "exp2", "expm1", "fabs", "factorial", "floor", "fmod", "frexp",
    "fsum", "gamma", "gcd", "hypot", "inf", "isclose", "isfinite", "isinf", "isnan", "isqrt", "lcm", "ldexp",
    "lgamma", "log", "log10", "log1p", "log2", "modf", "nan", "nextafter", "perm", "pi", "pow", "prod", "radians",
    "remainder", "sin", "sinh", "sqrt", "tan", "tanh", "tau", "trunc", "ulp",
})
LIBDEVICE = "triton.language.extra.libdevice"
"""``from triton.language.extra import libdevice``: a module of device functions only (no module-valued
attribute in Triton 3.6); any public lowercase name under it is a function."""
MODULE_PATHS: frozenset[str] = frozenset({
    "torch", "triton", "triton.language", "math", "triton.language.math", "triton.language.extra", LIBDEVICE,
    "torch.cuda",
})
"""Modules a candidate can name. A module may only be used as ``module.<name>``: never bound to another
name, passed, returned or stored (``T = torch`` is refused), so every use is a checked attribute chain."""
# Attributes host code may read on values (tensors, dtypes, devices, device properties, finfo, autotuner
# configs, dicts, lists, strings): metadata, views, allocation, conversions. Nothing else.
HOST_ATTRS: frozenset[str] = frozenset({
    "shape", "stride", "dtype", "device", "contiguous", "is_contiguous", "view", "view_as", "reshape", "numel",
    "dim", "ndim", "size", "element_size", "itemsize", "is_floating_point", "is_complex", "is_signed", "is_cuda",
    "type", "index", "to", "float", "half", "bfloat16", "double", "int", "long", "bool", "t", "T", "mT",
    "transpose", "permute", "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "narrow",
    "select", "split", "chunk", "unbind", "as_strided", "new_empty", "new_zeros", "new_ones", "new_full", "zero_",
    "fill_", "detach", "clone", "data_ptr", "storage_offset", "get_device", "requires_grad",
    "multi_processor_count", "name", "major", "minor", "total_memory", "warp_size", "L2_cache_size",
    "regs_per_multiprocessor", "max_threads_per_multi_processor", "shared_memory_per_block_optin",
    "max", "min", "eps", "tiny", "bits", "resolution", "smallest_normal",
    "fn", "configs", "kwargs", "all_kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg",
    "get", "items", "keys", "values", "setdefault", "pop", "append", "extend", "update", "clear", "insert",
    "count", "startswith", "endswith", "lower", "upper", "strip", "join",
    "element_ty", "primitive_bitwidth", "value",
})
# Attributes kernel code may read on values: the methods of ``tl.tensor``, tensor descriptors and dtypes.
KERNEL_ATTRS: frozenset[str] = frozenset({
    "T", "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas",
    "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "broadcast_to", "cast", "cdiv", "ceil",
    "cos", "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather", "histogram",
    "item", "log", "log2", "logical_and", "logical_or", "max", "min", "permute", "ravel", "reduce", "reduce_or",
    "reshape", "rsqrt", "sigmoid", "sin", "softmax", "sort", "split", "sqrt", "sqrt_rn", "store", "sum", "to",
    "trans", "view", "xor_sum", "load", "scatter", "block_shape", "strides", "shape", "dtype", "numel", "type",
    "value", "element_ty", "primitive_bitwidth", "int_bitwidth", "fp_mantissa_width", "scalar", "name",
    "is_bf16", "is_block", "is_bool", "is_floating", "is_fp16", "is_fp32", "is_fp64", "is_fp8", "is_int",
    "is_int1", "is_int16", "is_int32", "is_int64", "is_int8", "is_int_signed", "is_int_unsigned", "is_ptr",
    "is_standard_floating", "is_uint16", "is_uint32", "is_uint64", "is_uint8", "get_int_max_value",
    "get_int_min_value", "with_element_ty",
})
REFUSED_ATTRS: frozenset[str] = frozenset({
    "from_file", "untyped_storage", "storage", "_typed_storage", "share_memory_", "is_shared", "from_buffer",
    "frombuffer", "numpy", "tolist", "tofile", "ctypes", "mmap", "handle", "format", "format_map", "load_library",
    "save", "load", "globals", "modules", "system", "popen",
})
"""Never allowed in host code whatever the object (file-backed or shared storage, host copies, I/O)."""


#: ``tl`` atomics whose result can depend on the order programs run in.
ORDER_DEPENDENT_ATOMICS = frozenset({"atomic_add", "atomic_xchg", "atomic_cas"})


@dataclass
class StaticReport:
    """What the static gate found: ``ok``, the first ``reason`` when not, and facts about the source."""

    ok: bool
    reason: str = ""
    kernels: list[str] = field(default_factory=list)
    uses_dot: bool = False
    #: the ``tl.atomic_*`` operations kernels call whose result depends on the order programs run in (a float
    #: ``atomic_add`` sums in a different order each run; ``atomic_xchg`` keeps whichever program came last)
    ordered_atomics: list[str] = field(default_factory=list)
    launches: int = 0
    lines: int = 0
    #: the kernels host code names (launched, or bound to a name that is): every kernel but the @jit helpers
    #: that only kernels call, i.e. those a correct run may be expected to launch
    host_kernels: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """Metrics for the gate outcome document."""
        return {"kernels": list(self.kernels), "uses_dot": self.uses_dot, "launch_sites": self.launches,
                "lines": self.lines, "host_kernels": list(self.host_kernels),
                **({"ordered_atomics": list(self.ordered_atomics)} if self.ordered_atomics else {})}


class StaticViolation(Exception):
    """A rule the candidate breaks: the message is the gate's one-line reason."""

    def __init__(self, node: ast.AST | None, message: str) -> None:
        line = getattr(node, "lineno", None)
        super().__init__(f"{message} (line {line})" if line else message)


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the module binds anywhere (assignments, defs, parameters, loop and comprehension
    targets, imports, ``with ... as``): a name loaded that is none of these must be an allowed builtin."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
    return names


def _is_dunder(name: str) -> bool:
    return name.startswith("__")


def _import_allowed(module: str) -> bool:
    return module in ALLOWED_MODULES or module in MODULE_PATHS


class _Checker:
    """Walks the tree once; raises StaticViolation at the first broken rule."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases: dict[str, str] = {}  # local name -> canonical dotted path (module or member)
        self.kernels: dict[str, ast.FunctionDef] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.uses_dot = False
        self.ordered_atomics: set[str] = set()
        self.bound = _bound_names(tree)

    def _note_kernel_use(self, name: str) -> None:
        """Record the facts of the report that a name a kernel uses (``tl.X`` or a method) gives."""
        if name in ("dot", "dot_scaled"):
            self.uses_dot = True
        if name in ORDER_DEPENDENT_ATOMICS:
            self.ordered_atomics.add(name)

    # -- imports -----------------------------------------------------------------------------------
    def _imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if not _import_allowed(alias.name):
                        raise StaticViolation(node, f"forbidden import '{alias.name}': a candidate may import "
                                              "only torch, triton, triton.language and math")
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    raise StaticViolation(node, "relative imports are not allowed in a candidate")
                if module == "__future__":
                    continue
                if not _import_allowed(module):
                    raise StaticViolation(node, f"forbidden import 'from {module} import ...': a candidate may "
                                          "import only torch, triton, triton.language and math")
                for alias in node.names:
                    if alias.name == "*":
                        raise StaticViolation(node, f"'from {module} import *' is not allowed")
                    path = f"{module}.{alias.name}"
                    if path not in MODULE_PATHS:
                        self._check_path(node, path.split("."), host=True)
                    self.aliases[alias.asname or alias.name] = path

    # -- module paths ------------------------------------------------------------------------------
    def _canonical(self, parts: list[str]) -> list[str] | None:
        root = self.aliases.get(parts[0])
        if root is None:
            return None
        return root.split(".") + parts[1:]

    def _check_path(self, node: ast.AST, path: list[str], host: bool) -> None:
        """A chain rooted at a module: allowed only when the whitelist names it (see the tables above)."""
        dotted = ".".join(path)
        if any(_is_dunder(p) for p in path):
            raise StaticViolation(node, f"dunder access '{dotted}' is not allowed")
        if any(p.startswith("_") for p in path[1:]):
            kind = "private torch attribute" if path[0] == "torch" else "private attribute"
            raise StaticViolation(node, f"{kind} '{dotted}' is not allowed")
        if path[:2] == ["triton", "language"]:
            rest = path[2:]
            if not rest:
                return
            if rest[0] in TL_ALLOWED and all(p in KERNEL_ATTRS for p in rest[1:]):
                return
            if rest[0] == "math" and (len(rest) == 1 or (len(rest) == 2 and rest[1] in TL_MATH_ALLOWED)):
                return
            if ".".join(path[:4]) == LIBDEVICE and (len(path) == 4 or (len(path) == 5 and path[4].islower()
                                                                       and path[4] != "core")):
                return
            if rest == ["extra"]:
                return
            raise StaticViolation(node, f"'{dotted}' is not allowed: only triton.language functions, types and "
                                  "dtypes (tl.<name>, tl.math.<fn>, libdevice.<fn>), no module-valued attribute")
        if path[0] == "math":
            if len(path) == 1 or (len(path) == 2 and path[1] in MATH_ALLOWED):
                return
            raise StaticViolation(node, f"'{dotted}' is not allowed: only math functions and constants")
        if path[0] == "triton":
            if dotted in TRITON_ALLOWED or dotted == "triton":
                return
            raise StaticViolation(node, f"'{dotted}' is not allowed: a candidate may use only triton.jit, "
                                  "autotune, heuristics, Config, cdiv, next_power_of_2, set_allocator and "
                                  "triton.language")
        if path[0] == "torch":
            if dotted in TORCH_ALLOWED or dotted == "torch":
                return
            for i in range(len(path) - 1, 1, -1):
                prefix = ".".join(path[:i])
                if prefix in TORCH_VALUE_PREFIXES:
                    rest = path[i:]
                    if any(p in COMPUTE_METHODS for p in rest):
                        raise StaticViolation(node, f"torch compute op '{dotted}' in host code: the work "
                                              "must be done by a Triton kernel")
                    if all(p in HOST_ATTRS and p not in REFUSED_ATTRS for p in rest):
                        return
                    raise StaticViolation(node, f"'{dotted}' is not allowed: only dtype and tensor metadata")
            if any(dotted == s or dotted.startswith(s + ".") for s in TORCH_STREAMY):
                raise StaticViolation(node, f"'{dotted}': streams, events, graphs and synchronization tricks "
                                      "are not allowed in a candidate")
            kind = "torch compute op" if (path[-1] in COMPUTE_METHODS or "nn" in path or "linalg" in path
                                          or "fft" in path or "special" in path) else "torch call"
            raise StaticViolation(node, f"{kind} '{dotted}' is not allowed in host code: only allocation "
                                  "(empty/zeros/full/...), dtypes and device properties; the work must be "
                                  "done by a Triton kernel")
        raise StaticViolation(node, f"'{dotted}' is not allowed")

    def _check_value_attr(self, node: ast.Attribute, in_kernel: bool) -> None:
        """An attribute read on a value (not a module chain): whitelisted per context."""
        name = node.attr
        if name.startswith("_"):
            raise StaticViolation(node, f"private attribute '.{name}' is not allowed")
        if in_kernel:
            if name not in KERNEL_ATTRS:
                raise StaticViolation(node, f"attribute '.{name}' is not allowed in kernel code: only the "
                                      "methods of tl.tensor, tensor descriptors and dtypes")
            return
        if name in REFUSED_ATTRS or name not in HOST_ATTRS:
            raise StaticViolation(node, f"attribute '.{name}' is not allowed in host code: only tensor "
                                  "metadata, views, allocation and conversions (storage, file and host-copy "
                                  "APIs are refused)")

    # -- the walk ----------------------------------------------------------------------------------
    def _is_jit(self, fn: ast.FunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            parts = _dotted(target)
            if parts is None:
                continue
            canon = self._canonical(parts)
            if canon and ".".join(canon) == "triton.jit":
                return True
        return False

    def _visit(self, node: ast.AST, in_kernel: bool) -> None:
        if isinstance(node, ast.Try | ast.TryStar):
            raise StaticViolation(node, "try/except is not allowed: a fallback could hide a failed kernel")
        if isinstance(node, ast.ClassDef):
            raise StaticViolation(node, "class definitions are not allowed in a candidate")
        if isinstance(node, ast.AsyncFunctionDef | ast.Await | ast.Yield | ast.YieldFrom):
            raise StaticViolation(node, "async code and generators are not allowed in a candidate")
        if isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                if name in self.aliases:
                    raise StaticViolation(node, f"rebinding the module name '{name}' is not allowed")
        if isinstance(node, ast.Name):
            if _is_dunder(node.id):
                raise StaticViolation(node, f"dunder name '{node.id}' is not allowed")
            if node.id in FORBIDDEN_BUILTINS:
                raise StaticViolation(node, f"'{node.id}' is not allowed (reflection, I/O and dynamic code "
                                      "escape the sandbox)")
            if isinstance(node.ctx, ast.Store | ast.Del) and node.id in self.aliases:
                raise StaticViolation(node, f"rebinding the module name '{node.id}' is not allowed")
        if isinstance(node, ast.arg) and node.arg in self.aliases:
            raise StaticViolation(node, f"a parameter may not shadow the module name '{node.arg}'")
        if isinstance(node, ast.Attribute):
            if _is_dunder(node.attr):
                raise StaticViolation(node, f"dunder attribute '.{node.attr}' is not allowed")
            if isinstance(node.ctx, ast.Store | ast.Del) and not in_kernel:
                raise StaticViolation(node, f"attribute assignment '.{node.attr} = ...' is not allowed in "
                                      "host code")
            parts = _dotted(node)
            if parts is not None:
                canon = self._canonical(parts)
                if canon is not None:
                    self._check_path(node, canon, host=not in_kernel)
                    if in_kernel:
                        self._note_kernel_use(canon[-1])
                    return  # the whole chain is checked; don't re-check its inner parts
            self._visit(node.value, in_kernel)  # what the attribute is read on is checked first
            self._check_value_attr(node, in_kernel)
            if in_kernel:  # a method on a kernel value: ptr.atomic_add(...), a.dot(b)
                self._note_kernel_use(node.attr)
            return
        if isinstance(node, ast.Call):
            parts = _dotted(node.func)
            canon = self._canonical(parts) if parts is not None else None
            if canon is not None and ".".join(canon) in ("torch.Tensor", "torch.dtype"):
                raise StaticViolation(node, f"calling '{'.'.join(canon)}(...)' is not allowed: allocate with "
                                      "torch.empty/zeros/full")
        if isinstance(node, ast.Call) and not in_kernel and isinstance(node.func, ast.Attribute):
            parts = _dotted(node.func)
            is_module_chain = parts is not None and self._canonical(parts) is not None
            if not is_module_chain and node.func.attr in COMPUTE_METHODS:
                raise StaticViolation(node, f"tensor compute method '.{node.func.attr}()' in host code: the "
                                      "work must be done by a Triton kernel")
        if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult) and not in_kernel:
            raise StaticViolation(node, "the matrix-multiply operator '@' in host code: the work must be done "
                                  "by a Triton kernel")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            alias = self.aliases.get(node.id)
            if alias is not None and alias in MODULE_PATHS:
                # Reached only when the name is not the root of an attribute chain (chains return above).
                raise StaticViolation(node, f"module aliasing: the module '{node.id}' may only be used as "
                                      f"{node.id}.<name>, never bound, passed or stored")
            if alias is not None:
                self._check_path(node, alias.split("."), host=not in_kernel)
            elif node.id not in self.bound and node.id not in SAFE_BUILTINS:
                raise StaticViolation(node, f"name '{node.id}' is not defined in the candidate and not an "
                                      "allowed builtin")
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                self._visit(dec, in_kernel)
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    self._visit(default, in_kernel)
            kernel = in_kernel or self._is_jit(node)
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                        *([node.args.vararg] if node.args.vararg else []),
                        *([node.args.kwarg] if node.args.kwarg else [])]:
                self._visit(arg, kernel)
            for stmt in node.body:
                self._visit(stmt, kernel)
            return
        for child in ast.iter_child_nodes(node):
            self._visit(child, in_kernel)

    # -- run and its launches ----------------------------------------------------------------------
    def _reachable(self, start: str) -> list[ast.FunctionDef]:
        seen: dict[str, ast.FunctionDef] = {}
        todo = [start]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.functions or name in self.kernels:
                continue
            seen[name] = self.functions[name]
            for node in ast.walk(seen[name]):
                if isinstance(node, ast.Name) and node.id in self.functions:
                    todo.append(node.id)
        return list(seen.values())

    def check(self) -> StaticReport:
        self._imports()
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
                if self._is_jit(node):
                    self.kernels[node.name] = node
        self._visit(self.tree, in_kernel=False)
        if not self.kernels:
            raise StaticViolation(None, "no @triton.jit kernel is defined")
        run = self.functions.get("run")
        rebinds = [n for n in self.tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
                   and any(isinstance(t, ast.Name) and t.id == "run"
                           for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
        if run is None or rebinds:
            raise StaticViolation(None, "the candidate must define run(*inputs) with a module-level 'def run'")
        if "run" in self.kernels:
            raise StaticViolation(run, "run must be host code that launches kernels, not a @triton.jit kernel")
        # Names that stand for kernels: the jit functions, and module-level names built from them.
        kernelish = set(self.kernels)
        changed = True
        while changed:
            changed = False
            for node in self.tree.body:
                if isinstance(node, ast.Assign):
                    refs = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                    if refs & kernelish:
                        for target in node.targets:
                            for t in ast.walk(target):
                                if isinstance(t, ast.Name) and t.id not in kernelish:
                                    kernelish.add(t.id)
                                    changed = True
        reachable = self._reachable("run")
        launches = 0
        referenced: set[str] = set()
        for fn in reachable:
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Subscript):
                    launches += 1
                if isinstance(sub, ast.Name) and sub.id in kernelish:
                    referenced.add(sub.id)
        if launches == 0 or not referenced:
            raise StaticViolation(run, "run never launches a Triton kernel (no kernel[grid](...) reachable "
                                  "from run that names a @triton.jit kernel)")
        in_host = {n.id for node in self.tree.body
                   if not (isinstance(node, ast.FunctionDef) and node.name in self.kernels)
                   for n in ast.walk(node) if isinstance(n, ast.Name)}
        return StaticReport(ok=True, kernels=sorted(self.kernels), uses_dot=self.uses_dot, launches=launches,
                            host_kernels=sorted(set(self.kernels) & in_host),
                            ordered_atomics=sorted(self.ordered_atomics))


def check_source(source: str) -> StaticReport:
    """Run the static gate on candidate ``source``; never raises, the verdict is in the report."""
    lines = source.count("\n") + 1
    try:
        tree = pyast.parse(source, filename="candidate.py")
    except SyntaxError as exc:
        text = (exc.text or "").strip()
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        snippet = f": {text[:80]!r}" if text else ""
        return StaticReport(ok=False, reason=f"syntax error at {where}: {exc.msg}{snippet}", lines=lines)
    except (ValueError, RecursionError) as exc:  # null bytes, absurd nesting
        return StaticReport(ok=False, reason=f"source does not parse: {exc}", lines=lines)
    checker = _Checker(tree)
    try:
        report = checker.check()
    except StaticViolation as exc:
        return StaticReport(ok=False, reason=str(exc), kernels=sorted(checker.kernels),
                            uses_dot=checker.uses_dot, lines=lines)
    except RecursionError:
        return StaticReport(ok=False, reason="source is nested too deeply to check", lines=lines)
    report.lines = lines
    return report
