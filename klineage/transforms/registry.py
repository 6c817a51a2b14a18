"""The operator registry: every operator of the library, by CATALOG id."""

from __future__ import annotations

from functools import cache

from klineage.transforms.operator import Operator

#: Operators whose values are the fields of one launch configuration (an autotune config: tiles, warps, stages,
#: register cap): measured together, and on an autotuned kernel the config list's business.
LAUNCH_CONFIGURATION = ("tile-size", "num-warps", "pipelining", "autotune", "register-cap")


@cache
def _operators() -> tuple[Operator, ...]:
    from klineage.transforms.operators import OPERATORS

    ids = [op.id for op in OPERATORS]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"duplicate operator ids: {sorted(ids)}")
    return tuple(OPERATORS)


def all_operators() -> tuple[Operator, ...]:
    """Every registered operator, in a fixed order."""
    return _operators()


def operator_ids() -> tuple[str, ...]:
    """Ids of every registered operator."""
    return tuple(op.id for op in _operators())


def get_operator(op_id: str) -> Operator:
    """The operator with CATALOG id ``op_id``; KeyError listing the known ids otherwise."""
    for op in _operators():
        if op.id == op_id:
            return op
    raise KeyError(f"unknown operator {op_id!r}; known operators: {', '.join(operator_ids())}")
