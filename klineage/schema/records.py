"""Domain records of the graph model (DESIGN.md, "Graph model"), as frozen dataclasses.

Every record has a deterministic id (``ids.content_id``) and converts to a generic ``Node``
with ``to_node()``; ``from_node()`` reads it back. Stores only see ``Node``/``Relationship``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from klineage.schema.graph import Node
from klineage.schema.ids import content_id


def _tuple(values: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(values or ())


@dataclass(frozen=True)
class Effect:
    """Distribution of measured speedups (optimized over simplified) across shapes; n = 0 when unmeasured."""

    min: float | None = None
    median: float | None = None
    max: float | None = None
    n: int = 0

    @staticmethod
    def of(speedups: Sequence[float]) -> Effect:
        """Summarize a list of measured speedups; an empty list gives the unmeasured effect."""
        values = [float(s) for s in speedups]
        if not values:
            return Effect()
        return Effect(min(values), statistics.median(values), max(values), len(values))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"min", "median", "max", "n"}``."""
        return {"min": self.min, "median": self.median, "max": self.max, "n": self.n}

    @staticmethod
    def from_dict(data: Mapping[str, Any] | None) -> Effect:
        """Read an effect written by ``to_dict``."""
        data = data or {}
        return Effect(data.get("min"), data.get("median"), data.get("max"), int(data.get("n") or 0))


@dataclass(frozen=True)
class Anchor:
    """Where a skill applies: a feature predicate (condition language) and a human description."""

    predicate: str
    description: str


@dataclass(frozen=True)
class Condition:
    """A condition on a skill: ``kind`` is "valid" (VALID_WHEN) or "profitable" (PROFITABLE_WHEN).

    ``source`` says where it came from ("gate-failure", "induced", "declared"); ``accuracy`` is the
    fraction of evidence shapes an induced rule classifies right (None when not induced);
    ``oos_accuracy`` the fraction it predicts right out of sample (refitted without each held-out
    shape or workload) and ``majority`` the majority-class rate of its evidence, which a kept
    PROFITABLE_WHEN rule beats by a margin (None when not measured).
    """

    expr: str
    kind: str
    source: str = "declared"
    description: str = ""
    accuracy: float | None = None
    support: int = 0
    oos_accuracy: float | None = None
    majority: float | None = None

    @property
    def id(self) -> str:
        """Deterministic id from the expression and kind."""
        return content_id("Condition", self.kind, self.expr)

    def to_node(self) -> Node:
        """Return the Condition node."""
        return Node("Condition", self.id, {
            "expr": self.expr, "kind": self.kind, "source": self.source,
            "description": self.description, "accuracy": self.accuracy, "support": self.support,
            "oos_accuracy": self.oos_accuracy, "majority": self.majority,
        })

    @staticmethod
    def from_node(node: Node) -> Condition:
        """Read a Condition node."""
        p = node.props
        return Condition(p["expr"], p["kind"], p.get("source", "declared"), p.get("description", ""),
                         p.get("accuracy"), int(p.get("support") or 0), p.get("oos_accuracy"), p.get("majority"))


@dataclass(frozen=True)
class Risk:
    """What breaks when a skill's assumptions fail: ``kind`` (e.g. "out-of-resources",
    "wrong-results", "regression") and the evidence that showed it."""

    kind: str
    description: str
    evidence: str = ""

    @property
    def id(self) -> str:
        """Deterministic id from kind and description."""
        return content_id("Risk", self.kind, self.description)

    def to_node(self) -> Node:
        """Return the Risk node."""
        return Node("Risk", self.id, {"kind": self.kind, "description": self.description,
                                      "evidence": self.evidence})

    @staticmethod
    def from_node(node: Node) -> Risk:
        """Read a Risk node."""
        p = node.props
        return Risk(p["kind"], p["description"], p.get("evidence", ""))


#: What a workload family is called in a user's words: the vocabulary a skill's embedded text gains from the
#: families it was learned on (a family not listed is said by its own name).
FAMILY_WORDS: dict[str, str] = {
    "gemm": "matrix multiplication, matmul, GEMM, linear layer, tl.dot",
    "attention": "attention, flash attention, softmax of Q K^T times V",
    "row-reduction": "row-wise reductions: softmax, layer norm, RMSNorm, cross-entropy over rows",
    "reduction": "reductions: sums, means, max over an axis",
    "elementwise": "elementwise operations, activations",
    "scan": "prefix scans, cumulative sums",
}


