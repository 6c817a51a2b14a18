"""The launch census (programs per shape, nothing launched) and the plan order it gives an underfilled kernel."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from klineage.agent import load_problem
from klineage.agent.census import UNDERFILLED, GridCensus, by_parallelism, grid_fill
from klineage.agent.moves import single
from klineage.agent.planners import LineagePlanner
from klineage.agent.state import AgentState
from klineage.kb.service import KnowledgeBase

# The validator's modules import triton: they are imported inside the tests, never at collection, because
# tests/transforms/conftest.py must set TRITON_INTERPRET=1 before anything in the session imports triton.

ROOT = Path(__file__).resolve().parents[2]
COLUMN_SUM = ROOT / "heldout" / "column_sum"

ELEMENTWISE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl


    @triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


    def run(x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out.sum(dim=0)
''')


def _module(tmp_path: Path, source: str, name: str):
    from klineage.validator.harness import load_candidate

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_candidate(path, name)


def test_the_census_counts_each_launchs_programs_without_inputs_in_memory(tmp_path: Path) -> None:
    """The naive column sum launches one program per 128 columns; a 3 x 33554432 input (192 MiB in bf16)
    costs nothing: the tensors are fake."""
    from klineage.validator.harness import load_reference
    from klineage.validator.launch_census import count_programs

    reference = load_reference(COLUMN_SUM / "reference.py")
    module = _module(tmp_path, (COLUMN_SUM / "naive.py").read_text(), "census_column_sum")
    shapes = [{"M": 100000, "N": 1000}, {"M": 3, "N": 33554432}, {"M": 8192, "N": 8191}]
    assert count_programs(module.run, reference.make_inputs, shapes, "bf16", 132) == [8, 262144, 64]


def test_an_autotuned_launch_counts_with_its_largest_grid_and_a_persistent_one_with_the_sms(tmp_path: Path) -> None:
    from klineage.validator.harness import load_reference
    from klineage.validator.launch_census import count_programs

    reference = load_reference(COLUMN_SUM / "reference.py")
    tuned = _module(tmp_path, ELEMENTWISE, "census_tuned")
    # 1000 x 64 elements: cdiv(64000, 64) programs under the BLOCK=64 config, 63 under BLOCK=1024
    assert count_programs(tuned.run, reference.make_inputs, [{"M": 1000, "N": 64}], "fp32", 132) == [1000]
    persistent = ELEMENTWISE.replace(
        'copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)]',
        "copy_kernel[(torch.cuda.get_device_properties(x.device).multi_processor_count "
        "if torch.cuda.is_available() else 4,)]")
    module = _module(tmp_path, persistent, "census_persistent")
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 7
    assert count_programs(module.run, reference.make_inputs, [{"M": 1000, "N": 64}], "fp32", 7) == [sms]


def test_host_code_that_reads_a_value_gives_no_count(tmp_path: Path) -> None:
    from klineage.validator.harness import load_reference
    from klineage.validator.launch_census import count_programs

    reference = load_reference(COLUMN_SUM / "reference.py")
    reads = ELEMENTWISE.replace("n = x.numel()", "n = int(x.abs().max().item()) + x.numel()")
    module = _module(tmp_path, reads, "census_reads")
    assert count_programs(module.run, reference.make_inputs, [{"M": 10, "N": 10}], "fp32", 132) == [None]


def test_the_census_worker_answers_for_every_source_and_a_broken_one_gets_none() -> None:
    from klineage.validator.launch_census import census_in_worker

    source = (COLUMN_SUM / "naive.py").read_text()
    shapes = [{"M": 100000, "N": 1000}, {"M": 65536, "N": 4096}]
    assert census_in_worker(COLUMN_SUM / "reference.py", shapes, "bf16", 132, [source, "def run(:"]) == \
        [[8, 32], [None, None]]


def test_grid_fill_is_the_geomean_of_the_capped_share_of_sms() -> None:
    assert grid_fill([132, 264], 132) == pytest.approx(1.0)
    assert grid_fill([33, 132, None], 132) == pytest.approx(0.5)  # sqrt(0.25 x 1): unknown shapes do not vote
    assert grid_fill([None], 132) is None


def test_an_underfilled_kernel_gets_the_moves_that_raise_its_fill_first() -> None:
    a, b, c, d = (single(op) for op in ("num-warps", "split-k", "tile-size", "autotune"))
    fills = {a.key(): 0.2, b.key(): 0.9, c.key(): 0.05, d.key(): 0.5}
    ordered = by_parallelism([a, b, c, d], 0.2, fills)
    assert [m.operators[0] for m in ordered] == ["split-k", "autotune", "num-warps", "tile-size"]
    assert "fills 20% of the SMs" in ordered[0].why
    assert by_parallelism([a, b, c, d], UNDERFILLED, fills) == [a, b, c, d]  # a filled GPU keeps its plan
    assert by_parallelism([a, b], None, fills) == [a, b]


def test_a_failed_census_leaves_the_plan_as_it_is() -> None:
    def broken(*args: object) -> list[list[int | None]]:
        raise RuntimeError("no worker")

    census = GridCensus(COLUMN_SUM / "reference.py", ({"M": 100000, "N": 1000},), "bf16", run=broken)
    moves = [single("num-warps"), single("split-k")]
    assert census.order((COLUMN_SUM / "naive.py").read_text(), moves) == moves
    assert census.failed == "no worker"


@pytest.mark.real("embedder")
def test_the_klineage_plan_of_a_column_sum_starts_with_the_move_that_fills_the_gpu(kb: KnowledgeBase) -> None:
    """On the naive column sum (8 programs on the 100000 x 1000 shape) split-k launches more programs over the
    same data and goes first; a row kernel that fills the GPU (one program per row) keeps the lineage's order."""
    problem = load_problem(None, COLUMN_SUM)
    state = AgentState(problem, problem.source, arch=90)
    first = LineagePlanner(kb).plan(state)[0]
    assert first.operators == ("split-k",) and "of the SMs" in first.why
    rmsnorm = load_problem(None, ROOT / "heldout" / "rmsnorm")
    rows = AgentState(rmsnorm, rmsnorm.source, arch=90)
    assert LineagePlanner(kb).plan(rows) == LineagePlanner(kb, parallelism=False).plan(rows)


@pytest.mark.parametrize("name", ["bmm", "decode_attention", "rope", "group_norm", "matmul_tn"])
def test_the_census_counts_every_shape_of_held_out_kernels(name: str) -> None:
    from klineage.validator.launch_census import census_in_worker

    problem = load_problem(None, ROOT / "heldout" / name)
    shapes = problem.manifest.shapes
    (programs,) = census_in_worker(problem.manifest.reference_path, shapes, problem.manifest.dtypes[0], 132,
                                   [problem.source])
    assert len(programs) == len(shapes) and all(p is not None and p >= 1 for p in programs), programs
