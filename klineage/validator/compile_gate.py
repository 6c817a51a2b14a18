"""The compile gate (worker side): compile every kernel the candidate launches, read its resources.

How the kernels and their signatures are found: the candidate is loaded a second time as plain
(non-interpreted) Triton, its launch entry points are replaced by *compile-only* stand-ins, and its
``run`` is called on the workload's inputs. Each ``kernel[grid](...)`` then yields the real argument
types and constexprs; an autotuned kernel yields one variant per ``triton.Config``.

* With a GPU: every variant is compiled for the device (``JITFunction.run(..., warmup=True)``) and
  loaded, so registers and spills come from the driver (``CompiledKernel.n_regs``/``n_spills``) and a
  variant that does not fit raises ``OutOfResources`` exactly as it would at launch.
* Without a GPU: every variant is cross-compiled with ``triton.compile(ASTSource(...),
  target=GPUTarget("cuda", 90, 32))`` for the H200 target (compile-only), registers and spills read
  from the ptxas log, shared memory from the kernel metadata, checked against the H200's 232448 B.
* Always: the same variants cross-compiled for sm_80 and checked against the A100's 166912 B —
  reported, never failing the gate (A100 is our second architecture, compile-only).

A pinned launch that does not compile or fit fails the gate; an autotuned launch fails only when *no*
config fits (Triton prunes configs that run out of resources silently at run time), and the pruned
ones are listed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.autotuner import Autotuner
from triton.runtime.errors import OutOfResources
from triton.runtime.jit import JITFunction, create_function_from_signature

from klineage.validator.harness import jit_functions_of, load_candidate, one_line
from klineage.validator.triton_launch import LaunchPatch

SHARED_LIMITS: dict[int, tuple[str, int]] = {80: ("A100", 166912), 90: ("H200", 232448)}
"""Opt-in shared memory per block (bytes) by compute capability, with the GPU we mean by it when cross-compiling
(an H100 has the same sm_90 limit as the H200)."""
PORTABILITY_ARCH = 80  # our second architecture: reported, compile-only, never failing the gate


def gpu_name(arch: int, on_device: bool) -> str:
    """The GPU a variant of ``arch`` was judged for: the card in this machine when compiled on it (an H100 is
    not reported as an H200), otherwise the GPU :data:`SHARED_LIMITS` means by the architecture."""
    if on_device and torch.cuda.is_available():
        return _this_card()
    return SHARED_LIMITS.get(arch, (f"sm_{arch}",))[0]


@functools.cache
def _this_card() -> str:
    """This process's GPU by its short name ("H100" of "NVIDIA H100 80GB HBM3"), asked once per process."""
    name = torch.cuda.get_device_name()
    short = re.search(r"\b([A-Z]{1,2}\d{2,3})\b", name)
    return short.group(1) if short else name


_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_REGS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


class _Variant:
    """One compiled (kernel, arch, specialization) and what it costs."""

    def __init__(self, kernel: str, arch: int, group: int, autotuned: bool, config: dict[str, Any],
                 mode: str, gpu: str) -> None:
        self.kernel = kernel
        self.arch = arch
        self.gpu = gpu
        self.group = group
        self.autotuned = autotuned
        self.config = config
        self.mode = mode
        self.n_regs: int | None = None
        self.n_spills: int | None = None
        self.shared: int | None = None
        self.error: str | None = None
        self.unchecked: str | None = None  # why this variant could not be compiled at all (not its fault)

    @property
    def fits(self) -> bool:
        limit = SHARED_LIMITS.get(self.arch, ("", 1 << 62))[1]
        return self.error is None and self.shared is not None and self.shared <= limit

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "arch": f"sm_{self.arch}", "gpu": self.gpu,
                "mode": self.mode, "autotuned": self.autotuned, "config": self.config, "n_regs": self.n_regs,
                "n_spills": self.n_spills, "shared": self.shared, "fits": self.fits, "error": self.error,
                "unchecked": self.unchecked}


