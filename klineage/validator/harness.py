"""Inside the sandboxed worker: load a candidate, watch its launches and audit its host code.

Imported only in the worker subprocess (it imports torch and triton). Three mechanisms:

* ``load_candidate`` executes the candidate with *restricted builtins* (no ``open``, ``eval``, ``getattr``,
  ...; ``import`` limited to torch/triton/math): the static gate's rules, enforced a second time.
* ``LaunchWatch`` wraps Triton's launch entry points at class level (``triton_launch``: ``JITFunction.run``,
  ``InterpretedFunction.run``, ``Autotuner.run``): it counts real launches and marks the time spent
  inside Triton's own machinery, so that the audit below ignores what Triton itself allocates or copies;
  with ``pin`` set, every autotuned launch runs that config (index modulo its pruned configs) on its own.
* ``CandidateAudit`` is a ``TorchDispatchMode`` active while the candidate's ``run`` executes: every
  tensor that the host code allocates with ``empty``/``empty_like``/``new_empty``/``empty_strided`` is
  filled with NaN (integers with their dtype's maximum, booleans with True) so never-written output is
  caught, and every ATen op other than allocation, views and copies is recorded as a violation
  (arithmetic hidden behind ``+``/``*`` does not escape).
"""

from __future__ import annotations

import builtins
import importlib.util
import sys
import threading
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.errors import OutOfResources

from klineage.validator.static import SAFE_BUILTINS
from klineage.validator.triton_launch import LaunchPatch, is_jit_launcher

POISON_OPS = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"})
ALLOWED_HOST_OPS = POISON_OPS | frozenset({
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "zero_", "arange", "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose",
    "permute", "expand", "unsqueeze", "squeeze", "slice", "select", "as_strided", "alias", "detach",
    "clone", "contiguous", "_to_copy", "copy_", "lift_fresh", "unbind", "split", "split_with_sizes",
    "chunk", "narrow", "flatten", "unflatten", "view_as", "expand_as", "diagonal", "_local_scalar_dense",
    "lift_fresh_copy", "is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "_has_compatible_shallow_copy_type", "set_", "resolve_conj", "resolve_neg",
})


def poison_value(dtype: torch.dtype) -> float | int | bool:
    """The fill value for never-written memory of ``dtype``: NaN, the integer maximum, or True."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


class _State(threading.local):
    depth: int = 0


class LaunchWatch:
    """Counts Triton launches and tracks when execution is inside Triton's launch machinery."""

    def __init__(self) -> None:
        self.launches = 0
        self.kernels: Counter[str] = Counter()
        self._state = _State()
        self._patch = LaunchPatch()
        self.pin: int | None = None  # the autotune config index every autotuned launch uses (None: its own choice)
        self.pruned_pins: set[int] = set()

    @property
    def inside_triton(self) -> bool:
        """True while a Triton launch (or autotuning) is executing."""
        return self._state.depth > 0

    def _counted_launch(self, original: Any) -> Any:
        watch = self

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            watch._state.depth += 1
            try:
                if not kwargs.get("warmup", False):
                    watch.launches += 1
                    fn = getattr(self, "fn", None)
                    watch.kernels[getattr(fn, "__name__", "?")] += 1
                return original(self, *args, **kwargs)
            finally:
                watch._state.depth -= 1

        return run

    def _pinned_autotune(self, original: Any, interpret: bool) -> Any:
        watch = self

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            watch._state.depth += 1
            try:
                pin = watch.pin
                if len(self.configs) > 1 and (pin is not None or interpret):
                    # Pinned: config ``pin`` (modulo the configs left after the autotuner's own pruning),
                    # launched on its own. Unpinned under the interpreter: the first config (nothing to time).
                    self.nargs = dict(zip(self.arg_names, args, strict=False))
                    try:
                        configs = list(self.prune_configs(kwargs)) or list(self.configs)
                    finally:
                        self.nargs = None
                    config = configs[(pin or 0) % len(configs)]
                    # as Triton's own launch does (``fn.run(*args, **kwargs, **config.all_kwargs())``): a launch
                    # keyword that a config also sets (num_warps, num_stages and num_ctas always) is an error
                    # under the autotuner, not a value to override silently
                    clash = sorted(set(kwargs) & set(config.all_kwargs()))
                    if clash:
                        raise TypeError(f"{getattr(self.base_fn, '__name__', 'kernel')}: the launch passes "
                                        f"{', '.join(clash)} which the autotune config also sets (Triton "
                                        "raises: got multiple values for keyword argument)")
                    full = {**kwargs, **config.all_kwargs()}
                    if config.pre_hook is not None:
                        config.pre_hook({**dict(zip(self.arg_names, args, strict=False)), **full})
                    try:
                        return self.fn.run(*args, **full)
                    except OutOfResources:
                        if interpret or pin is None:
                            raise
                        # On a GPU a pinned config that does not fit fails hard, where the autotuner would
                        # skip it: it is not the candidate's error (the compile gate reports it as pruned).
                        watch.pruned_pins.add(pin % len(configs))
                        return original(self, *args, **kwargs)
                return original(self, *args, **kwargs)
            finally:
                watch._state.depth -= 1

        return run

    def install(self, interpret: bool) -> LaunchWatch:
        """Patch Triton's launch entry points (class level)."""
        self._patch.replace_launches(self._counted_launch,
                                     lambda original: self._pinned_autotune(original, interpret))
        return self

    def uninstall(self) -> None:
        """Restore the original methods."""
        self._patch.restore()


