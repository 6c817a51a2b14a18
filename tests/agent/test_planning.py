"""Planning on the real lineages: nearest lineage, entry point, launch configuration as one move."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klineage.agent import load_problem, make_planner
from klineage.agent.lineages import load_lineages
from klineage.agent.moves import UNDER_AUTOTUNE, MoveStep, apply_step, composite, materialize
from klineage.agent.parameters import step_parameters
from klineage.agent.planners import AFTER_THE_PLAN, CONFIG_VALUES, LineagePlanner, nearest_lineages, retune_move
from klineage.agent.state import AgentState
from klineage.kb.service import KnowledgeBase
from klineage.transforms.registry import LAUNCH_CONFIGURATION, get_operator

ROOT = Path(__file__).resolve().parents[2]
ROW_ONLY = {"single-pass-row", "multi-row", "online-softmax", "row-persistent"}
DOT_ONLY = {"tile-size", "grouped-order", "dot-accumulate", "persistent", "causal-skip"}

pytestmark = pytest.mark.real("embedder")


def _plan(kb: KnowledgeBase, name: str, source: str | None = None, parallelism: bool = False) -> list:
    """The klineage plan; the lineage order alone unless ``parallelism`` (the grid-fill reorder, tested in
    test_census.py, needs a census worker per kernel)."""
    problem = load_problem(None, ROOT / "heldout" / name)
    return LineagePlanner(kb, parallelism=parallelism).plan(AgentState(problem, source or problem.source))


def test_every_measured_lineage_reads_forward_from_naive_to_expert(kb: KnowledgeBase) -> None:
    lineages = {lin.workload: lin for lin in load_lineages(kb)}
    assert set(lineages) == {"gemm", "attention", "softmax", "layernorm", "cross_entropy"}
    for lin in lineages.values():
        forward = lin.forward()
        assert forward and all(s.accepted for s in forward)
        assert [s.index for s in forward] == sorted((s.index for s in forward), reverse=True)
        assert lin.naive_source and all(s.expert_source and s.simplified_source for s in forward)


@pytest.mark.parametrize(("name", "family"), [("bmm", "gemm"), ("rmsnorm", "row-reduction"),
                                              ("alibi_attention", "attention")])
def test_the_nearest_lineage_is_of_the_kernels_family(kb: KnowledgeBase, name: str, family: str) -> None:
    problem = load_problem(None, ROOT / "heldout" / name)
    nearest = nearest_lineages(problem, problem.source, load_lineages(kb))
    assert nearest[0].family == family


def test_a_matmul_gets_its_launch_configuration_as_one_move_first(kb: KnowledgeBase) -> None:
    moves = _plan(kb, "bmm")
    assert moves, "no move for a naive batched matmul"
    first = moves[0]
    assert set(first.operators) <= set(LAUNCH_CONFIGURATION) and "gemm" in first.origin
    assert len(first.steps) >= 2 or first.operators == ("autotune",)
    planned = {op for m in moves for op in m.operators}
    assert not planned & ROW_ONLY, planned


def test_a_row_kernel_gets_no_matmul_skill(kb: KnowledgeBase) -> None:
    planned = {op for m in _plan(kb, "rmsnorm") for op in m.operators}
    assert planned and not planned & DOT_ONLY, planned


def test_the_plan_starts_where_the_kernel_already_is(kb: KnowledgeBase) -> None:
    problem = load_problem(None, ROOT / "heldout" / "rmsnorm")
    before = {op for m in _plan(kb, "rmsnorm") for op in m.operators}
    assert "num-warps" in before
    with_warps = get_operator("num-warps").apply(problem.source, num_warps=8)
    assert with_warps is not None
    after = {op for m in _plan(kb, "rmsnorm", with_warps.source) for op in m.operators}
    assert "num-warps" not in after


def test_every_method_has_a_planner(kb: KnowledgeBase) -> None:
    for method in ("klineage", "memory", "none", "greedy"):
        assert make_planner(method, kb).name == method
    with pytest.raises(ValueError, match="expected one of"):
        make_planner("random", kb)
    with pytest.raises(ValueError, match="needs a knowledge base"):
        make_planner("memory", None)


def test_the_gemm_experts_configurations_reach_a_naive_matmul_in_role_terms(kb: KnowledgeBase,
                                                                          cpu_validator: Any) -> None:
    from klineage.agent.moves import materialize
    from klineage.transforms.roles import tile_roles

    problem = load_problem(None, ROOT / "heldout" / "bmm")
    first = _plan(kb, "bmm")[0]
    configs = first.steps[0].params["configs"]
    assert {"tile_m": 128, "tile_n": 256, "tile_k": 64, "group_size_m": 8, "num_stages": 3,
            "num_warps": 8} in configs
    made = materialize(problem.source, first)
    assert made is not None
    roles = tile_roles(made.source)["bmm_kernel"]
    assert {roles[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")} == {"tile_m", "tile_n", "tile_k"}
    assert "META['BLOCK_M']" in made.source  # the grid follows the tuned tile
    result = cpu_validator(seeds=1).validate(made.source, problem.manifest.directory,
                                             gates=("static", "compile", "correctness"))
    assert result.verdict == "pass", [g.reason for g in result.gates if g.status == "fail"]


def test_greedy_proposes_only_skills_the_kernel_can_take_in_search_rank_order(kb: KnowledgeBase) -> None:
    from klineage.agent.planners import search_hits
    from klineage.transforms.facts import APPLICABLE, kernel_facts

    problem = load_problem(None, ROOT / "heldout" / "rmsnorm")
    state = AgentState(problem, problem.source)
    moves = make_planner("greedy", kb).plan(state)
    assert moves and all(len(m.steps) == 1 and not m.steps[0].params for m in moves)
    planned = [m.operators[0] for m in moves]
    assert not set(planned) & DOT_ONLY, planned
    facts = kernel_facts(problem.source)
    assert all(facts.state(op) == APPLICABLE for op in planned)
    ranked = [h.skill.operator for h in search_hits(kb, state, facts)]
    assert planned == [op for op in ranked if op in planned]


def test_greedy_takes_the_launch_configuration_the_search_offers_as_one_move(kb: KnowledgeBase) -> None:
    """On a naive matmul the search's first hit expects the gain of the expert's launch configuration as one
    move; the greedy loop tries that move (the expert's configs in role terms, one autotune call) instead of a
    bare tile or pipelining change with apply's defaults (H100, 2026-12-07: its first calls on matmul_tn
    were pipelining 0.084x and int64-offsets 0.083x; tile-size reached 0.18x at call 5)."""
    problem = load_problem(None, ROOT / "heldout" / "matmul_tn")
    moves = make_planner("greedy", kb).plan(AgentState(problem, problem.source))
    first = moves[0]
    assert first.operators == ("autotune",) and "gemm" in first.origin and first.origin.startswith("search rank 1")
    configs = first.steps[0].params["configs"]
    assert len(configs) >= 2 and all({"num_warps", "num_stages"} <= set(c) for c in configs)
    assert materialize(problem.source, first) is not None
    later = [m for m in moves[1:] if set(m.operators) & {"tile-size", "pipelining", "num-warps"}]
    assert not later or all(m.key() != first.key() for m in later)


def test_expert_tiles_are_also_offered_clipped_to_the_kernels_grid() -> None:
    from klineage.agent.parameters import MAX_CONFIGS, fit_to_grid

    expert = [{"tile_m": 128, "tile_n": 256, "tile_k": 64, "num_stages": 3, "num_warps": 8},
              {"tile_m": 64, "tile_n": 64, "tile_k": 32, "num_stages": 4, "num_warps": 4}]
    roles = {"B": "batch", "M": "rows", "N": "cols", "K": "reduce"}
    grid = [{"B": 256, "M": 128, "N": 128, "K": 128}, {"B": 8, "M": 2048, "N": 2048, "K": 2048},
            {"B": 4, "M": 48, "N": 40, "K": 8}]
    fitted = fit_to_grid(expert, grid, roles)
    assert fitted[:2] == expert  # the expert's own first, unchanged
    assert {"tile_m": 128, "tile_n": 128, "tile_k": 64, "num_stages": 3, "num_warps": 8} in fitted
    # never below 16 (tl.dot), warps cut to 4 on a 64x64 output tile
    assert {"tile_m": 64, "tile_n": 64, "tile_k": 16, "num_stages": 3, "num_warps": 4} in fitted
    assert len(fitted) == len({tuple(sorted(c.items())) for c in fitted}) <= MAX_CONFIGS
    assert fit_to_grid(expert, grid, {}) == expert  # no roles: nothing to clip against


def test_a_batched_matmul_gets_the_experts_configs_fitted_to_its_small_matrices(kb: KnowledgeBase) -> None:
    config = next(m for m in _plan(kb, "bmm") if m.label == "launch config set")
    configs = config.steps[0].params["configs"]
    first = configs[0]
    assert first["tile_n"] > 128  # the gemm expert's own first config, tuned on large matrices
    assert {**first, "tile_m": min(first["tile_m"], 128), "tile_n": 128, "tile_k": min(first["tile_k"], 128)} \
        in configs, configs  # and the same one fitted to bmm's 128 x 128 x 128 batch elements


def test_a_step_that_lost_alone_is_offered_with_the_step_that_paid_after_it(kb: KnowledgeBase) -> None:
    gemm = next(lin for lin in load_lineages(kb) if lin.workload == "gemm")
    steps = {s.operator: s for s in gemm.forward()}
    first, second = steps["grouped-order"], steps["contiguity-hints"]
    assert first.gain < 0.97 and first.gain * second.gain > 1.03 and second.index == first.index - 1
    pair = next(m for m in _plan(kb, "bmm") if m.label == "grouped-order + contiguity-hints")
    assert pair.operators == ("grouped-order", "contiguity-hints")
    assert pair.expected_gain == pytest.approx(first.gain * second.gain)
    # steps that are not consecutive in the walk, or a loss within noise, make no pair
    assert not any(" + " in m.label for m in _plan(kb, "rmsnorm")), [m.label for m in _plan(kb, "rmsnorm")]


def test_an_autotuned_kernel_is_offered_a_retune_around_its_own_configs_last(kb: KnowledgeBase) -> None:
    configs = [{"tile_m": 128, "tile_n": 128, "tile_k": 64, "num_warps": 8, "num_stages": 3},
               {"tile_m": 64, "tile_n": 128, "tile_k": 32, "num_warps": 4, "num_stages": 4}]
    source = (ROOT / "heldout" / "bmm" / "naive.py").read_text()
    tuned = get_operator("autotune").apply(source, configs=configs)
    assert tuned is not None
    moves = [m for m in _plan(kb, "bmm", tuned.source) if m.origin not in ("no skill yet", AFTER_THE_PLAN)]
    assert moves[-1].label == "re-tune"  # the last of what the knowledge base proposes
    simplify, apply = moves[-1].steps
    assert (simplify.operator, simplify.action, apply.operator, apply.action) == (
        "autotune", "simplify", "autotune", "apply")
    around = apply.params["configs"]
    own = [{"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
           {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 4}]
    assert around[:2] == own and len(around) > 2
    assert {c["num_stages"] for c in around} == {2, 3, 4, 5}
    made = materialize(tuned.source, moves[-1])
    assert made is not None and [s.action for s in made.applied] == ["simplify", "apply"]
    assert made.source.count("triton.Config(") == len(around)
    assert retune_move(source) is None  # not autotuned: nothing to re-tune


def test_a_simplify_without_the_steps_after_it_is_no_move() -> None:
    source = (ROOT / "heldout" / "bmm" / "naive.py").read_text()
    tuned = get_operator("autotune").apply(source, configs=[{"tile_m": 64, "tile_n": 64, "tile_k": 32}])
    assert tuned is not None
    only_out = composite("out", [MoveStep("autotune", {}, action="simplify"),
                                 MoveStep("autotune", {"configs": [{"no_such_param": 1}]})])
    assert materialize(tuned.source, only_out) is None


@pytest.mark.parametrize("name", ["column_sum", "bmm", "rmsnorm"])
def test_operators_without_a_skill_come_after_the_knowledge_bases_first_moves(kb: KnowledgeBase, name: str) -> None:
    from klineage.transforms.facts import APPLICABLE, kernel_facts

    problem = load_problem(None, ROOT / "heldout" / name)
    moves = _plan(kb, name)
    where = [i for i, m in enumerate(moves) if m.origin == "no skill yet"]
    if where:
        assert where[0] > 0, "an operator without a skill came before every knowledge-base move"
        assert where == list(range(where[0], where[0] + len(where)))  # one block, in the registry's order
    skilled = {s.operator for s in kb.skills(first=1000).items}
    facts = kernel_facts(problem.source)
    unknown = [m for m in moves if m.origin == "no skill yet"]
    for move in unknown:
        (op,) = move.operators
        assert op not in skilled and facts.state(op) == APPLICABLE
    assert len({m.operators for m in unknown}) == len(unknown)


def test_after_the_launch_configuration_the_lineages_structural_step_is_still_offered(kb: KnowledgeBase) -> None:
    """The gemm lineage's persistent step comes after its config set; the tuned kernel refuses it directly,
    so the plan offers it made under autotune (configs out, persistent, configs back) and it materializes."""
    problem = load_problem(None, ROOT / "heldout" / "matmul_nt")
    first = _plan(kb, "matmul_nt")[0]
    tuned = materialize(problem.source, first)
    assert first.label == "launch config set" and tuned is not None
    assert get_operator("persistent").apply(tuned.source) is None
    later = _plan(kb, "matmul_nt", tuned.source)
    persistent = next(m for m in later if m.operators == ("persistent",))
    made = materialize(tuned.source, persistent)
    assert made is not None and get_operator("persistent").present(made.source)
    assert "@triton.autotune" in made.source
    assert [s.action for s in made.applied] == [UNDER_AUTOTUNE]  # the trajectory says how it was made
    assert apply_step(tuned.source, made.applied[0]) == made.source  # and re-making it gives the same kernel


def test_after_the_config_set_no_move_sets_one_tile_warps_or_stages_on_every_config(kb: KnowledgeBase) -> None:
    """Measured: a tile-size move after the gemm config set lost every time (4 of 4 on the H100 and H200); the
    tuned kernel's tiles, warps and stages are its config list's, changed only by the re-tune."""
    for name in ("bmm", "matmul_nt", "linear_gelu"):
        problem = load_problem(None, ROOT / "heldout" / name)
        tuned = materialize(problem.source, _plan(kb, name)[0])
        assert tuned is not None and "@triton.autotune" in tuned.source
        later = _plan(kb, name, tuned.source)
        assert later and not [m.label for m in later if set(m.operators) <= CONFIG_VALUES], name


def test_warps_an_expert_computes_from_its_tile_are_not_carried_as_a_constant(kb: KnowledgeBase) -> None:
    """The row experts compute num_warps from the tile on the host; their largest literal (16) was right
    for their widest rows only. The gemm expert writes one value for its one tile, which is carried."""
    carried = {}
    for lineage in load_lineages(kb):
        for step in lineage.steps:
            if step.operator == "num-warps":
                carried[lineage.workload] = step_parameters(step)
    assert carried["gemm"] == {"warps": 8}
    for workload in ("softmax", "layernorm", "cross_entropy"):
        assert workload in carried and "warps" not in carried[workload], (workload, carried[workload])


@pytest.mark.parametrize("name", ["column_sum", "rmsnorm", "bmm", "log_softmax"])
def test_moves_whose_measured_gain_is_within_noise_come_after_operators_without_a_skill(kb: KnowledgeBase,
                                                                                        name: str) -> None:
    """A lineage step or skill whose recorded gain is under 1 + NOISE_MARGIN is no evidence that it pays: it goes
    after the operators the knowledge base knows nothing about, and the moves before those all expect a gain."""
    from klineage.agent.planners import expects_no_gain

    moves = _plan(kb, name)
    unknown = [i for i, m in enumerate(moves) if m.origin == "no skill yet"]
    noise = [i for i, m in enumerate(moves) if m.origin != "no skill yet" and expects_no_gain(m.expected_gain)]
    assert noise, "every lineage holds steps measured within noise"
    if unknown:
        assert max(unknown) < min(noise)
    first_block = moves[: min(noise)]
    assert all(m.origin == "no skill yet" or not expects_no_gain(m.expected_gain) for m in first_block)


def test_split_k_is_still_offered_after_mask_elision_on_a_column_sum(kb: KnowledgeBase) -> None:
    """The operators compose in either order (split-k accepts mask-elision's heuristics and branch)."""
    problem = load_problem(None, ROOT / "heldout" / "column_sum")
    elided = apply_step(problem.source, MoveStep("mask-elision", {}))
    assert elided is not None
    ops = [m.operators for m in _plan(kb, "column_sum", elided)]
    assert ("split-k",) in ops


def test_every_lineage_steps_parameters_are_ones_its_operator_takes(kb: KnowledgeBase) -> None:
    """A parameter ``apply`` does not declare makes the move fail to materialize, silently (the planner reads
    the TypeError as "does not apply"): eviction-hints' portable description did so to every lineage step."""
    from klineage.transforms.registry import get_operator

    steps = [s for lin in load_lineages(kb) for s in lin.forward()]
    assert any(s.operator == "eviction-hints" for s in steps)
    for step in steps:
        declared = {p.name for p in get_operator(step.operator).params}
        assert set(step_parameters(step)) <= declared, step.operator
    problem = load_problem(None, ROOT / "heldout" / "decode_attention")
    planned = [m for m in _plan(kb, "decode_attention") if m.operators == ("eviction-hints",)]
    assert planned and all(materialize(problem.source, m) is not None for m in planned)


def test_after_all_it_proposes_the_planner_offers_every_other_operator_that_applies(kb: KnowledgeBase) -> None:
    """A call left unused is lost: once the knowledge base's moves are spent, the operators *none* would
    try (with their defaults, each materializing on the kernel) follow, after the re-tune. On every held-out
    kernel the knowledge base's moves already cover what materializes; a prefix sum (causal mask over
    blocks of several rows: causal-skip and single-pass-row materialize, the contracts rule them out, so
    search does not propose them) shows the rest, planned on a row workload's shapes."""
    from tests.transforms.harness import naive_cases

    source = naive_cases()["naive_cumsum"].source
    moves = _plan(kb, "row_absmax", source)
    origins = [m.origin for m in moves]
    rest = [m for m in moves if m.origin == AFTER_THE_PLAN]
    assert rest and origins.index(AFTER_THE_PLAN) > max(i for i, o in enumerate(origins) if o != AFTER_THE_PLAN)
    assert all(materialize(source, m) is not None for m in rest)
    informed = {op for m in moves if m.origin != AFTER_THE_PLAN for op in m.operators}
    assert not informed & {op for m in rest for op in m.operators}


def test_a_config_set_that_sets_no_tile_of_the_kernel_is_crossed_with_its_own_tiles(kb: KnowledgeBase) -> None:
    """The attention expert's tiles have no role on a decode kernel without tl.dot: its config set alone moved
    only warps and stages around the kernel's current key block. Crossed with the kernel's own tile variants
    (current, doubled, halved), one call also tries other key blocks; a matmul's set, which maps its tiles,
    is left as the expert's."""
    from klineage.agent.planners import literal_configs

    problem = load_problem(None, ROOT / "heldout" / "decode_attention")
    config = next(m for m in _plan(kb, "decode_attention") if m.label == "launch config set")
    made = materialize(problem.source, config)
    assert made is not None
    configs = literal_configs(made.source)
    assert configs and {c["BLOCK_N"] for c in configs} == {32, 64, 128}
    assert len({(c["num_warps"], c["num_stages"]) for c in configs}) > 1
    bmm = next(m for m in _plan(kb, "bmm") if m.label == "launch config set")
    assert "crossed" not in bmm.why


def test_every_move_planned_for_a_held_out_kernel_materializes(kb: KnowledgeBase) -> None:
    """The loop skips a move that does not materialize without a word: a planned move the kernel cannot take is
    a silent loss (every eviction-hints lineage step was one). On every held-out naive kernel, each move of the
    plan changes the code."""
    planner = LineagePlanner(kb, parallelism=False)  # the census reorders moves, it adds none
    silent = []
    for folder in sorted(p for p in (ROOT / "heldout").iterdir() if (p / "manifest.toml").exists()):
        problem = load_problem(None, folder)
        for move in planner.plan(AgentState(problem, problem.source, arch=90)):
            if materialize(problem.source, move) is None:
                silent.append(f"{folder.name}: {move.label} ({move.origin})")
    assert not silent, silent
