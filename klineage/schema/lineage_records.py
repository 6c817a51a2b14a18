"""Records of a backward walk (DESIGN.md, "Graph model"): ``Workload``, ``Architecture``, ``Kernel``,
``Lineage``, ``Step`` and ``GateRun``, as frozen dataclasses, and ``LineageDetail`` (a lineage with its
workload, starting kernel and steps), what the knowledge base returns for a lineage.

Like the skill records (``schema.records``) each converts to a generic ``Node`` with ``to_node()`` and
back with ``from_node()``; unlike them each carries its node ``id`` as a field, because a node read from
a store keeps the id it was written with (``lineage_to_batch`` derives them: ``workload_id``,
``kernel_id``, ``LineageDocument.id``, ``LineageDocument.step_id``, ``GateRun.of``). ``to_node`` writes
exactly the properties ``lineage_to_batch`` always wrote; ``from_node`` reads a node that lacks some of
them with the defaults below.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from klineage.schema.gate_result import GateResult
from klineage.schema.graph import Node
from klineage.schema.ids import canonical_json, content_id
from klineage.schema.records import architecture_id, kernel_id, workload_id


def step_speedups(step: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-shape speedups of the optimization a backward step removed: simplified time over optimized time."""
    return [
        {"shape": dict(t["shape"]), "dtype": t["dtype"], "speedup": t["to_ms"] / t["from_ms"],
         "optimized_ms": t["from_ms"], "simplified_ms": t["to_ms"], "vendor_ms": t.get("vendor_ms")}
        for t in step.get("timings", ())
    ]


def geomean_gain(speedups: Sequence[Mapping[str, Any]]) -> tuple[float | None, int]:
    """The geometric mean of a step's positive per-shape speedups (``step_speedups`` rows) and how many there
    were; (None, 0) when the step timed nothing."""
    values = [float(x["speedup"]) for x in speedups if x["speedup"] and x["speedup"] > 0]
    return (statistics.geometric_mean(values) if values else None), len(values)


@dataclass(frozen=True)
class Workload:
    """An operation with its reference and shape grid; ``roles`` maps dimension roles (when declared)."""

    id: str
    name: str
    family: str = ""
    description: str = ""
    roles: Mapping[str, Any] | None = None

    @staticmethod
    def named(name: str, family: str = "", description: str = "", roles: Mapping[str, Any] | None = None
              ) -> Workload:
        """The workload ``name`` with its id ``workload_id(name)``."""
        return Workload(workload_id(name), name, family, description, dict(roles) if roles else None)

    def to_node(self) -> Node:
        """Return the Workload node (``roles`` only when declared)."""
        return Node("Workload", self.id, {"name": self.name, "family": self.family, "description": self.description,
                                          **({"roles": dict(self.roles)} if self.roles else {})})

    @staticmethod
    def from_node(node: Node) -> Workload:
        """Read a Workload node."""
        p = node.props
        roles = p.get("roles")
        return Workload(node.id, str(p.get("name", "")), str(p.get("family", "")), str(p.get("description", "")),
                        dict(roles) if isinstance(roles, Mapping) else None)


@dataclass(frozen=True)
class Architecture:
    """A GPU architecture a lineage was walked on: ``arch`` (e.g. ``sm_90``), the GPU's name, its SM count."""

    id: str
    arch: str
    gpu: str = ""
    sm_count: int | None = None

    @staticmethod
    def of(arch: str, gpu: str = "", sm_count: int | None = None) -> Architecture:
        """The architecture ``arch`` with its id ``architecture_id(arch)``."""
        return Architecture(architecture_id(arch), arch, gpu, sm_count)

    def to_node(self) -> Node:
        """Return the Architecture node."""
        return Node("Architecture", self.id, {"arch": self.arch, "gpu": self.gpu, "sm_count": self.sm_count})

    @staticmethod
    def from_node(node: Node) -> Architecture:
        """Read an Architecture node."""
        p = node.props
        return Architecture(node.id, str(p.get("arch", "")), str(p.get("gpu", "")), p.get("sm_count"))


@dataclass(frozen=True)
class Kernel:
    """A content-hashed kernel version: its full SHA-256, source, static features and summary; ``name`` is
    its place in the lineage's chain (``schema.evolution.kernel_names``), empty when it has none."""

    id: str
    sha: str
    source: str = ""
    features: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
    sample: bool = False
    name: str = ""

    @staticmethod
    def of(sha: str, source: str, features: Mapping[str, Any] | None = None, summary: str = "",
           sample: bool = False, name: str = "") -> Kernel:
        """The kernel ``sha`` with its id ``kernel_id(sha)``."""
        return Kernel(kernel_id(sha), sha, source, dict(features or {}), summary, sample, name)

    def to_node(self) -> Node:
        """Return the Kernel node (``name`` only when it has one)."""
        return Node("Kernel", self.id, {"sha": self.sha, "source": self.source, "features": dict(self.features),
                                        "summary": self.summary, "sample": self.sample,
                                        **({"name": self.name} if self.name else {})})

    @staticmethod
    def from_node(node: Node) -> Kernel:
        """Read a Kernel node."""
        p = node.props
        return Kernel(node.id, str(p.get("sha", "")), str(p.get("source", "")), dict(p.get("features") or {}),
                      str(p.get("summary", "")), bool(p.get("sample", False)), str(p.get("name") or ""))


