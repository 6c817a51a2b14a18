"""The cache-only validator: a GPU's stored verdicts replayed where there is no GPU, nothing else.

The stored documents here are written by the test under the keys a GPU validator would use
(``prepare_request``): what is pinned is which document is served for which request, that a request the
cache does not hold is refused (never judged, never timed), and how the recorded GPU is chosen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from klineage.agent import load_problem, optimize
from klineage.agent.moves import materialize, single
from klineage.schema.gate_result import GATES, NO_GPU, GateOutcome, GateResult
from klineage.schema.ids import kernel_sha
from klineage.validator import ValidationRequestError, ValidatorUnavailable, make_validator
from klineage.validator.cache import ResultCache
from klineage.validator.cache_only import CacheOnlyValidator, NotInCache, recorded_devices
from klineage.validator.client import prepare_request
from klineage.validator.runner import DeviceInfo

HERE = Path(__file__).resolve().parent
ROWSUM = HERE / "workloads" / "rowsum"
ROOT = HERE.parents[1]
VERSIONS = {"torch": "2.11.0+cu130", "triton": "3.6.0", "validator": "1"}
H100 = DeviceInfo(gpu="NVIDIA H100 80GB HBM3 (sm_90)", versions=VERSIONS, cuda=True, device_count=1)
H200 = DeviceInfo(gpu="NVIDIA H200 (sm_90)", versions=VERSIONS, cuda=True, device_count=1)
TIMING = {"rep_ms": 25.0}


def _stored(source: str, device: DeviceInfo, speedup: float, workload: str = "rowsum") -> GateResult:
    rows = [{"shape": {"rows": 8}, "dtype": "fp32", "speedup": speedup, "candidate": {"median_ms": 1.0}}]
    gates = tuple(GateOutcome(g, "pass", "ok") if g != "performance" else
                  GateOutcome(g, "pass", "timed", {"geomean_speedup": speedup, "rows": rows}) for g in GATES)
    return GateResult(kernel_sha(source), device.gpu, device.versions, gates, workload, "2026-12-07")


def _put(cache: ResultCache, source: str, folder: Path, device: DeviceInfo, speedup: float,
         shapes: list[dict[str, int | bool]] | None = None) -> None:
    key = prepare_request(source, folder, GATES, shapes, device, 5, TIMING)[-1]
    cache.put(key, _stored(source, device, speedup, folder.name))


def test_it_serves_what_the_gpu_stored_and_refuses_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = ResultCache(path)
    source = (ROWSUM / "kernel.py").read_text()
    _put(cache, source, ROWSUM, H100, 1.7)
    _put(cache, source + "\n# other\n", ROWSUM, H100, 1.1)
    _put(cache, source, ROWSUM, H200, 2.0)
    cpu = DeviceInfo(gpu=NO_GPU, versions=VERSIONS, cuda=False)
    cache.put(prepare_request(source, ROWSUM, GATES, None, cpu, 5, None)[-1], _stored(source, cpu, 1.0))
    # the GPUs it holds, most results first; CPU verdicts are no GPU's
    assert [(d.gpu, n) for d, n in recorded_devices(path)] == [(H100.gpu, 2), (H200.gpu, 1)]

    replay = CacheOnlyValidator(path, timing=TIMING)
    assert replay.device_info() == H100
    served = replay.validate(source, ROWSUM)
    assert served.gpu == H100.gpu and served.gate("performance").metrics["geomean_speedup"] == 1.7
    on_h200 = CacheOnlyValidator(path, "h200", timing=TIMING)
    assert on_h200.validate(source, ROWSUM).gate("performance").metrics["geomean_speedup"] == 2.0
    # never measured: another kernel, other timing options, other shapes, a subset of the gates
    for validator, candidate, kwargs in [
            (replay, source + "\n# never timed\n", {}),
            (CacheOnlyValidator(path, timing={"rep_ms": 100.0}), source, {}),
            (replay, source, {"shapes": [{"rows": 64, "cols": 64}]}),
            (replay, source, {"gates": ("static", "compile")})]:
        with pytest.raises(NotInCache, match="never measured on NVIDIA"):
            validator.validate(candidate, ROWSUM, **kwargs)
    assert replay.misses == 3 and len(cache) == 4  # nothing was written: refused requests are not judged


def test_it_says_what_is_wrong_with_its_cache(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        CacheOnlyValidator(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()  # a missing cache is not created
    ResultCache(tmp_path / "empty.sqlite")
    with pytest.raises(ValueError, match="holds no GPU result"):
        CacheOnlyValidator(tmp_path / "empty.sqlite")
    cache = ResultCache(tmp_path / "h100.sqlite")
    _put(cache, "x = 1\n", ROWSUM, H100, 1.0)
    with pytest.raises(ValueError, match=r"named like 'b200'.*NVIDIA H100"):
        CacheOnlyValidator(tmp_path / "h100.sqlite", "b200")
    # through the one factory every --validator option goes through
    assert isinstance(make_validator("cache-only:H100", cache=tmp_path / "h100.sqlite"), CacheOnlyValidator)
    with pytest.raises(ValidationRequestError, match="give its file"):
        make_validator("cache-only")
    with pytest.raises(ValidationRequestError, match="does not exist"):
        make_validator("cache-only", cache=tmp_path / "nope.sqlite")
    assert issubclass(NotInCache, ValidatorUnavailable)


def test_an_agent_run_replays_to_the_first_kernel_the_gpu_never_measured(tmp_path: Path) -> None:
    """The start and the first move were measured, the second never was: the run ends there with what it
    found, as on the GPU up to that call, and says which call a GPU must judge."""
    problem = load_problem(None, ROOT / "heldout" / "rmsnorm")
    folder = problem.manifest.directory
    moves = [single("num-warps", {"num_warps": 8}), single("int64-offsets")]
    made = materialize(problem.source, moves[0])
    assert made is not None
    first = made.source
    cache = ResultCache(tmp_path / "c.sqlite")
    _put(cache, problem.source, folder, H100, 0.8)
    _put(cache, first, folder, H100, 1.2)

    class InOrder:
        name = "in-order"

        def plan(self, state: object) -> list:
            return [m for m in moves if m.key() not in state.tried()]  # type: ignore[attr-defined]

    report = optimize(problem, InOrder(), CacheOnlyValidator(tmp_path / "c.sqlite", timing=TIMING), budget=5)
    assert report.start.speedup == pytest.approx(0.8) and report.best_so_far() == [0.8, 1.2]
    assert report.interrupted is not None and "call 2 (int64-offsets)" in report.interrupted
    assert "never measured" in report.interrupted and report.best_source == first


def test_klineage_optimize_replays_a_gpu_cache_and_says_where_it_stopped(tmp_path: Path) -> None:
    """The CLI takes ``--validator cache-only``: the run's report is printed, then exit 3 naming the call a GPU
    must judge (only the start was measured here)."""
    from typer.testing import CliRunner

    from klineage.cli.main import app

    problem = load_problem(None, ROOT / "heldout" / "rmsnorm")
    cache = ResultCache(tmp_path / "gpu.sqlite")
    key = prepare_request(problem.source, problem.manifest.directory, GATES, None, H100, 5, None)[-1]
    cache.put(key, _stored(problem.source, H100, 0.9, "rmsnorm"))
    out = tmp_path / "best.py"
    result = CliRunner().invoke(app, ["optimize", str(ROOT / "heldout/rmsnorm/naive.py"), "-w",
                                      str(ROOT / "heldout/rmsnorm"), "--method", "none", "--no-record",
                                      "--validator", "cache-only:H100", "--cache", str(tmp_path / "gpu.sqlite"),
                                      "-o", str(out)])
    text = " ".join(result.output.split())
    assert result.exit_code == 3, result.output
    assert "stopped early: call 1" in text and "never measured on NVIDIA H100" in text
    assert out.read_text() == problem.source  # the best so far (the start) is written before the error
    missing = CliRunner().invoke(app, ["optimize", str(ROOT / "heldout/rmsnorm/naive.py"), "-w",
                                       str(ROOT / "heldout/rmsnorm"), "--method", "none", "--no-record",
                                       "--validator", "cache-only", "--cache", str(tmp_path / "none.sqlite")])
    assert missing.exit_code == 2 and "does not exist" in missing.output, missing.output
