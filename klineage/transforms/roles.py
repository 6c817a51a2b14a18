"""Portable roles of tile constexprs (public API): what a kernel's own tile names mean, so that
parameters learned on one kernel transfer to another. The analysis lives in
``klineage.transforms.operators._roles`` (the tuning operators use it too); see there for the rules.
"""

from klineage.transforms.operators._roles import (
    META_PARAMS,
    ROLES,
    Role,
    kernel_roles,
    movable_params,
    partitioned_params,
    role_params,
    tile_roles,
)

__all__ = [
    "META_PARAMS",
    "ROLES",
    "Role",
    "kernel_roles",
    "movable_params",
    "partitioned_params",
    "role_params",
    "tile_roles",
]