#: A measured gain counts as a gain, and a loss as a loss, only beyond this (3 %: the lineages' timing noise is
#: about 1 %).
NOISE_MARGIN = 0.03
#: ``Together.kind``: the lineage's launch-configuration steps (tiles, warps, stages) carried by its autotune
#: config set, and a step that lost alone but gained with the expert's next step.
LAUNCH_CONFIGURATION_SET = "launch-configuration"
PAYING_PAIR = "pair"


def pays_only_with_next(first_gain: float, second_gain: float) -> bool:
    """Whether a lineage step that gained ``first_gain`` and the expert's next step (measured only with the first
    in place, ``second_gain``) are evidence for one move: the first lost alone beyond ``NOISE_MARGIN`` and the two
    together gained beyond it."""
    return first_gain <= 1.0 - NOISE_MARGIN and first_gain * second_gain >= 1.0 + NOISE_MARGIN


@dataclass(frozen=True, order=True)
class Together:
    """Operators a lineage measured paying as one move, and the evidence: the lineage's workload, its step
    indexes (walk order) and the product of their gains.

    ``kind`` is ``LAUNCH_CONFIGURATION_SET`` (the expert's autotune config set carries tiles, warps and stages:
    each of those steps was measured only with the others in place, and a larger tile alone lost on new GEMMs)
    or ``PAYING_PAIR`` (the first operator lost alone, ``pays_only_with_next``). ``kernel_kind``: the kernel-kind
    features (``kernel_features.KERNEL_KIND``) true of the kernel the lineage starts from, so that a search
    offers a kernel the move of the lineage most like it."""

    workload: str
    steps: tuple[int, ...]
    operators: tuple[str, ...]
    gain: float
    kind: str
    kernel_kind: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: the move, its gain and where it was measured."""
        steps = ",".join(str(i) for i in self.steps)
        why = ("tiles, warps and stages as the expert's autotune config set" if self.kind == LAUNCH_CONFIGURATION_SET
               else f"{self.operators[0]} lost alone, with {self.operators[-1]} after it the pair gained")
        return f"{' + '.join(self.operators)}: {self.gain:.3g}× in {self.workload}'s lineage (steps {steps}; {why})"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (a lineage document's skill entry and the Skill node hold it)."""
        return {"workload": self.workload, "steps": list(self.steps), "operators": list(self.operators),
                "gain": self.gain, "kind": self.kind, "kernel_kind": list(self.kernel_kind)}

    def view(self) -> dict[str, Any]:
        """The JSON form with GraphQL's field names and ``description`` (what the CLI's and MCP's JSON show)."""
        plain = self.to_dict()
        kind = plain.pop("kernel_kind")
        return {**plain, "kernelKind": kind, "description": self.describe()}

    @staticmethod
    def from_dict(data: Mapping[str, Any], workload: str | None = None) -> Together:
        """Read ``to_dict``'s form; ``workload`` fills it in where the entry omits it (a lineage document's
        entries are its own workload's)."""
        return Together(str(data.get("workload") or workload or ""), tuple(int(i) for i in data["steps"]),
                        tuple(str(o) for o in data["operators"]), float(data["gain"]), str(data["kind"]),
                        tuple(str(f) for f in data.get("kernel_kind") or ()))


def skill_id(operator: str) -> str:
    """Skills that reverse the same operator merge into one: the id depends on the operator only."""
    return content_id("Skill", operator)