class SignatureError(Exception):
    """The launch could not be turned into a cross-compile signature: a limit of this gate, not the kernel's."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return repr(value)


def cross_compile(jf: JITFunction, args: tuple, kwargs: dict[str, Any], arch: int,
                  memo: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """Compile ``jf`` for ``sm_<arch>`` without a GPU; return shared bytes, registers and spills."""
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(jf.signature, jf.params, backend)
    kwargs = dict(kwargs)
    kwargs["debug"] = False
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    try:
        bound_args, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = jf._pack_args(backend, kwargs, bound_args, specialization, options)
    except Exception as exc:
        raise SignatureError(f"no sm_{arch} signature could be derived from the launch: {one_line(exc)}") from exc
    key = (id(jf), arch, repr(signature), repr(constexprs), repr(attrs), repr(sorted(options.__dict__.items())))
    if key in memo:
        return memo[key]
    log = io.StringIO()
    previous = knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(ASTSource(jf, signature, constexprs, attrs), target=target,
                                      options=options.__dict__)
    finally:
        knobs.nvidia.dump_ptxas_log = previous
    text = log.getvalue()
    regs = _REGS.findall(text)
    spills = _SPILLS.findall(text)
    result = {"shared": int(compiled.metadata.shared),
              "n_regs": int(regs[-1]) if regs else None,
              "n_spills": int(spills[-1][0]) + int(spills[-1][1]) if spills else None}
    memo[key] = result
    return result


class CompileProbe:
    """Replaces Triton's launch paths by compile-only stand-ins while the candidate's ``run`` executes."""

    def __init__(self, module: Any, on_gpu: bool, archs: Sequence[int] | None = None,
                 portability: bool = True) -> None:
        self.module = module
        self.on_gpu = on_gpu
        self.autotuned = jit_functions_of(module)
        self.variants: dict[Any, _Variant] = {}
        self.memo: dict[Any, dict[str, Any]] = {}
        self.group = 0
        self._in_group: int | None = None
        self._patch = LaunchPatch()
        self.target_arch = torch.cuda.get_device_capability()[0] * 10 + torch.cuda.get_device_capability()[1] \
            if on_gpu else 90
        # what is compiled: ``archs``, else the target then sm_80 (A100, compile-only) unless reported apart
        self.archs = list(archs) if archs is not None else [self.target_arch] + (
            [PORTABILITY_ARCH] if portability and self.target_arch != PORTABILITY_ARCH else [])

    def _config_dict(self, jf: JITFunction, kwargs: dict[str, Any]) -> dict[str, Any]:
        constexpr_names = {p.name for p in jf.params if p.is_constexpr}
        out = {k: _jsonable(v) for k, v in kwargs.items() if k in constexpr_names or k in _OPTION_KEYS}
        return dict(sorted(out.items()))

    def _compile_variant(self, jf: JITFunction, args: tuple, kwargs: dict[str, Any], group: int,
                         autotuned: bool, original_run: Callable[..., Any]) -> None:
        name = getattr(jf, "__name__", "?")
        config = self._config_dict(jf, kwargs)
        for arch in self.archs:
            key = (name, arch, repr(config), tuple(type(a).__name__ if not isinstance(a, torch.Tensor)
                                                  else str(a.dtype) for a in args))
            if key in self.variants:
                continue
            on_device = self.on_gpu and arch == self.target_arch
            variant = _Variant(name, arch, group, autotuned, config,
                               "jit on device" if on_device else "cross-compile, compile-only",
                               gpu_name(arch, on_device))
            self.variants[key] = variant
            try:
                if on_device:
                    kernel = original_run(jf, *args, grid=(1,), warmup=True, **kwargs)
                    if hasattr(kernel, "result"):
                        kernel = kernel.result()
                    variant.shared = int(kernel.metadata.shared)
                    kernel._init_handles()
                    variant.n_regs = int(kernel.n_regs)
                    variant.n_spills = int(kernel.n_spills)
                else:
                    info = cross_compile(jf, args, kwargs, arch, self.memo)
                    variant.shared = info["shared"]
                    variant.n_regs = info["n_regs"]
                    variant.n_spills = info["n_spills"]
            except OutOfResources as exc:
                variant.error = one_line(exc)
            except SignatureError as exc:
                variant.unchecked = str(exc)
            except Exception as exc:
                variant.error = one_line(exc)

    def install(self) -> None:
        """Replace Triton's compiled launch paths (not the interpreter's: the probe loads plain Triton)."""
        self._patch.replace_launches(self._jit_stand_in, self._autotune_stand_in, interpreted=False)

    def _jit_stand_in(self, original_jit_run: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def jit_run(self: JITFunction, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> None:
            if probe._in_group is not None:
                probe._compile_variant(self, args, kwargs, probe._in_group, True, original_jit_run)
                return None
            probe.group += 1
            tuner = probe.autotuned.get(id(self))
            if tuner is None:
                probe._compile_variant(self, args, kwargs, probe.group, False, original_jit_run)
                return None
            # An autotuned kernel launched through its .fn with one config: compile every config.
            base = {k: v for k, v in kwargs.items() if k not in _tuned_keys(tuner)}
            probe._in_group = probe.group
            try:
                for config in tuner.configs:
                    probe._compile_variant(self, args, {**base, **config.all_kwargs()}, probe.group, True,
                                           original_jit_run)
            finally:
                probe._in_group = None
            return None

        return jit_run

    def _autotune_stand_in(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def autotune_run(self: Autotuner, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("grid", None)
            kwargs.pop("warmup", None)
            probe.group += 1
            probe._in_group = probe.group
            try:
                for config in self.configs:
                    self.fn.run(*args, grid=None, warmup=True, **{**kwargs, **config.all_kwargs()})
            finally:
                probe._in_group = None

        return autotune_run

    def uninstall(self) -> None:
        """Put Triton's launch paths back."""
        self._patch.restore()