@dataclass(frozen=True)
class Lineage:
    """One backward walk of one expert kernel on one GPU: the workload's name, the GPU and its arch, the
    versions it ran under, when, the walk's policy, whether it is sample data and whether anything was
    timed (``measured``), the sha of the kernel it started at, and how many steps it tried and accepted."""

    id: str
    workload: str
    gpu: str = ""
    arch: str = ""
    versions: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""
    policy: str = ""
    sample: bool = False
    measured: bool = True
    start_sha: str = ""
    n_steps: int | None = None
    n_accepted: int | None = None

    def to_node(self) -> Node:
        """Return the Lineage node."""
        return Node("Lineage", self.id, {
            "workload": self.workload, "gpu": self.gpu, "arch": self.arch, "versions": dict(self.versions),
            "created": self.created, "policy": self.policy, "sample": self.sample, "measured": self.measured,
            "start_sha": self.start_sha, "n_steps": self.n_steps, "n_accepted": self.n_accepted})

    @staticmethod
    def from_node(node: Node) -> Lineage:
        """Read a Lineage node (``measured`` is True when the node does not say)."""
        p = node.props
        n_steps, n_accepted = p.get("n_steps"), p.get("n_accepted")
        return Lineage(node.id, str(p.get("workload", "")), str(p.get("gpu", "")), str(p.get("arch", "")),
                       dict(p.get("versions") or {}), str(p.get("created", "")), str(p.get("policy") or ""),
                       bool(p.get("sample", False)), p.get("measured", True) is not False,
                       str(p.get("start_sha", "")), int(n_steps) if n_steps is not None else None,
                       int(n_accepted) if n_accepted is not None else None)


@dataclass(frozen=True)
class Step:
    """One simplification attempt of a walk: its ``index``, the ``operator`` and its ``params``, the diff,
    whether it was accepted (else the ``gate`` that rejected it and why), its per-shape ``timings``, and
    whether it is sample data, was timed at all (``measured``) or was skipped."""

    id: str
    lineage_id: str
    index: int
    operator: str
    params: Mapping[str, Any] = field(default_factory=dict)
    diff: str = ""
    accepted: bool = False
    gate: str | None = None
    reason: str = ""
    timings: tuple[Mapping[str, Any], ...] = ()
    sample: bool = False
    measured: bool = True
    skipped: bool = False

    def speedups(self) -> list[dict[str, Any]]:
        """Per-shape speedups of the optimization this step removed (``step_speedups``)."""
        return step_speedups({"timings": self.timings})

    def to_dict(self) -> dict[str, Any]:
        """The step's properties, as its lineage document wrote them (the Step node's properties)."""
        return {"lineage_id": self.lineage_id, "index": self.index, "operator": self.operator,
                "params": dict(self.params), "diff": self.diff, "accepted": self.accepted, "gate": self.gate,
                "reason": self.reason, "timings": [dict(t) for t in self.timings], "sample": self.sample,
                "measured": self.measured, "skipped": self.skipped}

    def to_node(self) -> Node:
        """Return the Step node."""
        return Node("Step", self.id, self.to_dict())

    @staticmethod
    def from_node(node: Node) -> Step:
        """Read a Step node (``measured`` is True when the node does not say)."""
        p = node.props
        return Step(node.id, str(p.get("lineage_id") or ""), int(p.get("index") or 0), str(p.get("operator", "")),
                    dict(p.get("params") or {}), str(p.get("diff") or ""), bool(p.get("accepted", False)),
                    p.get("gate"), str(p.get("reason") or ""),
                    tuple(dict(t) for t in p.get("timings") or ()), bool(p.get("sample", False)),
                    p.get("measured", True) is not False, bool(p.get("skipped", False)))


@dataclass(frozen=True)
class GateRun:
    """One stored gate result (``schema.gate_result``) on one kernel; ``result()`` reads it back as a
    ``GateResult`` (its verdict recomputed from the gates)."""

    id: str
    kernel_sha: str
    verdict: str
    gpu: str = ""
    versions: Mapping[str, Any] = field(default_factory=dict)
    workload: str = ""
    date: str = ""
    gates: tuple[Mapping[str, Any], ...] = ()
    sample: bool = False

    @staticmethod
    def of(result: GateResult, sample: bool = False) -> GateRun:
        """The gate run of ``result``, with its content id (the same result is one gate run)."""
        doc = result.to_dict()
        return GateRun(content_id("GateRun", canonical_json(doc)), result.kernel_sha, result.verdict, result.gpu,
                       dict(result.versions), result.workload, result.date, tuple(doc["gates"]), sample)

    def result(self) -> GateResult:
        """The gate result document as a ``GateResult``."""
        return GateResult.from_dict(self.to_node().props)

    def to_node(self) -> Node:
        """Return the GateRun node: the gate result document and ``sample``."""
        return Node("GateRun", self.id, {
            "verdict": self.verdict, "kernel_sha": self.kernel_sha, "gpu": self.gpu, "versions": dict(self.versions),
            "workload": self.workload, "date": self.date, "gates": [dict(g) for g in self.gates],
            "sample": self.sample})

    @staticmethod
    def from_node(node: Node) -> GateRun:
        """Read a GateRun node."""
        p = node.props
        return GateRun(node.id, str(p.get("kernel_sha", "")), str(p.get("verdict", "")), str(p.get("gpu", "")),
                       dict(p.get("versions") or {}), str(p.get("workload", "")), str(p.get("date", "")),
                       tuple(dict(g) for g in p.get("gates") or ()), bool(p.get("sample", False)))


@dataclass(frozen=True)
class LineageDetail:
    """A lineage with its workload, starting kernel (None where the store lacks them) and its steps
    ordered by index."""

    lineage: Lineage
    workload: Workload | None
    start: Kernel | None
    steps: tuple[Step, ...]

    @property
    def id(self) -> str:
        """The lineage's id."""
        return self.lineage.id
