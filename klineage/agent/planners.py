"""Planners: what to try next on a kernel, given the knowledge (or the lack of it).

Every method runs in the same loop (``klineage.agent.loop``) with the same materializer, gates and
budget; only the planner differs:

* ``LineagePlanner`` (*klineage*): retrieve skills through ``KnowledgeBase.search`` (the function GraphQL
  and MCP call) with the kernel's facts; find the lineage nearest to the kernel (family, static
  features); start where the kernel already provides a step's optimization; propose the remaining
  steps in naive → expert order with the expert's values in role terms; launch-configuration steps
  (tiles, warps, stages, autotune) go together as one autotune config set, because they were measured
  together (a larger tile alone lost on the held-out matmuls), and once the kernel is autotuned none of them
  is offered alone (``CONFIG_VALUES``); a config set that sets none of the kernel's tiles is crossed with
  the kernel's own tile variants (``with_own_tiles``); skills whose VALID_WHEN fails are never proposed,
  and those whose PROFITABLE_WHEN fails or whose measured gain is within noise (``expects_no_gain``) go
  last. Operators no lineage used (so no skill yet) that apply to the kernel come, with their defaults,
  after the moves expected to pay and before those expected not to: what the knowledge base knows nothing
  about ranks above what it predicts will not pay. After everything, a re-tune of an autotuned kernel, then
  every other operator that materializes (``AFTER_THE_PLAN``): a call left unused is a call lost. Last, when
  the kernel's grid leaves most SMs idle on the timed shapes (``klineage.agent.census``), the moves whose
  candidates launch more programs go first and those that launch fewer go last.
* ``MemoryPlanner`` (*memory*, the AdaExplore / ReasoningBank style): the trajectories of the lineages
  nearest by embedding similarity of kernel and problem text only, replayed with the parameters the
  trajectory recorded (the operators' defaults where those do not fit), and their failure rules; no
  conditions, no anchors, no portable parameters.
* ``FixedOrderPlanner`` (*none*): every operator in the registry's order with ``apply``'s defaults.
* ``GreedyPlanner`` (*greedy*): the first round's loop, the knowledge base's applicable skills in search
  rank order with ``apply``'s defaults (the transfer issue's yardstick, run with a budget of 5).

A planner sees the history of attempts (``AgentState``) and re-plans after a failure: a move is never
proposed twice, an operator whose candidate failed correctness is not proposed again, and a
configuration set that failed to compile is retried once with its smaller half.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Protocol

from klineage.agent.census import Census, GridCensus, visible_sm_count
from klineage.agent.lineages import LineageStep, LineageSummary, load_lineages
from klineage.agent.moves import Move, MoveStep, apply_step, composite, fitting_step, materialize, single
from klineage.agent.parameters import MAX_CONFIGS, config_neighborhood, fit_to_grid, step_parameters
from klineage.agent.problem import Problem
from klineage.agent.state import AgentState
from klineage.kb.conditions import evaluate
from klineage.kb.features import FeatureError, manifest_roles
from klineage.kb.profitability import predict_profit
from klineage.kb.search import NOT_APPLICABLE, SkillHit
from klineage.kb.service import KnowledgeBase
from klineage.schema import pyast
from klineage.schema.kernel_features import kind_agreement
from klineage.schema.records import LAUNCH_CONFIGURATION_SET, NOISE_MARGIN, Together, pays_only_with_next
from klineage.transforms.facts import APPLICABLE, PRESENT, KernelFacts, kernel_facts
from klineage.transforms.features import kernel_features
from klineage.transforms.registry import LAUNCH_CONFIGURATION, get_operator, operator_ids
from klineage.transforms.roles import META_PARAMS

#: The launch-configuration operators that set one value (tile, warps, stages) on every config of an autotuned
#: kernel. After the config set they are never offered alone: measured on the H100 and H200 (2026-12-05/06),
#: each of the 4 tile-size moves the planner made after a gemm config set lost (0.60-0.87x of the kernel it
#: started from): one tile in every config throws away the list the set was chosen for. A re-tune changes the
#: list instead; the register cap, which adds a limit to each config, stays.
CONFIG_VALUES = frozenset(LAUNCH_CONFIGURATION) - {"autotune", "register-cap"}
#: The origin of the operators the klineage planner adds, as *none* would try them, after all it proposes.
AFTER_THE_PLAN = "fixed order, after the plan"


class Planner(Protocol):
    """Proposes moves, best first, for the current state."""

    name: str

    def plan(self, state: AgentState) -> list[Move]:
        """Moves to try, in order; the loop takes the first untried one that materializes."""
        ...


def _filter(state: AgentState, moves: Sequence[Move]) -> list[Move]:
    tried, broken = state.tried(), state.broken_operators()
    out, seen = [], set()
    for move in moves:
        key = move.key()
        if key in tried or key in seen or set(move.operators) & broken:
            continue
        seen.add(key)
        out.append(move)
    return out


def _smaller_configs(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The half of a config set with the smallest tiles × stages (what fits when the rest did not)."""
    def size(c: dict[str, Any]) -> float:
        tiles = math.prod(float(v) for k, v in c.items() if k.startswith("tile_") or k.startswith("block"))
        return tiles * float(c.get("num_stages", 2))
    ranked = sorted(configs, key=size)
    return ranked[: max(1, len(ranked) // 2)]


def _compile_retries(state: AgentState) -> list[Move]:
    """A config-set move that failed to compile, offered once more with its smaller half."""
    out = []
    for a in state.attempts:
        if a.failed_gate != "compile":
            continue
        for step in a.move.steps:
            configs = step.params.get("configs")
            if step.operator == "autotune" and configs and len(configs) > 1:
                smaller = MoveStep("autotune", {**step.params, "configs": _smaller_configs(list(configs))})
                steps = tuple(smaller if s is step else s for s in a.move.steps)
                out.append(Move(f"{a.move.label} (smaller configs)", steps, a.move.origin, a.move.expected_gain,
                                f"call {a.call} failed to compile ({a.reason[:80]}); the smaller half may fit"))
    return out


# ------------------------------------------------------------------------------------------ klineage


def search_hits(kb: KnowledgeBase, state: AgentState, facts: KernelFacts) -> list[SkillHit]:
    """The knowledge base's hits for this kernel and problem, best first, through ``KnowledgeBase.search``
    (the service function GraphQL and MCP call)."""
    # The kernel's features and anchors, not its summary: the text query is the problem's own, so one
    # embedding per problem serves every re-plan.
    return kb.search(text=state.problem.text(), context=state.problem.search_context(state.arch),
                     kernel_features=facts.features, operator_anchors=facts.operator_anchors, limit=100)


@lru_cache(maxsize=256)
def _features(source: str) -> dict[str, Any]:
    """``kernel_features`` of a source, computed once: every re-plan compares the same lineage ends."""
    return kernel_features(source)


def nearest_lineages(problem: Problem, source: str, lineages: Sequence[LineageSummary]) -> list[LineageSummary]:
    """Lineages ordered by closeness to the kernel: same family first, then agreement of the static
    features that say what kind of kernel it is (dot / K loop / row reduction / online softmax ...)
    between the kernel and each lineage's naive end."""
    mine = _features(source)

    def score(lin: LineageSummary) -> tuple[float, float, str]:
        family = 1.0 if lin.family == problem.family else 0.0
        theirs = _features(lin.naive_source) if lin.naive_source else {}
        return (family + kind_agreement(mine, theirs), len(lin.forward()), lin.workload)

    return sorted(lineages, key=score, reverse=True)


def expects_no_gain(gain: float | None) -> bool:
    """Whether a measured gain is no evidence that a move pays: a loss, or a gain within ``NOISE_MARGIN``.
    Such moves go after the operators the knowledge base knows nothing about (measured on the H100,
    2026-12-06: of 20 lineage steps the klineage planner made whose lineage gain was under 1.03, 2 gained
    more than 3 %; of 9 above it, 5 did)."""
    return gain is not None and gain < 1.0 + NOISE_MARGIN


def paying_pair(lineage: LineageSummary, pair: Sequence[tuple[LineageStep, Move]]) -> Move | None:
    """A step that lost alone in the lineage (by more than ``NOISE_MARGIN``), together with the step the
    expert took right after it, as one move, when the two gained together (``pays_only_with_next``, the rule
    that gives the knowledge base's ``Together`` pairs); None otherwise.

    The lineage measured the second step only with the first in place (the walk removes optimizations one
    at a time), so its gain is evidence for the pair, not for the second alone: gemm's grouped tile order
    lost 12 % alone and its contiguity hints gained 23 % on top of it."""
    if len(pair) != 2:
        return None
    (first, first_move), (second, second_move) = pair
    if second.index != first.index - 1 or not first.gain or not second.gain:
        return None  # only the next step of the walk was measured with the first in place
    if not pays_only_with_next(first.gain, second.gain):
        return None
    gain = first.gain * second.gain
    return composite(f"{first.operator} + {second.operator}", [*first_move.steps, *second_move.steps],
                     origin=f"lineage {lineage.workload} steps {first.index},{second.index}", expected_gain=gain,
                     why=f"{first.operator} lost alone in {lineage.workload}'s lineage ({first.gain:.2f}x); with "
                         f"{second.operator} after it the pair gained {gain:.2f}x")


def literal_configs(source: str) -> list[dict[str, Any]] | None:
    """The configurations of a kernel autotuned by one literal config list, by parameter name
    (``{"BLOCK_N": 64, "num_warps": 8}``); None when the source has no such kernel."""
    simplified = get_operator("autotune").simplify(source)
    kernels = (simplified.params.get("kernels") or {}) if simplified is not None else {}
    if len(kernels) != 1:
        return None
    configs: list[dict[str, Any]] = []
    for config in next(iter(kernels.values())).get("configs") or []:
        try:
            configs.append({name: pyast.literal_eval(value) for name, value in dict(config).items()})
        except (ValueError, SyntaxError):
            return None
    return configs


def retune_move(source: str) -> Move | None:
    """A re-tune of an autotuned kernel: autotune taken out (as the walker does) and put back with the
    neighbourhood of its own configurations (``config_neighborhood``). None when the kernel is not
    autotuned by one literal config list, or the neighbourhood adds nothing. Offered last: the autotuner
    already re-picks among today's configs after every change, so only new configs can pay."""
    configs = literal_configs(source)
    if not configs:
        return None
    around = config_neighborhood(configs)
    if all(c in configs for c in around):
        return None
    steps = [MoveStep("autotune", {}, action="simplify"), MoveStep("autotune", {"configs": around})]
    return composite("re-tune", steps,
                     origin="re-tune of the kernel's own configs",
                     why=f"{len(around)} configs around the {len(configs)} it has: the structure changed since "
                         "they were chosen")


def with_own_tiles(source: str, move: Move) -> Move:
    """A config-set move whose configurations set none of the kernel's tile sizes (the expert's tile roles
    have no counterpart here: an attention expert's key block on a decode kernel without ``tl.dot``), with
    each configuration crossed with the kernel's own tile variants, the ones ``autotune``'s defaults try
    (current, doubled, halved), at most ``MAX_CONFIGS``; the move itself otherwise. Without the tiles the
    set only moved warps and stages around the kernel's current tile (on the H100 decode_attention the
    expert set reached 0.27x vendor, the default autotune 0.32x)."""
    if len(move.steps) != 1 or move.steps[0].operator != "autotune" or not move.steps[0].params.get("configs"):
        return move
    step = move.steps[0]
    made = materialize(source, move)
    defaults = apply_step(source, MoveStep("autotune", {}))
    planned = literal_configs(made.source) if made is not None else None
    own = literal_configs(defaults) if defaults is not None else None
    if not planned or not own:
        return move
    tiles = [{n: v for n, v in c.items() if n not in META_PARAMS} for c in own]
    names = {n for t in tiles for n in t}
    if not names or any(n in names for c in planned for n in c):
        return move
    crossed: list[dict[str, Any]] = []
    for tile in tiles:
        for config in planned:  # as the kernel took them: expert configs that differ only in absent roles are one
            candidate = {**config, **tile}
            if candidate not in crossed and len(crossed) < MAX_CONFIGS:
                crossed.append(candidate)
    return composite(move.label, [MoveStep("autotune", {**step.params, "configs": crossed})], origin=move.origin,
                     expected_gain=move.expected_gain,
                     why=f"{move.why}; crossed with the kernel's own tile sizes ({', '.join(sorted(names))}), "
                         "which no expert configuration sets")


@dataclass
class LineagePlanner:
    """Plan along the nearest lineage with portable parameters (see the module docstring)."""

    kb: KnowledgeBase
    name: str = "klineage"
    #: Reorder by grid fill when the kernel underfills the GPU (``klineage.agent.census``).
    parallelism: bool = True
    #: The launch census to use (None: ``census_in_worker``, a worker process).
    census_run: Census | None = None
    _lineages: list[LineageSummary] | None = None
    _skilled: frozenset[str] | None = None
    _census: GridCensus | None = None

    def lineages(self) -> list[LineageSummary]:
        """The knowledge base's measured lineages (read once)."""
        if self._lineages is None:
            self._lineages = load_lineages(self.kb)
        return self._lineages

    def skilled_operators(self) -> frozenset[str]:
        """Operators the knowledge base holds a skill of (read once)."""
        if self._skilled is None:
            page = self.kb.skills(first=10_000)
            self._skilled = frozenset(s.operator for s in page.items)
        return self._skilled

    def hits(self, state: AgentState, facts: KernelFacts) -> dict[str, SkillHit]:
        """The search hit of each operator's skill for this kernel and problem (``search_hits``)."""
        return {h.skill.operator: h for h in search_hits(self.kb, state, facts)}

    def plan(self, state: AgentState) -> list[Move]:
        """Remaining lineage steps naive → expert, launch configuration first as one config set, then
        other applicable skills by score; unprofitable-predicted moves last."""
        facts = kernel_facts(state.source)
        hits = self.hits(state, facts)
        contexts = state.problem.grid_contexts(state.arch)
        ranked = nearest_lineages(state.problem, state.source, self.lineages())
        moves: list[Move] = []
        demoted: list[Move] = []
        for lineage in ranked[:2]:
            forward = lineage.forward()
            config_steps = [s for s in forward if s.operator in LAUNCH_CONFIGURATION]
            config = config_set_move(lineage, config_steps, facts, hits, state.problem)
            if config is not None:
                config = with_own_tiles(state.source, config)
                moves.append(config)
            candidates = [(step, step_move(lineage, step, facts, hits, state.source)) for step in forward
                          if not (step.operator in LAUNCH_CONFIGURATION and config is not None)]
            singles = [(step, move) for step, move in candidates if move is not None]
            for i, (step, move) in enumerate(singles):
                lost = expects_no_gain(move.expected_gain)
                pair = paying_pair(lineage, singles[i:i + 2]) if lost else None
                if pair is not None and not self._unprofitable(hits.get(step.operator), contexts):
                    moves.append(pair)
                (demoted if lost or self._unprofitable(hits.get(step.operator), contexts) else moves).append(move)
        in_lineage = {op for m in moves + demoted for op in m.operators}
        for op, hit in sorted(hits.items(), key=lambda kv: -kv[1].score):
            if op in in_lineage or hit.applicable == NOT_APPLICABLE or facts.state(op) != APPLICABLE:
                continue
            move = (together_move(hit.together, self.lineages(), state, facts, hits) if hit.together else None) or \
                single(op, origin="search", expected_gain=hit.expected_gain,
                       why=f"applicable skill outside the nearest lineage (score {hit.score:.3f})")
            (demoted if expects_no_gain(hit.expected_gain) or self._unprofitable(hit, contexts) else moves).append(move)
        demoted.sort(key=lambda m: -(m.expected_gain or 0.0))
        tuned = facts.state("autotune") == PRESENT
        retune = retune_move(state.source) if tuned else None
        # operators the knowledge base has no skill for yet (no lineage used them), as *none* would try them:
        # after what it expects to pay, before what it expects not to
        place = ("tried after the moves the knowledge base expects to pay" if moves else
                 "tried first: the knowledge base expects none of its moves to pay here")
        unknown = [single(op, origin="no skill yet", why=f"an operator no lineage used, applicable to this kernel: "
                          f"{place}")
                   for op in operator_ids()
                   if op not in self.skilled_operators() and facts.state(op) == APPLICABLE]
        planned = [*moves, *unknown, *demoted]
        # every other operator, as *none* would try it, after all the knowledge base proposes: a call left
        # unused is a call lost (on the H100 the plan ran out at call 6 of 10 on decode_attention), but not
        # an operator whose skill's VALID_WHEN fails here
        offered = {op for m in planned for op in m.operators}
        rest = [single(op, origin=AFTER_THE_PLAN, why="the knowledge base proposes nothing more")
                for op in operator_ids() if op not in offered and blocked(op, facts, hits) is None
                and apply_step(state.source, MoveStep(op, {})) is not None]
        planned = [*planned, *([retune] if retune else []), *rest]
        if tuned:  # its tiles, warps and stages are its config list's now: only a re-tune changes them
            planned = [m for m in planned if not set(m.operators) <= CONFIG_VALUES]
        planned = _filter(state, planned)
        census = self.census(state)
        if census is not None:
            planned = census.order(state.source, planned)
        return _filter(state, [*_compile_retries(state), *planned])

    def census(self, state: AgentState) -> GridCensus | None:
        """The launch census of the problem's timed shapes (made once per problem); None when
        ``parallelism`` is off."""
        if not self.parallelism:
            return None
        shapes = state.timed_shapes()
        census = self._census
        if census is None or census.reference != state.problem.manifest.reference_path or census.shapes != shapes:
            census = GridCensus(state.problem.manifest.reference_path, shapes, state.problem.manifest.dtypes[0],
                                visible_sm_count(), self.census_run)
            self._census = census
        return census

    def _unprofitable(self, hit: SkillHit | None, contexts: Sequence[dict[str, Any]]) -> bool:
        """True when the knowledge base predicts no gain from the skill's rules and trials
        (``predict_profit``: agents' verified trials on new code first, then PROFITABLE_WHEN on the grid's
        shapes, where a rule that cannot be evaluated does not vote); the lineage median alone never
        demotes a lineage step (the lineage order already carries it)."""
        if hit is None:
            return False
        rules = [c.expr for c in hit.checks if c.kind == "profitable" and c.value is not None]
        votes: list[bool | None] = []
        for ctx in contexts if rules else ():
            values = [evaluate(rule, ctx).value for rule in rules]
            votes.append(False if any(v is False for v in values)
                         else True if all(v is True for v in values) else None)
        prediction = predict_profit(hit.skill, votes)
        return prediction.source in ("trials", "rule") and prediction.pays is False


def blocked(op: str, facts: KernelFacts, hits: dict[str, SkillHit]) -> str | None:
    """Why ``op`` cannot be proposed on this kernel (None when it can)."""
    if facts.state(op) == PRESENT:
        return "already present"
    hit = hits.get(op)
    if hit is not None and any(c.kind == "valid" and c.value is False for c in hit.checks):
        return "VALID_WHEN fails"
    return None


def step_move(lineage: LineageSummary, step: LineageStep, facts: KernelFacts, hits: dict[str, SkillHit],
              source: str) -> Move | None:
    """The lineage step as a move on ``source``: with the expert's portable values, or the operator's
    defaults where those values do not fit this kernel (as the memory baseline does); None when the
    operator cannot be applied at all."""
    if blocked(step.operator, facts, hits) is not None:
        return None
    use, fits = fitting_step(source, step.operator, step_parameters(step))
    if not use.params and facts.state(step.operator) != APPLICABLE:
        return None
    gain = step.gain
    why = f"{lineage.workload}'s expert gained {gain:.2f}x from it" if gain else "lineage step"
    return single(step.operator, use.params, origin=f"lineage {lineage.workload} step {step.index}",
                  expected_gain=gain, why=why if fits else f"{why}; its values do not fit here: the defaults")


def config_set_move(lineage: LineageSummary, steps: list[LineageStep], facts: KernelFacts,
                    hits: dict[str, SkillHit], problem: Problem) -> Move | None:
    """The lineage's launch-configuration steps as one move: the expert's autotune config set in role
    terms when it has one (one call tries them all; with each config's tiles also clipped to the
    kernel's grid, ``fit_to_grid``), else its tiles / warps / stages together."""
    usable = [s for s in steps if blocked(s.operator, facts, hits) is None]
    if not usable:
        return None
    autotune = next((s for s in usable if s.operator == "autotune"), None)
    gain = math.prod(s.gain for s in usable if s.gain) if any(s.gain for s in usable) else None
    origin = f"lineage {lineage.workload} steps " + ",".join(str(s.index) for s in usable)
    if autotune is not None:
        params = step_parameters(autotune)
        if params.get("configs"):
            try:
                roles = manifest_roles(problem.manifest)
            except FeatureError:  # dims without roles: the expert's configs as they are
                roles = {}
            params = {**params, "configs": fit_to_grid(params["configs"], problem.manifest.shapes, roles)}
            return composite("launch config set", [MoveStep("autotune", params)], origin=origin,
                             expected_gain=gain,
                             why=f"{lineage.workload}'s expert configurations ({len(params['configs'])}) "
                                 "as one autotune set: tiles, warps and stages were measured together")
    parts = [MoveStep(s.operator, step_parameters(s)) for s in usable if s.operator != "autotune"]
    if len(parts) < 2:
        return None
    return composite("launch config", parts, origin=origin, expected_gain=gain,
                     why="tiles, warps and stages together: each alone was measured only with the others")


def together_move(together: Together, lineages: Sequence[LineageSummary], state: AgentState, facts: KernelFacts,
                  hits: dict[str, SkillHit]) -> Move | None:
    """A move of several operators the knowledge base offers (a search hit's ``together``) as one move on the
    kernel, with the lineage's portable values: a launch-configuration set as ``config_set_move`` makes it (its
    tiles crossed with the kernel's own where the expert's set none, ``with_own_tiles``), a pair as the two
    lineage steps. None when its lineage is not in the knowledge base or a step cannot be applied here."""
    lineage = next((lin for lin in lineages if lin.workload == together.workload), None)
    if lineage is None:
        return None
    by_index = {s.index: s for s in lineage.forward()}
    steps = sorted((by_index[i] for i in together.steps if i in by_index), key=lambda s: -s.index)
    if len(steps) != len(together.steps):
        return None
    if together.kind == LAUNCH_CONFIGURATION_SET:
        config = config_set_move(lineage, steps, facts, hits, state.problem)
        return with_own_tiles(state.source, config) if config is not None else None
    moves = [step_move(lineage, s, facts, hits, state.source) for s in steps]
    if any(m is None for m in moves):
        return None
    return composite(" + ".join(together.operators), [st for m in moves if m is not None for st in m.steps],
                     origin=f"lineage {together.workload} steps " + ",".join(str(s.index) for s in steps),
                     expected_gain=together.gain, why=together.describe())


# -------------------------------------------------------------------------------------------- memory


def memory_query(problem: Problem) -> str:
    """What the memory baseline embeds: the problem text and the starting kernel's summary (retrieval
    happens once per problem, as a trajectory memory is consulted once per task)."""
    from klineage.transforms.features import kernel_summary

    return f"{problem.text()} {kernel_summary(problem.source)}"


@dataclass
class MemoryPlanner:
    """Trajectories and failure rules by embedding similarity only (see the module docstring)."""

    kb: KnowledgeBase
    name: str = "memory"
    _lineages: list[LineageSummary] | None = None

    def ranked(self, state: AgentState) -> list[LineageSummary]:
        """Lineages by cosine similarity of their text to the problem text and kernel summary."""
        import numpy as np

        if self._lineages is None:
            self._lineages = load_lineages(self.kb)
        lineages = self._lineages
        if not lineages:
            return []
        query = np.asarray(self.kb.embedder.embed_query(memory_query(state.problem)))
        vectors = np.asarray(self.kb.embedder.embed([lin.text() for lin in lineages]))
        scores = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query) + 1e-12)
        return [lineages[i] for i in np.argsort(-scores, kind="stable")]

    def plan(self, state: AgentState) -> list[Move]:
        """The two most similar trajectories' steps, naive → expert, minus their failure rules."""
        ranked = self.ranked(state)[:2]
        forbidden = {s.operator for lin in ranked for s in lin.failures()}
        moves = []
        for lin in ranked:
            for step in lin.forward():
                if step.operator in forbidden:
                    continue
                use, fits = fitting_step(state.source, step.operator, step.params)
                moves.append(Move(step.operator, (use,), f"memory: {lin.workload} step {step.index}", step.gain,
                                  "recorded parameters" if fits else "recorded parameters do not fit; "
                                  "the operator's defaults"))
        return _filter(state, [*_compile_retries(state), *moves])