@dataclass(frozen=True)
class Skill:
    """A verified optimization: what to change, where, when it is valid and profitable, what it did.

    ``profitability``: when no PROFITABLE_WHEN rule was kept, what the timings say in words ("paid on
    5 of 9 measured shapes; no rule separates them"); empty otherwise.

    The feedback loop: ``applied`` counts agents' applications of it on new code, ``verified`` those a
    gate result judged (failed a gate, or passed and timed: ``Application.verified``), ``paid`` the
    verified ones that passed and ran faster (speedup >= ``PAID``), and
    ``field_effect`` the speedup distribution of the verified, passing ones (unverified claims never
    move it)."""

    operator: str
    name: str
    intent: str
    anchor: Anchor
    carrier: str
    transform: Mapping[str, Any]
    effect: Effect = field(default_factory=Effect)
    support_steps: int = 0
    support_lineages: int = 0
    architectures: tuple[str, ...] = ()
    #: the workloads whose lineages gave it evidence, and their families (``gemm``, ``row-reduction``, ...)
    workloads: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    embedding: tuple[float, ...] = ()
    sample: bool = False
    profitability: str = ""
    applied: int = 0
    verified: int = 0
    paid: int = 0
    field_effect: Effect = field(default_factory=Effect)
    #: moves the lineages measured this skill paying in only together with other operators (``Together``)
    together: tuple[Together, ...] = ()

    @property
    def id(self) -> str:
        """Deterministic id (see ``skill_id``)."""
        return skill_id(self.operator)

    def usage(self) -> str:
        """How agents fared with it: "applied N times by agents, paid M times (V verified by the gates)"."""
        if not self.applied:
            return "not applied by agents yet"
        return f"applied {self.applied} times by agents, paid {self.paid} times ({self.verified} verified by the gates)"

    @property
    def admitted(self) -> bool:
        """Admitted (issue 19's admission): a verified trial by an agent on new code — a kernel no lineage
        was walked on — passed every gate and went the way the skill's measured effect goes: at least
        ``PAID`` times faster for a skill whose median lineage effect is a gain, a pass that did not pay for
        one whose median is a loss. Until then the skill is a hypothesis."""
        if self.effect.median is None:
            return False
        if self.effect.median >= 1.0:
            return self.paid > 0
        return self.field_effect.n > self.paid

    @property
    def admission(self) -> str:
        """One line: admitted or hypothesis, and why (a field of the same name on the client's Skill)."""
        if self.admitted:
            if self.effect.median is not None and self.effect.median >= 1.0:
                return (f"admitted: {self.paid} verified trial(s) on new code paid (≥ {PAID:g}×), as its lineage "
                        f"evidence (median {self.effect.median:.2f}×) says")
            return "admitted: verified trials on new code passed without paying, as its lineage evidence says"
        if not self.verified:
            if self.applied:
                return (f"hypothesis: no timed trial on new code yet ({self.applied} application(s) by agents, "
                        "none judged for speed)")
            return "hypothesis: no agent has tried it on new code under the gates yet"
        return (f"hypothesis: {self.verified} verified trial(s) on new code, none reproduced the direction of its "
                "lineage evidence")

    def embedding_text(self) -> str:
        """The text embedded for vector search: name, intent, anchor and carrier, and the kernels it was learned
        on in the words a user asks with ("faster matmul" must find the skills a GEMM lineage gave)."""
        text = f"{self.name}. {self.intent} Applies to: {self.anchor.description}. Changes: {self.carrier}."
        if self.workloads or self.families:
            words = [FAMILY_WORDS.get(f, f) for f in self.families]
            text += f" Learned on {', '.join(self.workloads)} kernels ({'; '.join(words)})."
        return text

    def to_node(self) -> Node:
        """Return the Skill node (embedding included when present)."""
        return Node("Skill", self.id, {
            "operator": self.operator, "name": self.name, "intent": self.intent,
            "anchor_predicate": self.anchor.predicate, "anchor_text": self.anchor.description,
            "carrier": self.carrier, "transform": dict(self.transform), "effect": self.effect.to_dict(),
            "support_steps": self.support_steps, "support_lineages": self.support_lineages,
            "architectures": list(self.architectures), "workloads": list(self.workloads),
            "families": list(self.families), "embedding": list(self.embedding),
            "sample": self.sample, "profitability": self.profitability,
            **({"together": [t.to_dict() for t in self.together]} if self.together else {}),
            **({"applied": self.applied, "verified": self.verified, "paid": self.paid,
                "field_effect": self.field_effect.to_dict()} if self.applied else {}),
        })

    @staticmethod
    def from_node(node: Node) -> Skill:
        """Read a Skill node."""
        p = node.props
        return Skill(
            operator=p["operator"], name=p["name"], intent=p["intent"],
            anchor=Anchor(p.get("anchor_predicate", ""), p.get("anchor_text", "")),
            carrier=p.get("carrier", ""), transform=dict(p.get("transform") or {}),
            effect=Effect.from_dict(p.get("effect")), support_steps=int(p.get("support_steps") or 0),
            support_lineages=int(p.get("support_lineages") or 0),
            architectures=_tuple(p.get("architectures")), workloads=_tuple(p.get("workloads")),
            families=_tuple(p.get("families")), embedding=_tuple(p.get("embedding")),
            sample=bool(p.get("sample", False)), profitability=str(p.get("profitability") or ""),
            applied=int(p.get("applied") or 0), verified=int(p.get("verified") or 0), paid=int(p.get("paid") or 0),
            field_effect=Effect.from_dict(p.get("field_effect")),
            together=tuple(Together.from_dict(t) for t in p.get("together") or ()),
        )