class CandidateAudit(TorchDispatchMode):
    """Poisons fresh allocations and records compute ops made by host code outside Triton launches."""

    def __init__(self, watch: LaunchWatch) -> None:
        super().__init__()
        self.watch = watch
        self.violations: Counter[str] = Counter()
        self.poisoned = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.watch.inside_triton:
            return out
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        name = name.split(".")[-1]
        if name in POISON_OPS and isinstance(out, torch.Tensor) and out.numel() > 0:
            out.fill_(poison_value(out.dtype))
            self.poisoned += 1
        elif name not in ALLOWED_HOST_OPS:
            self.violations[f"aten.{name}"] += 1
        return out


def _restricted_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                       level: int = 0) -> ModuleType:
    top = name.split(".")[0]
    allowed = name in ("torch", "triton", "math", "triton.language") or name.startswith("triton.language.")
    if not allowed and level == 0 and top in ("torch", "triton", "numpy") and name in sys.modules:
        # torch's C++ side imports its own (already loaded) Python modules while a candidate frame is the
        # innermost one, which makes it use the candidate's builtins: hand back the loaded module.
        allowed = True
        top = "torch" if top == "numpy" else top
    if level != 0 or not allowed or top not in ("torch", "triton", "math"):
        raise ImportError(f"import of {name!r} is not allowed in a candidate")
    return builtins.__import__(name, globals, locals, fromlist, level)


def restricted_builtins() -> dict[str, Any]:
    """The builtins a candidate module sees: SAFE_BUILTINS plus a guarded ``__import__``."""
    table = {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}
    table["__import__"] = _restricted_import
    return table


def load_candidate(path: Path, module_name: str) -> ModuleType:
    """Execute the candidate file at ``path`` as module ``module_name`` under restricted builtins."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = restricted_builtins()
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not callable(module.__dict__.get("run")):
        raise AttributeError("the candidate defines no callable run")
    return module


def load_reference(path: Path) -> ModuleType:
    """Import the workload's reference.py (trusted workload code, normal builtins)."""
    spec = importlib.util.spec_from_file_location("klineage_workload_reference", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["klineage_workload_reference"] = module
    spec.loader.exec_module(module)
    for name in ("make_inputs", "reference"):
        if not callable(getattr(module, name, None)):
            raise AttributeError(f"{path} defines no {name}()")
    return module


def jit_functions_of(module: ModuleType) -> dict[int, Any]:
    """Map id(JITFunction) -> the outermost Autotuner wrapping it, for every autotuned kernel in ``module``."""
    table: dict[int, Any] = {}
    for value in list(vars(module).values()):
        if isinstance(value, Autotuner):
            inner = value.fn
            while isinstance(inner, Heuristics | Autotuner):
                inner = inner.fn
            table[id(inner)] = value
    return table


def autotune_config_count(module: ModuleType) -> int:
    """The largest number of ``triton.Config`` of any module-level autotuned kernel (1 when none)."""
    counts = [len(value.configs) for value in vars(module).values() if isinstance(value, Autotuner)]
    return max(counts, default=1) or 1


def set_autotune_rep(module: ModuleType, rep_ms: float) -> int:
    """Make every module-level autotuner that uses Triton's default benchmark time each config for ``rep_ms``
    (warm-up a quarter of that) instead of Triton's 100 ms; one that brings its own ``do_bench`` is left as
    it is. Returns how many were set. The sweep is the GPU time an autotuned candidate holds the device
    alone the longest, and the choice it makes is then timed by the performance gate like any kernel."""
    import triton.testing

    warmup = max(1.0, rep_ms / 4)

    def bench(kernel_call: Any, quantiles: Any) -> Any:
        return triton.testing.do_bench(kernel_call, warmup=warmup, rep=rep_ms, quantiles=quantiles)

    count = 0
    for value in list(vars(module).values()):
        tuner = value
        while isinstance(tuner, Heuristics | Autotuner):
            if isinstance(tuner, Autotuner) and getattr(tuner, "_do_bench", None) is None:
                tuner._do_bench = bench
                count += 1
            tuner = tuner.fn
    return count


def kernel_names(module: ModuleType) -> list[str]:
    """Names of the module-level Triton kernels (plain, autotuned or with heuristics)."""
    names = []
    for name, value in vars(module).items():
        inner = value
        while isinstance(inner, Heuristics | Autotuner):
            inner = inner.fn
        if is_jit_launcher(inner):
            names.append(name)
    return sorted(names)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, truncated: the form every gate reason uses for errors."""
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def triton_version() -> str:
    """The installed Triton version."""
    return str(triton.__version__)