def _tuned_keys(tuner: Autotuner) -> set[str]:
    keys = set(_OPTION_KEYS)
    for config in tuner.configs:
        keys.update(config.kwargs)
    return keys


def _probe_launches(candidate_path: Path, cases: Iterable[tuple[str, tuple]], on_gpu: bool, module_name: str,
                    archs: Sequence[int] | None, portability: bool = True
                    ) -> tuple[CompileProbe | None, list[str], str | None]:
    """Load the candidate as plain Triton and call its ``run`` on each case with compile-only launches:
    (the probe holding every compiled variant, the cases whose ``run`` raised, why it could not load)."""
    previous_interpret = knobs.runtime.interpret
    knobs.runtime.interpret = False
    probe: CompileProbe | None = None
    run_errors: list[str] = []
    try:
        module = load_candidate(candidate_path, module_name)
        probe = CompileProbe(module, on_gpu, archs, portability)
        probe.install()
        for label, inputs in cases:
            before = len(probe.variants)
            try:
                module.run(*inputs)
            except Exception as exc:
                if len(probe.variants) == before:
                    run_errors.append(f"{label}: {one_line(exc)}")
    except Exception as exc:
        return None, run_errors, one_line(exc)
    finally:
        if probe is not None:
            probe.uninstall()
        knobs.runtime.interpret = previous_interpret
        sys.modules.pop(module_name, None)
    return probe, run_errors, None


def run_cross_compile(candidate_path: Path, cases: Iterable[tuple[str, tuple]], arch: int,
                      module_name: str = "klineage_candidate_cross") -> dict[str, Any]:
    """Cross-compile every variant the candidate launches for ``sm_<arch>`` (compile-only, no GPU needed):
    ``{"variants": [variant dicts], "errors": [...]}`` — a report, never a verdict."""
    probe, run_errors, load_error = _probe_launches(candidate_path, cases, False, module_name, [arch])
    if probe is None:
        return {"variants": [], "errors": [f"could not be loaded: {load_error}"]}
    return {"variants": [v.to_dict() for v in probe.variants.values()], "errors": run_errors[:5]}


def portability_report(variants: Sequence[dict[str, Any]], error: str | None = None) -> tuple[dict[str, Any], str]:
    """The sm_80 (A100, compile-only) part of the compile gate from its variants' dicts: (metrics, note)."""
    mode = "cross-compile, compile-only (A100)"
    if error is not None:
        return ({"mode": mode, "variants": 0, "unfit": [], "error": error},
                f"sm_80 (A100, compile-only): not checked ({error})")
    a100 = [v for v in variants if v.get("arch") == f"sm_{PORTABILITY_ARCH}" and not v.get("unchecked")]
    unfit = [v for v in a100 if not v.get("fits")]
    metrics = {"mode": mode, "variants": len(a100),
               "unfit": [{k: v.get(k) for k in ("kernel", "config", "shared", "error")} for v in unfit][:16]}
    note = (f"sm_80 (A100, compile-only): {len(unfit)} of {len(a100)} variants would not fit" if unfit
            else f"sm_80 (A100, compile-only): all {len(a100)} variants fit")
    return metrics, note


def with_portability(outcome: dict[str, Any], variants: Sequence[dict[str, Any]], error: str | None = None
                     ) -> dict[str, Any]:
    """``outcome`` (a compile gate's, without its sm_80 part) with the sm_80 report added: metrics ``sm_80``,
    the variants listed, and the note at the end of a passing gate's reason. The status never changes."""
    metrics, note = portability_report(variants, error)
    merged = dict(outcome.get("metrics") or {})
    merged["sm_80"] = metrics
    if "variants" in merged:
        merged["variants"] = (list(merged["variants"]) + list(variants))[:64]
    reason = outcome.get("reason", "")
    if outcome.get("status") == "pass":
        reason = f"{reason}; {note}"
    return {**outcome, "metrics": merged, "reason": reason}


