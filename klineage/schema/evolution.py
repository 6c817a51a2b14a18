"""A lineage as a chain of kernels a person can follow: ``(:Kernel)-[:EVOLVES_TO]->(:Kernel)``.

A backward walk goes from the expert kernel to simpler ones; read forward, each accepted step is one
skill that turns the simpler kernel (the step's ``to``) into the more optimized one (its ``from``). So
the chain runs naive -> expert, one ``EVOLVES_TO`` per accepted step, with properties

* ``skill``: the step's operator (the skill's operator), ``step``: its index in the walk,
  ``lineage``: the lineage id, ``accepted``: True;
* ``speedup``: what the skill gained, the geometric mean over the measured shapes of
  simplified time / optimized time (3 decimals); absent when the step has no timings;
* ``label``: ``"<skill> ×<speedup>"``, the caption Neo4j Browser draws (deploy/neo4j/browser).

A rejected step is a dead end: the simplified kernel it produced failed a gate, so its ``EVOLVES_TO``
(``accepted``: False, ``gate``: the gate that failed, ``label``: ``"<skill> ✗ <gate>"``) hangs off
the chain as a branch that no further step continues. Missing values are absent, never None.

Kernels get a short ``name`` for the same reason, numbered along the chain: ``<workload> v0 naive``
(where the walk's accepted steps ended), ``<workload> v<i>`` after the i-th skill applied forward,
``<workload> v<n> expert`` (where the walk started), and ``<workload> ✗ <skill>`` for a dead end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from klineage.schema.graph import Relationship
from klineage.schema.records import kernel_id

SPEEDUP_DECIMALS = 3


def step_geomean_speedup(step: Mapping[str, Any]) -> float | None:
    """Geometric mean of ``to_ms / from_ms`` over a step's timings; None without usable timings."""
    ratios = [t["to_ms"] / t["from_ms"] for t in step.get("timings", ())
              if t.get("from_ms") and t.get("to_ms") and t["from_ms"] > 0 and t["to_ms"] > 0]
    if not ratios:
        return None
    return round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), SPEEDUP_DECIMALS)


def evolution_props(step: Mapping[str, Any], lineage_id: str) -> dict[str, Any]:
    """The properties of one step's ``EVOLVES_TO`` (None-free: a missing value is absent)."""
    props: dict[str, Any] = {"skill": step["operator"], "step": step["index"], "lineage": lineage_id,
                             "accepted": bool(step["accepted"])}
    speedup = step_geomean_speedup(step)
    if speedup is not None:
        props["speedup"] = speedup
    if step["accepted"]:
        props["label"] = f"{step['operator']} ×{speedup:.2f}" if speedup is not None else step["operator"]
    else:
        gate = step.get("gate") or "rejected"
        props["gate"] = gate
        props["label"] = f"{step['operator']} ✗ {gate}"
    return props


def evolution_relationships(data: Mapping[str, Any], lineage_id: str) -> list[Relationship]:
    """One ``EVOLVES_TO`` per step of a lineage document that produced a kernel: from the step's
    ``to`` kernel (simplified, or the rejected attempt) to its ``from`` kernel (optimized)."""
    return [Relationship("EVOLVES_TO", kernel_id(step["to"]), kernel_id(step["from"]),
                         evolution_props(step, lineage_id))
            for step in data["steps"] if step.get("to") is not None and step["to"] != step["from"]]


def kernel_names(data: Mapping[str, Any]) -> dict[str, str]:
    """A short name per kernel sha of a lineage document (see the module docstring)."""
    workload = data["workload"]["name"]
    names: dict[str, str] = {}
    for step in data["steps"]:
        if not step["accepted"] and step.get("to") is not None:
            names[step["to"]] = f"{workload} ✗ {step['operator']}"
    chain = [data["start"]] + [s["to"] for s in data["steps"] if s["accepted"] and s.get("to") is not None]
    n = len(chain) - 1
    for i, sha in enumerate(reversed(chain)):
        names[sha] = f"{workload} v{i}" + (" naive" if i == 0 and n else "") + (" expert" if i == n else "")
    return names