# -------------------------------------------------------------------------------------------- greedy


@dataclass
class GreedyPlanner:
    """The first round's loop, kept as the yardstick of the transfer work: the knowledge base's skills in
    search rank order, those the kernel can take (APPLICABLE by its facts, VALID_WHEN not failing), each
    with ``apply``'s defaults; no lineage order, no profitability demotion. What the search itself offers is
    taken: a hit whose expected gain is that of a move together with other operators (``SkillHit.together``:
    the expert's launch configuration as one config set, a pair) is tried as that move, with the lineage's
    portable values (``together_move``)."""

    kb: KnowledgeBase
    name: str = "greedy"
    _lineages: list[LineageSummary] | None = None

    def plan(self, state: AgentState) -> list[Move]:
        """Applicable skills by search score."""
        facts = kernel_facts(state.source)
        found = search_hits(self.kb, state, facts)
        hits = {h.skill.operator: h for h in found}
        moves = []
        for rank, hit in enumerate(found, start=1):
            op = hit.skill.operator
            if hit.applicable == NOT_APPLICABLE or facts.state(op) != APPLICABLE:
                continue
            if any(c.kind == "valid" and c.value is False for c in hit.checks):
                continue
            if hit.together is not None:
                if self._lineages is None:
                    self._lineages = load_lineages(self.kb)
                move = together_move(hit.together, self._lineages, state, facts, hits)
                if move is not None:
                    moves.append(replace(move, origin=f"search rank {rank}: {move.origin}"))
                    continue
            moves.append(single(op, origin=f"search rank {rank}", expected_gain=hit.expected_gain,
                                why=f"score {hit.score:.3f}"))
        return _filter(state, [*_compile_retries(state), *moves])


# ---------------------------------------------------------------------------------------------- none


@dataclass
class FixedOrderPlanner:
    """Every operator in the registry's order with ``apply``'s defaults."""

    name: str = "none"

    def plan(self, state: AgentState) -> list[Move]:
        """All operators, fixed order, default parameters."""
        return _filter(state, [single(op, origin="fixed order") for op in operator_ids()])


METHODS = ("klineage", "memory", "none", "greedy")


def make_planner(method: str, kb: KnowledgeBase | None) -> Planner:
    """The planner of ``method`` (one of ``METHODS``); ValueError for an unknown method or a method
    that needs a knowledge base when none is given."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(METHODS)}")
    if method == "none":
        return FixedOrderPlanner()
    if kb is None:
        raise ValueError(f"method {method!r} needs a knowledge base")
    planners: dict[str, type[LineagePlanner] | type[MemoryPlanner] | type[GreedyPlanner]] = {
        "klineage": LineagePlanner, "memory": MemoryPlanner, "greedy": GreedyPlanner}
    return planners[method](kb)