def run_compile_gate(candidate_path: Path, cases: Iterable[tuple[str, tuple]], on_gpu: bool,
                     module_name: str = "klineage_candidate_compile", portability: bool = True) -> dict[str, Any]:
    """Run the compile gate; return an outcome dict ``{"status", "reason", "metrics"}``.

    ``cases`` are ``(label, inputs)`` pairs, the inputs made by the trusted side from the workload's
    ``make_inputs``: the launches of ``run`` on them define the signatures to compile, for the target and
    (``portability``) sm_80; without it the caller makes the sm_80 report itself (``run_cross_compile``,
    run beside, added with ``with_portability``).
    """
    probe, run_errors, load_error = _probe_launches(candidate_path, cases, on_gpu, module_name, None, portability)
    if probe is None:
        return {"status": "fail", "reason": f"candidate could not be loaded for compilation: {load_error}",
                "metrics": {}}
    variants = list(probe.variants.values())
    if run_errors and not variants:
        return {"status": "fail", "reason": f"run raised before launching any kernel: {run_errors[0]}",
                "metrics": {"errors": run_errors[:5]}}
    if not variants:
        return {"status": "fail", "reason": "run launched no Triton kernel, nothing to compile", "metrics": {}}
    target = probe.target_arch
    target_name = gpu_name(target, on_gpu)
    mode = "on device" if on_gpu else "cross-compiled on CPU, compile-only"
    unchecked = [v for v in variants if v.arch == target and v.unchecked]
    on_target = [v for v in variants if v.arch == target and not v.unchecked]
    if not on_target:
        return {"status": "skipped", "metrics": {"variants": [v.to_dict() for v in variants][:64]},
                "reason": f"could not compile for sm_{target} ({mode}): {unchecked[0].unchecked}"}
    groups: dict[int, list[_Variant]] = {}
    for v in on_target:
        groups.setdefault(v.group, []).append(v)
    failures = []
    pruned = []
    for members in groups.values():
        ok = [v for v in members if v.fits]
        bad = [v for v in members if not v.fits]
        if not ok:
            failures.extend(bad)
        elif bad:
            pruned.extend(bad)
    fitted = [v for v in on_target if v.fits]
    metrics: dict[str, Any] = {
        "target": f"sm_{target} ({target_name}, {mode})",
        "variants": [v.to_dict() for v in variants][:64],
        "kernels": sorted({v.kernel for v in variants}),
        "max_regs": max((v.n_regs or 0 for v in fitted), default=None),
        "max_spills": max((v.n_spills or 0 for v in fitted), default=None),
        "max_shared": max((v.shared or 0 for v in fitted), default=None),
        "pruned_autotune_configs": [{"kernel": v.kernel, "config": v.config, "shared": v.shared,
                                     "error": v.error} for v in pruned][:16],
    }
    if run_errors:
        metrics["run_errors"] = run_errors[:5]
    reports_a100 = PORTABILITY_ARCH in probe.archs and target != PORTABILITY_ARCH
    a100_note = ""
    if reports_a100:
        metrics["sm_80"], a100_note = portability_report([v.to_dict() for v in variants])
    limit = SHARED_LIMITS.get(target, ("", 0))[1]
    if failures:
        v = failures[0]
        why = v.error or f"shared memory {v.shared} B exceeds the {target_name} limit of {limit} B"
        return {"status": "fail", "metrics": metrics,
                "reason": f"{v.kernel} {v.config} does not fit sm_{target} ({target_name}, {mode}): {why}"}
    prune_note = f"; {len(pruned)} autotune configs pruned (out of resources)" if pruned else ""
    if unchecked:
        prune_note += f"; {len(unchecked)} variants not compiled ({unchecked[0].unchecked})"
        metrics["unchecked"] = [v.to_dict() for v in unchecked][:16]
    reason = (f"{len(on_target)} variants of {len(metrics['kernels'])} kernels compiled for sm_{target} "
              f"({target_name}, {mode}): max {metrics['max_regs']} regs, {metrics['max_spills']} B spilled, "
              f"max shared {metrics['max_shared']} B{prune_note}" + (f"; {a100_note}" if a100_note else ""))
    return {"status": "pass", "reason": reason, "metrics": metrics}