@dataclass(frozen=True)
class Evidence:
    """One measured step behind a skill: which lineage and step, and the per-shape speedups."""

    lineage_id: str
    step_id: str
    workload: str
    gpu: str
    speedups: tuple[Mapping[str, Any], ...] = ()  # each {"shape": {...}, "dtype": str, "speedup": float}
    sample: bool = False


#: A verified application "paid" when the kernel passed every gate and ran at least this much faster.
PAID = 1.03


@dataclass(frozen=True)
class Application:
    """An agent's use of a skill on new code, with its outcome.

    ``gate_run_id`` names the GateRun that judged the kernel (empty: an unverified claim) and
    ``verdict`` is that gate result's verdict; ``context`` holds the problem features of the shape it
    was measured on (what re-induction of the skill's conditions learns from), when the agent gave them."""

    skill_id: str
    kernel_sha: str
    outcome: str
    speedup: float | None = None
    recorded_at: str = ""
    gate_run_id: str = ""
    verdict: str = ""
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        """True when a gate result judged what the skill did: the kernel failed a gate, or it passed and its
        speedup was measured. A pass with nothing timed (the Triton interpreter, no GPU) judged correctness
        only: it is no trial of the skill's profit, so it never counts against it (nor for it)."""
        return bool(self.gate_run_id) and (self.verdict != "pass" or self.speedup is not None)

    @property
    def paid(self) -> bool:
        """True when verified, passing, and at least ``PAID`` times faster than the kernel it was applied to."""
        return self.verified and self.verdict == "pass" and self.speedup is not None and self.speedup >= PAID

    @property
    def id(self) -> str:
        """Deterministic id: the same skill, kernel, outcome and time is one application."""
        return content_id("Application", self.skill_id, self.kernel_sha, self.outcome, self.speedup,
                          self.recorded_at)

    def to_node(self) -> Node:
        """Return the Application node."""
        return Node("Application", self.id, {
            "skill_id": self.skill_id, "kernel_sha": self.kernel_sha, "outcome": self.outcome,
            "speedup": self.speedup, "recorded_at": self.recorded_at, "gate_run_id": self.gate_run_id,
            "verdict": self.verdict, "context": dict(self.context),
        })

    @staticmethod
    def from_node(node: Node) -> Application:
        """Read an Application node."""
        p = node.props
        return Application(str(p.get("skill_id", "")), str(p.get("kernel_sha", "")), str(p.get("outcome", "")),
                           p.get("speedup"), str(p.get("recorded_at", "")), str(p.get("gate_run_id") or ""),
                           str(p.get("verdict") or ""), dict(p.get("context") or {}))


def architecture_id(arch: str) -> str:
    """Id of an Architecture node, e.g. ``architecture:sm_90`` (readable, and stable)."""
    return f"architecture:{arch}"


def workload_id(name: str) -> str:
    """Id of a Workload node: ``workload:<name>``."""
    return f"workload:{name}"


def kernel_id(sha: str) -> str:
    """Id of a Kernel node: ``kernel:<first 16 hex of its sha>``."""
    return f"kernel:{sha[:16]}"
