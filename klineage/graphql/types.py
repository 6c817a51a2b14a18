"""GraphQL object types: thin views over the schema records the knowledge base returns."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

import strawberry
from strawberry.scalars import JSON

from klineage.schema import lineage_records, records

if TYPE_CHECKING:
    from klineage.graphql.context import RequestContext


@strawberry.type(description="Distribution of measured speedups (optimized over simplified) across shapes.")
class Effect:
    min: float | None
    median: float | None
    max: float | None
    n: int

    @staticmethod
    def of(effect: records.Effect) -> Effect:
        return Effect(min=effect.min, median=effect.median, max=effect.max, n=effect.n)


@strawberry.type(description="Where a skill applies: a feature predicate and its human description.")
class Anchor:
    predicate: str
    description: str


@strawberry.type(description="A VALID_WHEN or PROFITABLE_WHEN condition in the condition language.")
class Condition:
    id: strawberry.ID
    expr: str
    kind: str
    source: str
    description: str
    accuracy: float | None
    support: int
    oos_accuracy: float | None = strawberry.field(
        description="Fraction of held-out shapes (or workloads) an induced rule predicts right.")
    majority: float | None = strawberry.field(
        description="Majority-class rate of the rule's evidence: what a rule must beat out of sample.")

    @staticmethod
    def of(c: records.Condition) -> Condition:
        return Condition(id=strawberry.ID(c.id), expr=c.expr, kind=c.kind, source=c.source,
                         description=c.description, accuracy=c.accuracy, support=c.support,
                         oos_accuracy=c.oos_accuracy, majority=c.majority)


@strawberry.type(description="What breaks when the skill's assumptions fail.")
class Risk:
    id: strawberry.ID
    kind: str
    description: str
    evidence: str

    @staticmethod
    def of(r: records.Risk) -> Risk:
        return Risk(id=strawberry.ID(r.id), kind=r.kind, description=r.description, evidence=r.evidence)


@strawberry.type(description="One measured lineage step behind a skill, with per-shape speedups.")
class Evidence:
    lineage_id: strawberry.ID
    step_id: strawberry.ID
    workload: str
    gpu: str
    speedups: JSON
    sample: bool = strawberry.field(description="True for test fixtures: sample data, not measured.")

    @staticmethod
    def of(e: records.Evidence) -> Evidence:
        return Evidence(lineage_id=strawberry.ID(e.lineage_id), step_id=strawberry.ID(e.step_id),
                        workload=e.workload, gpu=e.gpu, speedups=JSON([dict(s) for s in e.speedups]),
                        sample=e.sample)


@strawberry.type(description="Operators a lineage measured paying as one move, and the evidence.")
class Together:
    workload: str = strawberry.field(description="The lineage's workload.")
    steps: list[int] = strawberry.field(description="Its step indexes (walk order, expert to naive).")
    operators: list[str] = strawberry.field(description="The move's operators, the one that carries it first.")
    gain: float = strawberry.field(description="The product of the steps' measured gains.")
    kind: str = strawberry.field(description="'launch-configuration' (tiles, warps and stages as the expert's "
                                 "autotune config set) or 'pair' (a step that lost alone and paid with the next).")
    kernel_kind: list[str] = strawberry.field(description="Kernel-kind features true of the lineage's naive kernel.")
    description: str = strawberry.field(description="The move, its gain and where it was measured, in words.")

    @staticmethod
    def of(t: records.Together) -> Together:
        return Together(workload=t.workload, steps=list(t.steps), operators=list(t.operators), gain=t.gain,
                        kind=t.kind, kernel_kind=list(t.kernel_kind), description=t.describe())


@strawberry.type(description="A verified optimization: what to change, where, when it pays, what it did.")
class Skill:
    id: strawberry.ID
    name: str
    intent: str
    operator: str
    anchor: Anchor
    carrier: str
    transform: JSON
    effect: Effect
    support: int = strawberry.field(description="Number of accepted lineage steps behind this skill.")
    support_lineages: int
    architectures: list[str]
    workloads: list[str] = strawberry.field(description="The workloads whose lineages gave it evidence.")
    families: list[str] = strawberry.field(
        description="Their families (gemm, attention, row-reduction, ...): what kind of kernel it was learned on.")
    sample: bool = strawberry.field(description="True when every piece of evidence is a test fixture.")
    profitability: str = strawberry.field(
        description="When no PROFITABLE_WHEN rule was kept: what the timings showed "
                    "('paid on x of n measured shapes; no rule separates them'); empty otherwise.")
    applied: int = strawberry.field(default=0, description="Applications of it by agents on new code.")
    verified: int = strawberry.field(
        default=0, description="Trials: applications a gate result judged (failed, or passed and timed).")
    paid: int = strawberry.field(default=0, description="Verified applications that passed and ran faster.")
    field_effect: Effect | None = strawberry.field(
        default=None, description="Speedups of its verified, passing applications on new code.")
    usage: str = strawberry.field(default="", description="'applied N times by agents, paid M times'.")
    admitted: bool = strawberry.field(default=False, description="True once a verified trial on new code "
                                      "reproduced the direction of its lineage evidence (else a hypothesis).")
    admission: str = strawberry.field(default="", description="Admitted or hypothesis, and why.")
    together: list[Together] = strawberry.field(
        default_factory=list, description="Moves the lineages measured it paying in only with other operators.")

    @staticmethod
    def of(s: records.Skill) -> Skill:
        return Skill(id=strawberry.ID(s.id), name=s.name, intent=s.intent, operator=s.operator,
                     anchor=Anchor(predicate=s.anchor.predicate, description=s.anchor.description),
                     carrier=s.carrier, transform=JSON(dict(s.transform)), effect=Effect.of(s.effect),
                     support=s.support_steps, support_lineages=s.support_lineages,
                     architectures=list(s.architectures), workloads=list(s.workloads), families=list(s.families),
                     sample=s.sample, profitability=s.profitability,
                     applied=s.applied, verified=s.verified, paid=s.paid, field_effect=Effect.of(s.field_effect),
                     usage=s.usage(), admitted=s.admitted, admission=s.admission,
                     together=[Together.of(t) for t in s.together])

    @strawberry.field(description="Conditions under which the optimization is correct.")
    async def valid_when(self, info: strawberry.Info[RequestContext, None]) -> list[Condition]:
        return [Condition.of(c) for c in await info.context.loaders.valid_when.load(str(self.id))]

    @strawberry.field(description="Conditions under which the optimization paid on the measured shapes.")
    async def profitable_when(self, info: strawberry.Info[RequestContext, None]) -> list[Condition]:
        return [Condition.of(c) for c in await info.context.loaders.profitable_when.load(str(self.id))]

    @strawberry.field
    async def risks(self, info: strawberry.Info[RequestContext, None]) -> list[Risk]:
        return [Risk.of(r) for r in await info.context.loaders.risks.load(str(self.id))]

    @strawberry.field
    async def evidence(self, info: strawberry.Info[RequestContext, None]) -> list[Evidence]:
        return [Evidence.of(e) for e in await info.context.loaders.evidence.load(str(self.id))]

    @strawberry.field(description="Skills that could only be taken after this one.")
    async def enables(self, info: strawberry.Info[RequestContext, None]) -> list[Skill]:
        return [Skill.of(s) for s in await info.context.loaders.enables.load(str(self.id))]


@strawberry.enum(description="Whether a skill's anchor and VALID_WHEN conditions hold for the caller's code.")
class Applicability(Enum):
    APPLICABLE = "APPLICABLE"
    NOT_APPLICABLE = "NOT_APPLICABLE"
    UNKNOWN = "UNKNOWN"


@strawberry.type(description="Why a hit ranks where it does: conditions by outcome, and the evidence.")
class Explanation:
    passed: list[str]
    failed: list[str]
    unknown: list[str]
    evidence: list[Evidence]
    usage: str = strawberry.field(default="", description="How agents fared with the skill: "
                                  "'applied N times by agents, paid M times'.")
    why: str = strawberry.field(default="", description="The score explained: relevance x expected gain x "
                                "confidence, where each came from, and the hit's tier.")
    missing_features: list[str] = strawberry.field(default_factory=list, description="Features the "
                                                   "undecided conditions need and the context did not give "
                                                   "(`klineage features` lists them all).")


@strawberry.type(description="One search result.")
class SkillHit:
    skill: Skill
    score: float
    applicable: Applicability
    explanation: Explanation
    together: Together | None = strawberry.field(
        default=None, description="The move together with other operators whose gain this hit expects, when the "
                                  "kernel can take it whole (its first operator can be added): try it as one move.")


@strawberry.type(description="A page of skills; pass endCursor as `after` for the next page.")
class SkillPage:
    items: list[Skill]
    end_cursor: str | None
    has_next_page: bool


@strawberry.type(description="One gate-runner verdict on one kernel.")
class GateRun:
    id: strawberry.ID
    verdict: str
    gpu: str
    versions: JSON
    date: str
    gates: JSON

    @staticmethod
    def of(run: lineage_records.GateRun) -> GateRun:
        return GateRun(id=strawberry.ID(run.id), verdict=run.verdict, gpu=run.gpu, versions=JSON(dict(run.versions)),
                       date=run.date, gates=JSON([dict(g) for g in run.gates]))


@strawberry.type(description="A content-hashed kernel version with its static features.")
class Kernel:
    id: strawberry.ID
    sha: str
    source: str
    features: JSON
    summary: str

    @staticmethod
    def of(kernel: lineage_records.Kernel) -> Kernel:
        return Kernel(id=strawberry.ID(kernel.id), sha=kernel.sha, source=kernel.source,
                      features=JSON(dict(kernel.features)), summary=kernel.summary)

    @strawberry.field(description="Validator runs that admitted or rejected this kernel.")
    async def gate_runs(self, info: strawberry.Info[RequestContext, None]) -> list[GateRun]:
        return [GateRun.of(r) for r in await info.context.loaders.gate_runs.load(str(self.id))]


@strawberry.type(description="One simplification attempt in a backward walk.")
class Step:
    id: strawberry.ID
    index: int
    operator: str
    params: JSON
    diff: str
    accepted: bool
    gate: str | None = strawberry.field(description="The gate that rejected the step, if rejected.")
    reason: str
    timings: JSON
    sample: bool

    @staticmethod
    def of(step: lineage_records.Step) -> Step:
        return Step(id=strawberry.ID(step.id), index=step.index, operator=step.operator, params=JSON(dict(step.params)),
                    diff=step.diff, accepted=step.accepted, gate=step.gate, reason=step.reason,
                    timings=JSON([dict(t) for t in step.timings]), sample=step.sample)

    @strawberry.field(name="from", description="The more optimized kernel the step started from.")
    async def from_kernel(self, info: strawberry.Info[RequestContext, None]) -> Kernel | None:
        found = await info.context.loaders.step_from.load(str(self.id))
        return Kernel.of(found) if found is not None else None

    @strawberry.field(name="to", description="The simplified kernel (absent when none was produced).")
    async def to_kernel(self, info: strawberry.Info[RequestContext, None]) -> Kernel | None:
        found = await info.context.loaders.step_to.load(str(self.id))
        return Kernel.of(found) if found is not None else None

    @strawberry.field(description="The skill this step reverses into (accepted steps only).")
    async def skill(self, info: strawberry.Info[RequestContext, None]) -> Skill | None:
        found = await info.context.loaders.step_skill.load(str(self.id))
        return Skill.of(found[0]) if found else None


@strawberry.type(description="One backward walk of one expert kernel on one GPU.")
class Lineage:
    id: strawberry.ID
    workload: str
    gpu: str
    arch: str
    versions: JSON
    created: str
    policy: str
    sample: bool = strawberry.field(description="True for test fixtures: sample data, not measured.")
    start_sha: str
    steps: list[Step]

    @strawberry.field(description="Every kernel version of the walk, from the expert to the naive end.")
    def kernels(self) -> list[Kernel]:
        return list(self._kernels)

    _kernels: strawberry.Private[list[Kernel]]


@strawberry.type(description="A workload: an operation with its reference, shape grid and lineages.")
class Workload:
    id: strawberry.ID
    name: str
    family: str
    description: str


@strawberry.type(description="An agent's use of a skill on new code, with its outcome.")
class Application:
    id: strawberry.ID
    skill_id: strawberry.ID
    kernel_sha: str
    outcome: str
    speedup: float | None
    recorded_at: str
    verified: bool = strawberry.field(
        default=False, description="True when a gate result judged what the skill did: the kernel failed a gate, "
                                   "or passed with its speedup measured (a pass with nothing timed is not).")
    verdict: str | None = strawberry.field(default=None, description="That gate result's verdict.")
