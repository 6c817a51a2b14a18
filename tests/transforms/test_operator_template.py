"""The ``Operator`` template: what each operator declares agrees with what it implements."""

from __future__ import annotations

import inspect

import pytest

from klineage.transforms.operator import Operator
from klineage.transforms.registry import all_operators, get_operator, operator_ids

ELEMENTWISE = """
import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def run(x):
    k[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
"""


@pytest.mark.parametrize("op_id", operator_ids())
def test_declared_params_are_what_apply_takes(op_id: str) -> None:
    op = get_operator(op_id)
    taken = [p for p in inspect.signature(op._apply).parameters if p != "m"]
    assert sorted(taken) == sorted(p.name for p in op.params)
    assert op.record is None or op.record not in taken
    assert set(op.echo) <= {p.name for p in op.params}


def test_every_operator_is_written_on_the_template() -> None:
    """No operator re-implements the public directions: parsing and parameter checks live once."""
    for op in all_operators():
        for method in ("detect", "simplify", "apply"):
            assert getattr(type(op), method) is getattr(Operator, method), f"{op.id} overrides {method}"


@pytest.mark.parametrize("op_id", [i for i in operator_ids() if get_operator(i).record is not None])
def test_a_malformed_record_is_a_value_error(op_id: str) -> None:
    op = get_operator(op_id)
    with pytest.raises(ValueError, match=op.record):
        op.apply(ELEMENTWISE, **{op.record: [1, 2]})


def test_unparsable_source_gives_nothing() -> None:
    for op in all_operators():
        assert op.detect("def (") == [] and op.simplify("def (") is None and op.apply("def (") is None
