"""The correctness and integrity gates: trusted side (the process that owns the verdict).

The candidate runs in a worker process (``worker.py``); these functions run in the trusted process and
talk to it through a ``CandidateRunner`` (``trusted.RemoteCandidate``): they make every input with the
workload's ``make_inputs``, compute the reference themselves, send the inputs, and judge what comes back.
Nothing the worker says is taken as a verdict: outputs are compared here; launch counts and the
host-code audit are the worker's reports, and can only make a candidate fail.

Correctness, for every (shape, dtype) of the grid and ``seeds`` seeds (default 5):

* inputs come from the workload's ``make_inputs(shape, dtype, seed, device)`` and are then put through
  one of three documented distributions, cycling with the seed index (``DISTRIBUTIONS``):
  ``base`` (as made), ``scaled`` (every floating input × 10: magnitude bugs such as a missing
  max-subtraction overflow), ``outliers`` (0.5 % of the elements of every floating input, at least one,
  drawn with replacement, set to ±8 × the tensor's largest magnitude). Integer inputs (indices, targets)
  are never changed.
* the reference runs here, on this process's own copy of the inputs;
* the candidate runs in the worker on the copy it was sent, under ``CandidateAudit`` (fresh ``empty*``
  memory is NaN);
* an autotuned candidate is run with each of its configs *pinned* (each config its own launch, on the
  CPU interpreter too): call ``i`` of a (shape, dtype) pins config ``i mod n``; with more configs than
  seeds, extra calls cycle through the seeds again, so every config meets every (shape, dtype);
* structure, shape, dtype and device must match; where the reference is not finite the candidate
  must equal it; elsewhere the candidate must be finite and ‖out − ref‖/‖ref‖ ≤ the manifest tolerance
  (integer and boolean outputs must be equal).

A case the interpreter cannot judge (bf16 with ``tl.dot``: DESIGN.md, "Versions and facts") is
skipped and counted, never passed or failed. The gate's status: ``pass`` when at least one case was
compared and none failed (skipped cases are named in the reason); ``skipped`` only under the
interpreter when *no* case could be judged; on a GPU a correctness gate that compared nothing fails.

Integrity, per (shape, dtype): inputs bitwise unchanged after ``run`` (the worker sends them back);
two runs on the same tensors bitwise identical; at least one Triton kernel launched by each call; a
third call on the same tensors, refilled in place with another seed's data, gives that data's answer
(no memo by address); and no ATen compute op run by the host code in any call so far (the audit).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from klineage.validator.errors import WorkloadError
from klineage.validator.harness import one_line

DISTRIBUTIONS: tuple[str, ...] = ("base", "scaled", "outliers")
SCALE = 10.0
OUTLIER_FRACTION = 0.005
OUTLIER_FACTOR = 8.0


class CaseFailure(Exception):
    """A correctness or integrity failure: the message is the gate's reason."""


def case_label(shape: dict, dtype: str, seed: int | None = None, dist: str | None = None) -> str:
    """``fp16 {'rows': 4, 'cols': 33} seed 2 (scaled)``: how a reason names a case."""
    text = f"{dtype} {dict(shape)}"
    if seed is not None:
        text += f" seed {seed}"
    if dist is not None:
        text += f" ({dist})"
    return text


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple | list):
        return type(value)(_map_tensors(v, fn) for v in value)
    return value


def clone_inputs(inputs: Sequence[Any]) -> tuple:
    """Deep copy of the input tuple (tensors cloned, other values as they are)."""
    return tuple(_map_tensors(v, lambda t: t.detach().clone()) for v in inputs)


def transform_inputs(inputs: Sequence[Any], dist: str, seed: int) -> tuple:
    """Apply distribution ``dist`` (see the module docstring) to the floating tensors of ``inputs``."""
    if dist == "base":
        return tuple(inputs)
    g = torch.Generator(device="cpu").manual_seed(10_007 * seed + 17)

    def change(t: torch.Tensor) -> torch.Tensor:
        if not t.dtype.is_floating_point or t.numel() == 0:
            return t
        if dist == "scaled":
            return (t.to(torch.float32) * SCALE).to(t.dtype)
        if dist == "outliers":
            flat = t.detach().clone().reshape(-1)
            count = max(1, int(flat.numel() * OUTLIER_FRACTION))
            idx = torch.randint(0, flat.numel(), (count,), generator=g).to(flat.device)
            sign = (torch.randint(0, 2, (count,), generator=g) * 2 - 1).to(flat.device, torch.float32)
            peak = float(flat.float().abs().max())
            flat[idx] = (sign * OUTLIER_FACTOR * max(peak, 1.0)).to(flat.dtype)
            return flat.reshape(t.shape)
        raise ValueError(f"unknown distribution {dist!r}")

    return tuple(_map_tensors(v, change) for v in inputs)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, tuple | list):
        out: list[Any] = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value]


