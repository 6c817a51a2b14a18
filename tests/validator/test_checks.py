"""Correctness helpers and the host-code audit, in process (no sandbox, no Triton launch)."""

from __future__ import annotations

import math

import pytest
import torch

from klineage.validator.checks import (
    DISTRIBUTIONS,
    OUTLIER_FACTOR,
    SCALE,
    CaseFailure,
    clone_inputs,
    compare,
    transform_inputs,
)
from klineage.validator.harness import CandidateAudit, LaunchWatch, poison_value


def test_compare_accepts_within_tolerance_and_reports_error() -> None:
    ref = torch.arange(1.0, 9.0, dtype=torch.float64)
    out = ref * (1 + 1e-7)
    assert compare(out, ref, 1e-5) == pytest.approx(1e-7, rel=1e-2)


@pytest.mark.parametrize(("out", "message"), [
    (torch.ones(3), "shape (3,) != expected (4,)"),
    (torch.ones(4, dtype=torch.float64), "dtype torch.float64 != expected torch.float32"),
    (torch.tensor([1.0, float("nan"), 1.0, 1.0]), "1 of 4 elements are NaN/Inf where the reference is finite"),
    (torch.tensor([1.0, 1.0, 1.0, float("inf")]), "first at index 3"),
    (torch.tensor([1.0, 1.0, 1.0, 2.0]), "relative error 0.5 > tolerance"),
    ((torch.ones(4),), "output structure differs"),
])
def test_compare_failures_say_what_is_wrong(out: object, message: str) -> None:
    with pytest.raises(CaseFailure, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare(out, torch.ones(4), 1e-5)


def test_compare_requires_matching_non_finite_values() -> None:
    ref = torch.tensor([1.0, float("inf"), float("nan")])
    assert compare(ref.clone(), ref, 1e-6) == 0.0
    with pytest.raises(CaseFailure, match="not finite"):
        compare(torch.tensor([1.0, 5.0, float("nan")]), ref, 1e-6)


def test_compare_integer_outputs_must_be_equal() -> None:
    ref = torch.tensor([1, 2, 3])
    compare(ref.clone(), ref, 0.1)
    with pytest.raises(CaseFailure, match="1 of 3 elements differ"):
        compare(torch.tensor([1, 2, 4]), ref, 0.1)


def test_distributions_are_documented_transforms_of_floating_inputs() -> None:
    x = torch.randn(50, 40)
    idx = torch.arange(7)
    base = transform_inputs((x, idx, 3), "base", 1)
    assert base[0] is x
    scaled = transform_inputs((x, idx, 3), "scaled", 1)
    assert torch.equal(scaled[0], x * SCALE) and scaled[1] is idx and scaled[2] == 3
    out = transform_inputs((x, idx), "outliers", 1)[0]
    changed = (out != x).sum().item()
    assert 1 <= changed <= math.floor(x.numel() * 0.005)
    assert out.abs().max().item() == pytest.approx(OUTLIER_FACTOR * x.abs().max().item())
    assert torch.equal(transform_inputs((x,), "outliers", 1)[0], out)  # deterministic in the seed
    assert DISTRIBUTIONS == ("base", "scaled", "outliers")


def test_clone_inputs_copies_tensors() -> None:
    x = torch.randn(3)
    (y, n) = clone_inputs((x, 5))
    y += 1
    assert not torch.equal(x, y) and n == 5


def test_audit_poisons_fresh_allocations_and_records_compute() -> None:
    watch = LaunchWatch()
    audit = CandidateAudit(watch)
    x = torch.randn(8)
    with audit:
        a = torch.empty(4)
        b = torch.empty_like(x, dtype=torch.int32)
        c = x.new_empty((2,))
        z = torch.zeros(3)
        v = x.view(2, 4).t().contiguous()
        s = x * 2 + 1
    assert torch.isnan(a).all() and torch.isnan(c).all()
    assert (b == torch.iinfo(torch.int32).max).all()
    assert (z == 0).all() and v.shape == (4, 2) and s.shape == (8,)
    assert audit.poisoned == 3
    assert set(audit.violations) == {"aten.mul", "aten.add"}


def test_poison_values() -> None:
    assert math.isnan(poison_value(torch.bfloat16))
    assert poison_value(torch.int64) == torch.iinfo(torch.int64).max
    assert poison_value(torch.bool) is True


def test_correctness_takes_the_device_case_by_case_and_shares_it() -> None:
    """Each (shape, dtype) case, all its seeds and pinned configs, runs inside one shared hold: a timing run
    waits for at most one case, and the gate re-queues once per case, not once per call."""
    import contextlib
    import types

    from klineage.validator.checks import CallResult, Findings, run_correctness

    class Reference:
        def make_inputs(self, shape, dtype, seed, device="cpu"):
            return (torch.full((shape["n"],), float(seed)),)

        def reference(self, x):
            return x * 2

    entered: list[tuple[bool, int]] = []
    calls: list[int] = []

    class Runner:
        configs = 3

        def call(self, slot, inputs=None, config=None, return_inputs=False):
            assert entered and entered[-1][1] == -1  # only ever inside a hold
            calls.append(config)
            return CallResult(out=inputs[0] * 2, out_devices=("cpu",), launches=1)

        def refill(self, slot, inputs):
            raise AssertionError("correctness never refills")

    @contextlib.contextmanager
    def hold(exclusive: bool):
        entered.append((exclusive, -1))
        try:
            yield
        finally:
            entered[-1] = (exclusive, len(calls))

    manifest = types.SimpleNamespace(dtypes=["fp32", "fp16"], tolerance={"fp32": 1e-5, "fp16": 1e-3})
    outcome = run_correctness(Runner(), Reference(), manifest, [{"n": 4}, {"n": 7}], "cpu", interpret=False,
                              uses_dot=False, findings=Findings(), seeds=5, hold=hold)
    assert outcome["status"] == "pass", outcome
    assert [exclusive for exclusive, _ in entered] == [False] * 4  # 2 shapes x 2 dtypes, all shared
    assert [n for _, n in entered] == [5, 10, 15, 20]  # 5 calls each (5 seeds; 3 configs pinned among them)
    assert calls[:5] == [0, 1, 2, 0, 1] and outcome["metrics"]["cases"] == 20


def test_autotuners_time_each_config_for_the_jobs_rep_unless_they_bring_their_own_bench() -> None:
    import types

    import triton
    import triton.language as tl

    from klineage.validator.harness import set_autotune_rep

    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    default = triton.autotune(configs, key=["n"])(triton.heuristics({"UNUSED": lambda args: 1})(_copy))
    own = triton.autotune(configs, key=["n"], do_bench=lambda fn, quantiles: [1.0, 1.0, 1.0])(_copy)
    module = types.ModuleType("candidate")
    module.default, module.own, module.plain = default, own, _copy
    assert default._do_bench is None
    assert set_autotune_rep(module, 20.0) == 1
    assert default._do_bench is not None and default._do_bench is not own._do_bench
    assert own._do_bench([], None) == [1.0, 1.0, 1.0]  # its own benchmark, untouched


def _integrity_fixture(modify_on_call: int | None = None):
    """An in-process candidate runner over tensors it keeps per slot (as the worker does) and the holds taken."""
    import contextlib
    import types
    import typing

    from klineage.validator.checks import CallResult

    class Reference:
        def make_inputs(self, shape, dtype, seed, device="cpu"):
            return (torch.full((shape["n"],), float(seed)),)

        def reference(self, x):
            return x * 2

    events: list[str] = []
    held: list[bool] = []

    class Runner:
        configs = 4
        slots: typing.ClassVar[dict] = {}
        calls = 0

        def call(self, slot, inputs=None, config=None, return_inputs=False):
            events.append(f"call {'exclusive' if held[-1] else 'shared'}")
            if inputs is not None:
                self.slots[slot] = tuple(t.clone() for t in inputs)
            Runner.calls += 1
            x = self.slots[slot][0]
            if modify_on_call == Runner.calls:
                x.add_(1)
            return CallResult(out=x * 2, out_devices=("cpu",), launches=1,
                              inputs=tuple(t.clone() for t in self.slots[slot]) if return_inputs else None)

        def refill(self, slot, inputs):
            for mine, new in zip(self.slots[slot], inputs, strict=True):
                mine.copy_(new)

    @contextlib.contextmanager
    def hold(exclusive: bool):
        held.append(exclusive)
        try:
            yield
        finally:
            held.pop()

    manifest = types.SimpleNamespace(dtypes=["fp32"], tolerance={"fp32": 1e-5})
    return Runner(), Reference(), manifest, hold, events


def test_an_autotuned_candidate_holds_the_gpu_alone_only_for_its_sweep() -> None:
    from klineage.validator.checks import Findings, run_integrity

    runner, reference, manifest, hold, events = _integrity_fixture()
    outcome = run_integrity(runner, reference, manifest, [{"n": 4}, {"n": 8}], "cuda", Findings(), hold=hold)
    assert outcome["status"] == "pass", outcome
    # per case: the sweep call alone, then the three checked calls with the device shared
    assert events == ["call exclusive", "call shared", "call shared", "call shared"] * 2


def test_an_input_changed_by_the_sweep_call_is_still_caught() -> None:
    from klineage.validator.checks import Findings, run_integrity

    runner, reference, manifest, hold, _ = _integrity_fixture(modify_on_call=1)
    outcome = run_integrity(runner, reference, manifest, [{"n": 4}], "cuda", Findings(), hold=hold)
    assert outcome["status"] == "fail" and "modified its input 0" in outcome["reason"]


def test_references_take_turns_and_never_touch_the_inputs() -> None:
    import threading
    import time

    from klineage.validator.checks import expected_output

    running, most = [0], [0]
    guard = threading.Lock()

    class Reference:
        @staticmethod
        def reference(x: torch.Tensor) -> torch.Tensor:
            with guard:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.02)  # long enough for the other threads to arrive while this one computes
            x.mul_(2)  # a reference that works in place must work on its own copy
            with guard:
                running[0] -= 1
            return x + 1

    inputs = (torch.ones(4),)
    outs: list[torch.Tensor] = []
    threads = [threading.Thread(target=lambda: outs.append(expected_output(Reference, inputs, "cpu")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1  # one reference at a time in this process
    assert len(outs) == 6 and all(torch.equal(o, torch.full((4,), 3.0)) for o in outs)
    assert torch.equal(inputs[0], torch.ones(4))


@pytest.mark.parametrize("configs, holds_per_case", [(4, [True, False]), (1, [False])],
                         ids=["autotuned", "one-config"])
def test_an_integrity_case_waits_for_the_device_once_per_kind_of_hold(configs: int,
                                                                      holds_per_case: list[bool]) -> None:
    """Every hold is a wait in the device lock's queue behind other jobs' timing: a case makes its inputs
    inside the hold that first needs them, so it takes the device once (twice when its autotuner sweeps)."""
    from klineage.validator.checks import Findings, run_integrity

    runner, reference, manifest, hold, _ = _integrity_fixture()
    runner.configs = configs
    taken: list[bool] = []

    def counting_hold(exclusive: bool):
        taken.append(exclusive)
        return hold(exclusive)

    outcome = run_integrity(runner, reference, manifest, [{"n": 4}, {"n": 8}], "cuda", Findings(),
                            hold=counting_hold)
    assert outcome["status"] == "pass", outcome
    assert taken == holds_per_case * 2


def test_the_checking_gates_say_where_the_trusted_side_spent_its_time() -> None:
    from klineage.validator.checks import Findings, run_integrity

    runner, reference, manifest, hold, _ = _integrity_fixture()
    outcome = run_integrity(runner, reference, manifest, [{"n": 4}], "cpu", Findings(), hold=hold)
    assert outcome["status"] == "pass", outcome
    parts = {k for k in outcome["metrics"] if k.startswith("trusted_")}
    assert parts == {"trusted_inputs_s", "trusted_compare_s", "trusted_reference_s", "trusted_reference_wait_s"}
    assert all(outcome["metrics"][k] >= 0 for k in parts)
