"""Atomics whose result depends on the order programs run in: the static gate names them, and an integrity
failure for runs that differ says why such a kernel cannot pass (output must be bitwise reproducible: on a GPU
a float ``tl.atomic_add`` reduction sums in a different order on each run). Under the interpreter programs run
one after another, so the order-dependence itself is seen only on a GPU; here a candidate that also drifts
between calls stands in for it."""

from __future__ import annotations

from pathlib import Path

from klineage.validator import LocalValidator
from klineage.validator.static import check_source

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"

# each program adds its chunk of a row into y[row] with an atomic; ``scale`` lets a test make calls differ
ATOMIC_ROWSUM = '''
import torch
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def _chunk_sums(x_ptr, y_ptr, n_cols, stride_x, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    start = tl.program_id(1) * BLOCK
    cols = start + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + row, tl.sum(v, axis=0) * scale)


def run(x):
    _CALLS[0] += 1
    rows, cols = x.shape
    x = x.contiguous()
    y = torch.zeros((rows,), device=x.device, dtype=torch.float32)
    _chunk_sums[(rows, triton.cdiv(cols, 16))](x, y, cols, x.stride(0), SCALE, BLOCK=16)
    return y.to(x.dtype)
'''


def test_the_static_gate_names_order_dependent_atomics() -> None:
    report = check_source(ATOMIC_ROWSUM.replace("SCALE", "1.0"))
    assert report.ok, report.reason
    assert report.ordered_atomics == ["atomic_add"] and report.metrics()["ordered_atomics"] == ["atomic_add"]
    assert check_source((ROWSUM / "kernel.py").read_text()).ordered_atomics == []


def test_runs_that_differ_are_explained_by_the_atomics() -> None:
    validator = LocalValidator(cache=None, device="cpu", seeds=1)
    gates = ("static", "compile", "correctness", "integrity")
    steady = validator.validate(ATOMIC_ROWSUM.replace("SCALE", "1.0"), ROWSUM, gates)
    assert steady.verdict == "pass", steady.to_dict()  # in program order, as the interpreter runs them
    drifting = validator.validate(ATOMIC_ROWSUM.replace("SCALE", "1.0 + 1e-6 * (_CALLS[0] % 2)"), ROWSUM, gates)
    failed = drifting.failed_gate
    assert failed is not None and failed.gate == "integrity", drifting.to_dict()
    assert "non-deterministic output" in failed.reason and "atomic_add" in failed.reason
    assert "bitwise reproducible" in failed.reason and "second kernel" in failed.reason