def compare(out: Any, ref: Any, tolerance: float) -> float:
    """Check ``out`` against ``ref``; return the worst relative error; raise CaseFailure when wrong."""
    outs, refs = _flatten(out), _flatten(ref)
    if len(outs) != len(refs) or (isinstance(ref, tuple | list) != isinstance(out, tuple | list)):
        raise CaseFailure(f"output structure differs: got {type(out).__name__} of {len(outs)}, expected "
                          f"{type(ref).__name__} of {len(refs)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        which = f"output {i}: " if len(refs) > 1 else ""
        if not isinstance(r, torch.Tensor):
            if o != r:
                raise CaseFailure(f"{which}got {o!r}, expected {r!r}")
            continue
        if not isinstance(o, torch.Tensor):
            raise CaseFailure(f"{which}got {type(o).__name__}, expected a tensor")
        if tuple(o.shape) != tuple(r.shape):
            raise CaseFailure(f"{which}shape {tuple(o.shape)} != expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            raise CaseFailure(f"{which}dtype {o.dtype} != expected {r.dtype}")
        if o.device.type != r.device.type:
            raise CaseFailure(f"{which}device {o.device} != expected {r.device}")
        if not (r.dtype.is_floating_point or r.dtype.is_complex):
            bad = int((o != r).sum())
            if bad:
                raise CaseFailure(f"{which}{bad} of {r.numel()} elements differ (exact match required)")
            continue
        o64, r64 = o.detach().to(torch.float64), r.detach().to(torch.float64)
        finite = torch.isfinite(r64)
        if not bool(finite.all()):
            same = (o64[~finite] == r64[~finite]) | (torch.isnan(o64[~finite]) & torch.isnan(r64[~finite]))
            if not bool(same.all()):
                raise CaseFailure(f"{which}{int((~same).sum())} elements differ where the reference is "
                                  "not finite")
        of, rf = o64[finite], r64[finite]
        nonfinite = ~torch.isfinite(of)
        if bool(nonfinite.any()):
            first = int(torch.nonzero(~torch.isfinite(o64) & finite.reshape(o64.shape))[0].tolist()[0]) \
                if o64.dim() == 1 else torch.nonzero(~torch.isfinite(o64) & finite)[0].tolist()
            raise CaseFailure(f"{which}{int(nonfinite.sum())} of {r.numel()} elements are NaN/Inf where the reference "
                              "is finite (an element never written reads as NaN here; a read out of bounds can "
                              f"also give one), first at index {first}")
        denom = float(torch.linalg.vector_norm(rf)) if rf.numel() else 0.0
        diff = float(torch.linalg.vector_norm(of - rf)) if rf.numel() else 0.0
        rel = diff / denom if denom > 0 else diff
        if not rel <= tolerance:
            raise CaseFailure(f"{which}relative error {rel:.3g} > tolerance {tolerance:g}")
        worst = max(worst, rel)
    return worst


class CandidateError(Exception):
    """The candidate's ``run`` raised in the worker (or returned something that cannot be sent back)."""


@dataclass(frozen=True)
class CallResult:
    """What the worker reported for one ``run`` call: outputs (on this process's CPU) and findings."""

    out: Any
    out_devices: tuple[str, ...]
    launches: int
    kernels: Mapping[str, int] = field(default_factory=dict)
    violations: Mapping[str, int] = field(default_factory=dict)
    poisoned: int = 0
    inputs: Any = None


class CandidateRunner(Protocol):
    """The trusted side's handle on a loaded candidate (``trusted.RemoteCandidate``)."""

    configs: int

    def call(self, slot: str, inputs: Sequence[Any] | None = None, config: int | None = None,
             return_inputs: bool = False) -> CallResult:
        """Run the candidate on ``inputs`` (None: the slot's tensors again); raise CandidateError."""
        ...

    def refill(self, slot: str, inputs: Sequence[Any]) -> None:
        """Copy ``inputs``' data into the slot's tensors in place."""
        ...


@dataclass
class Findings:
    """What the worker's audits reported over one job (accumulated across gates)."""

    violations: Counter[str] = field(default_factory=Counter)
    kernels: Counter[str] = field(default_factory=Counter)
    poisoned: int = 0
    pruned_pins: set[int] = field(default_factory=set)

    def add(self, result: CallResult) -> None:
        """Fold one call's report in."""
        self.violations.update({str(k): int(v) for k, v in result.violations.items()})
        self.kernels.update({str(k): int(v) for k, v in result.kernels.items()})
        self.poisoned += int(result.poisoned)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


#: One reference computation at a time in this process. A reference may build large temporaries (an
#: attention reference materializes B × H × S × S scores: 17 GB for alibi_attention's largest shape) and the
#: trusted process checks many jobs side by side: eight such references at once filled the 80 GB H100 and
#: every job beside them ran out of memory (2026-12-07). References are vendor ops, milliseconds each, so
#: taking turns costs little; one after another they reuse the same cached blocks, so the process's peak is
#: one reference's, and the hold around the case gives idle memory back (``runner._hold_for``).
_REFERENCE_TURN = threading.Lock()


#: Seconds the trusted side spent on the gate running in this thread, by part (``spent``; None outside a gate).
_SPENT: ContextVar[dict[str, float] | None] = ContextVar("klineage_trusted_spent", default=None)


@contextmanager
def spent(part: str) -> Iterator[None]:
    """Add the block's wall time to ``part`` of the gate running in this thread (its ``trusted_<part>_s``
    metric, see ``with_trusted_parts``); nothing outside a gate. Diagnostic only: no verdict reads it."""
    began = time.perf_counter()
    try:
        yield
    finally:
        parts = _SPENT.get()
        if parts is not None:
            parts[part] = parts.get(part, 0.0) + time.perf_counter() - began


def with_trusted_parts(gate: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``gate`` (a function returning an outcome dict) and add to its metrics where this process's own
    time went: ``trusted_inputs_s`` (making inputs), ``trusted_reference_wait_s`` (waiting for the reference
    turn), ``trusted_reference_s``, ``trusted_compare_s`` (judging outputs and returned inputs),
    ``trusted_release_s`` (giving idle cached memory back after each hold: ``runner._hold_for``)."""
    parts: dict[str, float] = {}
    token = _SPENT.set(parts)
    try:
        outcome = gate()
    finally:
        _SPENT.reset(token)
    outcome["metrics"] = {**outcome.get("metrics", {}),
                          **{f"trusted_{part}_s": round(seconds, 3) for part, seconds in sorted(parts.items())}}
    return outcome


def expected_output(reference: Any, inputs: Sequence[Any], device: str) -> Any:
    """The workload's reference on a copy of ``inputs`` (the inputs are never touched), computed when no
    other thread of this process is computing one and finished on the device before returning."""
    with spent("reference_wait"):
        _REFERENCE_TURN.acquire()
    try:
        with spent("reference"):
            out = reference.reference(*clone_inputs(inputs))
            if device.startswith("cuda") and torch.cuda.is_initialized():  # else nothing ran on a GPU
                torch.cuda.synchronize()
    finally:
        _REFERENCE_TURN.release()
    return out


def _on(value: Any, device: Any) -> Any:
    return _map_tensors(value, lambda t: t.to(device))


def check_devices(result: CallResult, ref: Any) -> None:
    """The outputs' devices (as the worker reported them) must be the reference's."""
    expected = tuple(t.device.type for t in _flatten(ref) if isinstance(t, torch.Tensor))
    if len(result.out_devices) == len(expected) and result.out_devices != expected:
        raise CaseFailure(f"output device {','.join(result.out_devices)} != expected {','.join(expected)}")


def judge(result: CallResult, ref: Any, tolerance: float) -> float:
    """Compare a worker's outputs with the reference computed here; raise CaseFailure when wrong."""
    check_devices(result, ref)
    device = next((t.device for t in _flatten(ref) if isinstance(t, torch.Tensor)), None)
    out = _on(result.out, device) if device is not None else result.out
    return compare(out, ref, tolerance)


def no_hold(exclusive: bool) -> AbstractContextManager[None]:
    """A ``hold`` that holds nothing (one job at a time, or no GPU)."""
    return nullcontext()


def run_correctness(runner: CandidateRunner, reference: Any, manifest: Any, shapes: Sequence[dict], device: str,
                    interpret: bool, uses_dot: bool, findings: Findings, seeds: int = 5,
                    hold: Callable[[bool], AbstractContextManager[None]] = no_hold) -> dict[str, Any]:
    """The correctness gate over ``shapes`` × the manifest's dtypes; returns an outcome dict (its metrics
    with the trusted side's time by part: ``with_trusted_parts``).

    ``hold(exclusive)`` is entered around each (shape, dtype) case, every seed and pinned config of it
    (inputs, reference, candidate, comparison): a timing run waits for at most one case of this gate, and
    the gate for at most one timed case per case (the device lock is phase-fair).
    """
    return with_trusted_parts(lambda: _correctness_gate(runner, reference, manifest, shapes, device, interpret,
                                                        uses_dot, findings, seeds, hold))


def _correctness_gate(runner: CandidateRunner, reference: Any, manifest: Any, shapes: Sequence[dict], device: str,
                      interpret: bool, uses_dot: bool, findings: Findings, seeds: int,
                      hold: Callable[[bool], AbstractContextManager[None]]) -> dict[str, Any]:
    worst: dict[str, float] = {}
    judged = 0
    skipped: list[str] = []
    configs = max(1, int(runner.configs))
    for shape in shapes:
        for dtype in manifest.dtypes:
            if interpret and dtype == "bf16" and uses_dot:
                skipped.append(case_label(shape, dtype))
                continue
            with hold(False):
                outcome = _correctness_case(runner, reference, shape, dtype, device, findings, seeds, configs,
                                            float(manifest.tolerance[dtype]), worst)
            if outcome is not None:
                return outcome
            judged += _calls_per_case(seeds, configs)
    metrics: dict[str, Any] = {
        "cases": judged, "skipped_cases": skipped, "seeds_per_case": seeds,
        "distributions": list(DISTRIBUTIONS), "max_rel_err": worst,
        "tolerance": {d: manifest.tolerance[d] for d in manifest.dtypes},
        "shapes": [dict(s) for s in shapes], "mode": "interpreter (TRITON_INTERPRET=1)" if interpret else device,
        "autotune_configs_pinned": configs if configs > 1 else 0,
    }
    skip_note = (f"; not judged: {', '.join(skipped)} (bf16 tl.dot is wrong under the Triton interpreter, "
                 "DESIGN.md)") if skipped else ""
    if judged == 0:
        if not interpret:
            return {"status": "fail", "metrics": metrics, "reason": "no case was compared: nothing to judge"}
        return {"status": "skipped", "metrics": metrics,
                "reason": "interpreter cannot judge any case: bf16 tl.dot is wrong under TRITON_INTERPRET "
                          f"(DESIGN.md); not judged: {', '.join(skipped)}"}
    errs = ", ".join(f"{d} {worst[d]:.2g} <= {manifest.tolerance[d]:g}" for d in worst)
    pinned = f", each of {configs} autotune configs pinned" if configs > 1 else ""
    return {"status": "pass", "metrics": metrics,
            "reason": f"{judged} cases within tolerance ({len(shapes)} shapes, {seeds} seeds each, "
                      f"{'/'.join(DISTRIBUTIONS)}{pinned}); max rel err {errs}{skip_note}"}



def _calls_per_case(seeds: int, configs: int) -> int:
    """Checked calls per (shape, dtype): every seed, and every autotune config pinned at least once."""
    return max(seeds, configs) if configs > 1 else seeds


def _correctness_case(runner: CandidateRunner, reference: Any, shape: dict, dtype: str, device: str,
                      findings: Findings, seeds: int, configs: int, tol: float,
                      worst: dict[str, float]) -> dict[str, Any] | None:
    """One (shape, dtype) of the correctness gate, every seed and pinned config: a failing outcome, or None
    when every call was within ``tol`` (``worst`` updated with the largest relative error)."""
    for i in range(_calls_per_case(seeds, configs)):
        seed = 1 + (i % seeds)
        dist = DISTRIBUTIONS[(seed - 1) % len(DISTRIBUTIONS)]
        label = case_label(shape, dtype, seed, dist)
        config = i % configs if configs > 1 else None
        if config is not None:
            label += f" config {config}"
        try:
            with spent("inputs"):
                made = reference.make_inputs(dict(shape), dtype, seed, device=device)
                inputs = transform_inputs(made, dist, seed)
            ref_out = expected_output(reference, inputs, device)
        except WorkloadError:  # make_inputs broken (trusted.TrustedReference): the workload's fault, no verdict
            raise
        except Exception as exc:
            return {"status": "fail", "reason": f"the workload's reference failed on {label}: {one_line(exc)}",
                    "metrics": {}}
        try:
            result = runner.call("correctness", inputs, config=config)
        except CandidateError as exc:
            return {"status": "fail", "reason": f"run raised on {label}: {exc}", "metrics": {"case": label}}
        findings.add(result)
        try:
            with spent("compare"):
                rel = judge(result, ref_out, tol)
        except CaseFailure as exc:
            return {"status": "fail", "reason": f"{label}: {exc}", "metrics": {"case": label}}
        worst[dtype] = max(worst.get(dtype, 0.0), rel)
    return None

def _bits(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.detach().to(device).contiguous().reshape(-1).view(torch.uint8)


def _same_bits(a: Any, b: Any) -> bool:
    fa, fb = _flatten(a), _flatten(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            # compared where both live (a GPU's tensors never copied to the host), else on the host
            where = x.device if x.device == y.device else torch.device("cpu")
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(_bits(x, where), _bits(y, where)):
                return False
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) or x != y:
            return False
    return True


def _snapshot(value: Any) -> Any:
    return _map_tensors(value, lambda t: t.detach().clone())


def run_integrity(runner: CandidateRunner, reference: Any, manifest: Any, shapes: Sequence[dict], device: str,
                  findings: Findings, interpret: bool = False, uses_dot: bool = False,
                  hold: Callable[[bool], AbstractContextManager[None]] = no_hold) -> dict[str, Any]:
    """The integrity gate over ``shapes`` × dtypes; returns an outcome dict.

    A third call follows the two identical ones: the same input tensors (in the worker), refilled in
    place with another seed's data, must give that data's answer (an output memoized by tensor address
    does not). Each case runs inside ``hold(False)`` (the device shared with other jobs' checks). On a GPU
    an autotuned candidate first gets one call of its own per case inside ``hold(True)``: its first
    unpinned call per shape is where Triton's autotuner times the configs, and that choice must be made on
    a quiet GPU, as the performance gate's timing is; the checked calls that follow (the inputs sent back,
    compared) then need the device only shared. The outcome's metrics carry the trusted side's time by
    part (``with_trusted_parts``).
    """
    return with_trusted_parts(lambda: _integrity_gate(runner, reference, manifest, shapes, device, findings,
                                                      interpret, uses_dot, hold))


def _integrity_gate(runner: CandidateRunner, reference: Any, manifest: Any, shapes: Sequence[dict], device: str,
                    findings: Findings, interpret: bool, uses_dot: bool,
                    hold: Callable[[bool], AbstractContextManager[None]]) -> dict[str, Any]:
    cases = 0
    if findings.violations:
        return _violation_outcome(findings.violations, {"host_op_violations": dict(findings.violations)})
    tunes = not interpret and int(getattr(runner, "configs", 1) or 1) > 1
    for shape in shapes:
        for dtype in manifest.dtypes:
            outcome = _integrity_case(runner, reference, manifest, shape, dtype, device, findings, interpret,
                                      uses_dot, hold, tunes)
            if outcome is not None:
                return outcome
            cases += 1
    return _integrity_outcome(findings, cases)


def _integrity_case(runner: CandidateRunner, reference: Any, manifest: Any, shape: dict, dtype: str, device: str,
                    findings: Findings, interpret: bool, uses_dot: bool,
                    hold: Callable[[bool], AbstractContextManager[None]] = no_hold,
                    tunes: bool = False) -> dict[str, Any] | None:
    """One (shape, dtype) of the integrity gate: a failing outcome, or None when the case passed."""
    label = case_label(shape, dtype, 4242)
    # Each hold is one wait in the device lock's queue (a timing phase of other jobs, ~2 s each with eight
    # jobs side by side on the H100): the inputs are made inside the hold that first needs them.
    if tunes:
        try:
            with hold(True):  # the autotuner's sweep for this shape: on a quiet GPU
                with spent("inputs"):
                    inputs = reference.make_inputs(dict(shape), dtype, 4242, device=device)
                    saved = _snapshot(inputs)
                findings.add(runner.call("integrity", inputs))
        except CandidateError as exc:
            return {"status": "fail", "reason": f"run raised on {label}: {exc}", "metrics": {"case": label}}
        with hold(False):
            return _integrity_checked_calls(runner, reference, manifest, shape, dtype, device, label, inputs,
                                            saved, findings, interpret, uses_dot, sent=True)
    with hold(False):
        with spent("inputs"):
            inputs = reference.make_inputs(dict(shape), dtype, 4242, device=device)
            saved = _snapshot(inputs)
        return _integrity_checked_calls(runner, reference, manifest, shape, dtype, device, label, inputs,
                                        saved, findings, interpret, uses_dot, sent=False)


def _integrity_checked_calls(runner: CandidateRunner, reference: Any, manifest: Any, shape: dict, dtype: str,
                             device: str, label: str, inputs: Any, saved: Any, findings: Findings, interpret: bool,
                             uses_dot: bool, sent: bool) -> dict[str, Any] | None:
    """The checked calls of one integrity case. ``sent``: the worker already holds this case's inputs (from
    the autotuning call before), and the first checked call runs on those same tensors, so a change either
    call made to them is seen against ``saved``."""
    try:
        first = runner.call("integrity", None if sent else inputs, return_inputs=True)
        findings.add(first)
        if first.inputs is None or len(first.inputs) != len(saved):
            return {"status": "fail", "metrics": {"case": label},
                    "reason": f"the worker did not send back the inputs on {label}"}
        with spent("compare"):
            changed = next((i for i, (now, then) in enumerate(zip(first.inputs, saved, strict=True))
                            if not _same_bits(now, then)), None)
        if changed is not None:
            return {"status": "fail", "metrics": {"case": label},
                    "reason": f"run modified its input {changed} on {label}"}
        if first.launches <= 0:
            return {"status": "fail", "metrics": {"case": label},
                    "reason": f"run returned without launching a Triton kernel on {label}"}
        second = runner.call("integrity")
        findings.add(second)
        if second.launches <= 0:
            return {"status": "fail", "metrics": {"case": label},
                    "reason": f"the second call launched no Triton kernel on {label} (memoized output)"}
    except CandidateError as exc:
        return {"status": "fail", "reason": f"run raised on {label}: {exc}", "metrics": {"case": label}}
    with spent("compare"):
        same = _same_bits(first.out, second.out)
    if not same:
        return {"status": "fail", "metrics": {"case": label},
                "reason": f"two runs on the same inputs differ on {label} ({NONDETERMINISTIC})"}
    with spent("inputs"):
        refill = reference.make_inputs(dict(shape), dtype, 4343, device=device)
    same_layout = all(_same_layout(a, b) for a, b in zip(inputs, refill, strict=True))
    if same_layout and not (interpret and dtype == "bf16" and uses_dot):  # else: not judgeable
        expected = expected_output(reference, refill, device)
        try:
            runner.refill("integrity", refill)
            third = runner.call("integrity")
            findings.add(third)
            with spent("compare"):
                judge(third, expected, float(manifest.tolerance[dtype]))
        except CaseFailure as exc:
            return {"status": "fail", "metrics": {"case": label},
                    "reason": f"after the same input tensors were refilled in place on {label}, the output "
                              f"did not follow ({exc}): output memoized by tensor address"}
        except CandidateError as exc:
            return {"status": "fail", "reason": f"run raised on {label}: {exc}",
                    "metrics": {"case": label}}
    return None


#: The words of an integrity failure for two runs that differ (``runner`` adds why, where it knows).
NONDETERMINISTIC = "non-deterministic output"


def _integrity_outcome(findings: Findings, cases: int) -> dict[str, Any]:
    violations = findings.violations
    metrics = {"cases": cases, "launches": dict(findings.kernels), "host_op_violations": dict(violations),
               "poisoned_allocations": findings.poisoned}
    if violations:
        return _violation_outcome(violations, metrics)
    if cases == 0:
        return {"status": "fail", "metrics": metrics, "reason": "no case was checked: nothing to judge"}
    return {"status": "pass", "metrics": metrics,
            "reason": f"{cases} cases: inputs unchanged, two runs bitwise identical, output follows in-place "
                      f"input changes, {sum(findings.kernels.values())} Triton launches, no torch compute in "
                      "host code"}


def _same_layout(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype
    return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b


def _violation_outcome(violations: Counter[str], metrics: dict[str, Any]) -> dict[str, Any]:
    ops = ", ".join(f"{op} x{n}" for op, n in violations.most_common(5))
    return {"status": "fail", "metrics": metrics,
            "reason": f"torch compute ops ran in host code outside any Triton kernel: {ops}"}
