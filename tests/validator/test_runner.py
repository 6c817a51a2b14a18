"""LocalValidator end to end on CPU: the document, the interpreter's bf16-dot rule, the cache, bad requests."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from klineage.schema.gate_result import GATES, GateResult
from klineage.validator import LocalValidator, ValidationRequestError, ValidatorClient

WORKLOADS = Path(__file__).resolve().parent / "workloads"
ROWSUM = WORKLOADS / "rowsum"


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> LocalValidator:
    return LocalValidator(cache=tmp_path_factory.mktemp("cache") / "results.sqlite", device="cpu")


def test_local_validator_is_a_client(validator: LocalValidator) -> None:
    assert isinstance(validator, ValidatorClient)


def test_requested_gates_run_and_the_rest_say_not_requested(validator: LocalValidator) -> None:
    source = (ROWSUM / "kernel.py").read_text()
    result = validator.validate(source, ROWSUM, gates=["correctness"])
    assert isinstance(result, GateResult)
    doc = result.to_dict()
    assert [g["gate"] for g in doc["gates"]] == list(GATES)
    status = {g["gate"]: (g["status"], g["reason"]) for g in doc["gates"]}
    assert status["static"][0] == "pass"  # static always runs: it guards the sandbox
    assert status["compile"] == ("skipped", "not requested")
    assert status["correctness"][0] == "pass"
    assert "20 cases within tolerance" in status["correctness"][1]
    assert status["integrity"] == ("skipped", "not requested")
    assert doc["verdict"] == "pass"
    assert doc["kernel_sha"] == hashlib.sha256(source.encode()).hexdigest()
    assert doc["workload"] == "rowsum" and doc["date"].startswith("20")
    assert set(doc["versions"]) >= {"torch", "triton", "python", "numpy", "validator"}
    assert "interpreter" in doc["gpu"]
    metrics = result.gate("correctness").metrics  # type: ignore[union-attr]
    assert metrics["seeds_per_case"] == 5 and metrics["distributions"] == ["base", "scaled", "outliers"]
    assert not validator.last_cached

    start = time.monotonic()
    again = validator.validate(source, ROWSUM, gates=["correctness"])
    assert validator.last_cached and time.monotonic() - start < 2.0
    assert again.to_dict()["gates"] == doc["gates"]


def test_bf16_dot_under_the_interpreter_is_skipped_not_judged(validator: LocalValidator) -> None:
    source = (WORKLOADS / "matmul_small" / "kernel.py").read_text()
    mixed = validator.validate(source, WORKLOADS / "matmul_small", gates=["compile", "correctness"])
    correctness = mixed.gate("correctness")
    assert correctness is not None and correctness.status == "pass"
    assert "not judged: bf16" in correctness.reason and "wrong under the Triton interpreter" in correctness.reason
    assert correctness.metrics["cases"] == 5 and len(correctness.metrics["skipped_cases"]) == 1
    compile_gate = mixed.gate("compile")
    assert compile_gate is not None and compile_gate.status == "pass", compile_gate
    assert "sm_80 (A100, compile-only)" in compile_gate.reason
    assert compile_gate.metrics["max_regs"] and compile_gate.metrics["max_shared"] > 0

    only_bf16 = validator.validate(source, WORKLOADS / "matmul_bf16", gates=["correctness"])
    skipped = only_bf16.gate("correctness")
    assert skipped is not None and skipped.status == "skipped"
    assert "bf16 tl.dot is wrong under TRITON_INTERPRET" in skipped.reason
    assert only_bf16.verdict == "pass"  # skipped is not a failure, and says why


def test_bad_requests_are_refused_before_any_job(validator: LocalValidator, tmp_path: Path) -> None:
    source = (ROWSUM / "kernel.py").read_text()
    with pytest.raises(ValidationRequestError, match="unknown gate 'speed'"):
        validator.validate(source, ROWSUM, gates=["static", "speed"])
    with pytest.raises(ValidationRequestError, match="does not exist"):
        validator.validate(source, tmp_path / "nowhere")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.toml").write_text('[workload]\nname = "x"\nspeed = 3\n')
    with pytest.raises(ValidationRequestError, match=r"malformed workload manifest: .*workload.speed"):
        validator.validate(source, bad)
    latin = tmp_path / "latin.py"
    latin.write_bytes("# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValidationRequestError, match="not valid UTF-8"):
        validator.validate_file(latin, ROWSUM)
    with pytest.raises(ValidationRequestError, match="does not exist"):
        validator.validate_file(tmp_path / "missing.py", ROWSUM)
    with pytest.raises(ValidationRequestError, match="empty"):
        validator.validate("  \n", ROWSUM)
    with pytest.raises(ValidationRequestError, match="shapes"):
        validator.validate(source, ROWSUM, shapes=[{"rows": -1}])


def test_static_failure_never_starts_a_worker(validator: LocalValidator) -> None:
    start = time.monotonic()
    result = validator.validate("import os\n", ROWSUM)
    assert time.monotonic() - start < 2.0
    assert result.verdict == "fail" and result.failed_gate.gate == "static"  # type: ignore[union-attr]
    assert all(g.reason == "earlier gate failed (static)" for g in result.gates[1:])


def test_timing_options_key_the_cache_apart_and_defaults_keep_their_keys(tmp_path: Path) -> None:
    """A walk timed with a host lead must never replay figures timed without one (and vice versa),
    while jobs with the default timing keep the keys the committed H200 cache was written under."""
    source = (WORKLOADS / "rowsum" / "kernel.py").read_text(encoding="utf-8")
    keys = {}
    for name, timing in (("default", None), ("walker", {"rep_ms": 50.0, "baseline": False}),
                         ("walker-lead", {"rep_ms": 50.0, "baseline": False, "host_lead_us": 200.0}),
                         ("lead", {"host_lead_us": 200.0})):
        client = LocalValidator(cache=tmp_path / "c.sqlite", device="cpu", timing=timing)
        keys[name] = client.prepare(source, WORKLOADS / "rowsum", ("performance",), None)[-1]
    assert len(set(keys.values())) == 4
    plain = LocalValidator(cache=tmp_path / "c.sqlite", device="cpu", timing={})
    assert plain.prepare(source, WORKLOADS / "rowsum", ("performance",), None)[-1] == keys["default"]



def test_the_autotune_sweep_option_keys_only_candidates_that_can_autotune(tmp_path: Path) -> None:
    """``autotune_rep_ms`` sets how long an autotuner times its configs: a plain kernel's result does not
    depend on it, so its cached result serves both; an autotuned kernel's does, so it is keyed apart."""
    plain = (WORKLOADS / "rowsum" / "kernel.py").read_text(encoding="utf-8")
    timings = ({"rep_ms": 25.0}, {"rep_ms": 25.0, "autotune_rep_ms": 20.0})
    clients = [LocalValidator(cache=tmp_path / "c.sqlite", device="cpu", timing=t) for t in timings]
    keys = [c.prepare(plain, WORKLOADS / "rowsum", ("performance",), None)[-1] for c in clients]
    assert keys[0] == keys[1]
    keys = [c.prepare(BROKEN_CONFIG, WORKLOADS / "rowsum", ("performance",), None)[-1] for c in clients]
    assert keys[0] != keys[1]


BROKEN_CONFIG = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"ROWS": 2}, num_warps=4), triton.Config({"ROWS": 1}, num_warps=4)],
                 key=["n_rows"])
@triton.jit
def _rowsum(x_ptr, y_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for r in range(ROWS):
        row = tl.program_id(0) * ROWS + r
        v = tl.load(x_ptr + row * n_cols + cols, mask=(cols < n_cols) & (row < n_rows), other=0.0)
        tl.store(y_ptr + row, tl.sum(v.to(tl.float32), axis=0).to(y_ptr.dtype.element_ty), mask=row < n_rows)


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    # the grid is written for the first config's 2 rows per program: the second config misses half the rows
    _rowsum[(triton.cdiv(x.shape[0], 2),)](x, y, x.shape[0], x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''


def test_every_autotune_config_is_checked_pinned_on_cpu(validator: LocalValidator) -> None:
    """Under the interpreter the autotuner would run the first config only: a config that breaks
    correctness must still be caught (DESIGN.md, "Versions and facts")."""
    result = validator.validate(BROKEN_CONFIG, ROWSUM, gates=["correctness"])
    failed = result.failed_gate
    assert failed is not None and failed.gate == "correctness", result.gates
    assert "config 1" in failed.reason and "NaN/Inf where the reference is finite" in failed.reason, failed.reason
    fixed = BROKEN_CONFIG.replace("triton.cdiv(x.shape[0], 2)", "x.shape[0]")
    ok = validator.validate(fixed, ROWSUM, gates=["correctness"])
    correctness = ok.gate("correctness")
    assert correctness is not None and correctness.status == "pass", correctness
    assert correctness.metrics["autotune_configs_pinned"] == 2
    assert "each of 2 autotune configs pinned" in correctness.reason


def test_time_limit_is_derived_from_the_work_and_stated(validator: LocalValidator) -> None:
    source = (ROWSUM / "kernel.py").read_text() + "\n# time limit\n"
    result = validator.validate(source, ROWSUM, gates=["compile", "correctness"])
    for gate in ("compile", "correctness"):
        metrics = result.gate(gate).metrics  # type: ignore[union-attr]
        assert 180 < metrics["time_limit_s"] < 3600 and metrics["time_limit_basis"].startswith("derived: 4 cases")
    quick = validator.validate(source + "# override\n", ROWSUM, gates=["correctness"], timeout_s=42)
    assert quick.gate("correctness").metrics["time_limit_s"] == 42  # type: ignore[union-attr]


def test_each_gate_says_where_its_time_went(validator: LocalValidator) -> None:
    """Wall time, device-lock queueing, and the worker's share (round trips, and the part the worker spent
    working): bench/validator.py splits a candidate's cost with them."""
    source = (ROWSUM / "kernel.py").read_text() + "\n# where the time went\n"
    result = validator.validate(source, ROWSUM, gates=["compile", "correctness", "integrity"])
    for gate in ("compile", "correctness", "integrity"):
        metrics = result.gate(gate).metrics  # type: ignore[union-attr]
        wall, trips, busy = metrics["gate_wall_s"], metrics["worker_round_trip_s"], metrics["worker_busy_s"]
        assert metrics["lock_wait_s"] == 0.0  # no device lock on CPU
        assert 0.0 < busy <= trips <= wall + 1e-3, (gate, wall, trips, busy)


def test_the_sm80_report_made_beside_the_gates_is_the_one_made_inside(validator: LocalValidator) -> None:
    """On a GPU host the compile gate's sm_80 report is cross-compiled in a CPU worker of its own while the
    job's worker runs the gates (runner._PortabilityReport); merged, it reads as the one made in line."""
    import importlib

    from klineage.validator.channel import shells
    from klineage.validator.compile_gate import with_portability
    from klineage.validator.pool import default_pool

    runner = importlib.import_module("klineage.validator.runner")
    source = (ROWSUM / "kernel.py").read_text() + "\n# sm_80 beside\n"
    inline = validator.validate(source, ROWSUM, gates=["compile"]).gate("compile")
    assert inline is not None and inline.status == "pass" and "sm_80 (A100, compile-only)" in inline.reason

    spec = importlib.util.spec_from_file_location("rowsum_reference_for_sm80", ROWSUM / "reference.py")
    reference = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(reference)  # type: ignore[union-attr]
    cases = [(f"{d} {s}", shells(reference.make_inputs(s, d, 0))) for s in ({"rows": 4, "cols": 33},)
             for d in ("fp32", "fp16")]
    side = runner._PortabilityReport(default_pool(), source, cases, time.monotonic() + 300, 300)
    variants, error = side.result(300)
    assert error is None and variants and all(v["arch"] == "sm_80" for v in variants)
    without = {**inline.to_dict(), "reason": inline.reason.split("; sm_80")[0],
               "metrics": {k: v for k, v in inline.metrics.items() if k != "sm_80"}}
    merged = with_portability(without, variants)
    assert merged["status"] == "pass" and merged["reason"].endswith("sm_80 (A100, compile-only): all 2 variants fit")
    assert merged["metrics"]["sm_80"]["variants"] == 2 and merged["metrics"]["sm_80"]["unfit"] == []

    broken = runner._PortabilityReport(default_pool(), "def run(:\n", cases, time.monotonic() + 60, 60)
    variants, error = broken.result(60)
    assert variants == [] and error and "nothing cross-compiled for sm_80" in error  # missing, and says why
    failed = with_portability({"status": "fail", "reason": "x does not fit", "metrics": {}}, [], "lost")
    assert failed["reason"] == "x does not fit" and failed["metrics"]["sm_80"]["error"] == "lost"


OOM = "run raised on bf16 {'M': 8192} seed 1 (base): OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"


@pytest.mark.parametrize("second_run_oom", [False, True])
def test_a_job_that_ran_out_of_gpu_memory_runs_again_alone_and_is_cached_only_if_it_then_fits(
        monkeypatch: pytest.MonkeyPatch, second_run_oom: bool) -> None:
    from klineage.schema.gate_result import GateOutcome
    from klineage.validator import runner
    from klineage.validator.device_lock import device_lock

    runs: list[tuple[int, bool, int]] = []

    def crowded_then_alone(source, workload, remaining, *args) -> None:
        outcomes = args[-4]  # ..., outcomes, notes, max_timeout_s, host_kernels
        runs.append(device_lock("cuda:0").state())
        oom = not runs[1:] or second_run_oom
        outcomes["correctness"] = GateOutcome("correctness", "fail" if oom else "pass", OOM if oom else "ok")
        return None

    monkeypatch.setattr(runner, "_run_gates", crowded_then_alone)
    gpu = runner.DeviceInfo(gpu="NVIDIA H100 80GB HBM3 (sm_90)", versions={}, cuda=True, device_count=1)
    source = (ROWSUM / "kernel.py").read_text()
    job = runner.validate_job(source, runner.load_workload(ROWSUM), ["static", "correctness"], None, gpu)
    assert runs == [(0, False, 0), (0, True, 0)]  # the second run held the GPU alone
    assert job.notes["out_of_memory_retry"].startswith("run raised")
    assert job.result.verdict == ("fail" if second_run_oom else "pass")
    assert job.cacheable is (not second_run_oom)
    assert runner.out_of_memory(job.result.gates) == (runner.SHORT_ALONE + OOM if second_run_oom else None)
    # short of memory even alone: the candidate's own need, not the crowd's (a caller does not ask again)
    assert not runner.crowded_out(job.result)
    assert job.notes["idle_workers_retired"] == 0  # before the lone run: idle GPU workers' memory given back


def test_only_a_shortage_beside_other_jobs_is_the_crowds() -> None:
    from klineage.schema.gate_result import GateOutcome, GateResult
    from klineage.validator import runner

    def result(reason: str) -> GateResult:
        return GateResult("sha", "gpu", {}, (GateOutcome("correctness", "fail", reason),), "w", "2026-12-07")

    assert runner.crowded_out(result(OOM))
    assert not runner.crowded_out(result(runner.SHORT_ALONE + OOM))
    assert not runner.crowded_out(result("run raised on bf16: ValueError"))


def test_retiring_idle_workers_leaves_busy_and_cpu_ones_alone() -> None:
    from klineage.validator.pool import WorkerMode, WorkerPool

    pool = WorkerPool(max_workers=2)
    try:
        interp = WorkerMode(interpret=True)
        with pool.worker(interp):
            with pool.worker(interp) as busy:
                pass  # one worker back to idle, one still busy below
            assert pool.retire_idle(gpu_only=True) == 0  # an interpreter worker holds no GPU context
            assert pool.retire_idle(gpu_only=False) == 1  # the idle one; the busy one stays
            assert pool.stats()["live"] == 1 and busy.proc.poll() is not None
    finally:
        pool.shutdown()


def test_a_launch_keyword_that_an_autotune_config_also_sets_fails_on_cpu_as_triton_would(
        validator: LocalValidator) -> None:
    """Every ``triton.Config`` sets num_warps, num_stages and num_ctas; Triton's autotuner launches with
    ``**kwargs, **config.all_kwargs()`` and raises on a launch that passes one of them too (seen on the H100:
    an autotuned decode attention whose launch kept ``num_warps=...``). The pinned CPU run must fail it the
    same way instead of letting the config override it."""
    fixed = BROKEN_CONFIG.replace("triton.cdiv(x.shape[0], 2)", "x.shape[0]")
    clashing = fixed.replace("BLOCK=triton.next_power_of_2(x.shape[1]))",
                             "BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=4)")
    assert clashing != fixed
    result = validator.validate(clashing, ROWSUM, gates=["correctness"])
    failed = result.failed_gate
    assert failed is not None and failed.gate == "correctness", result.gates
    assert "num_warps" in failed.reason and "also sets" in failed.reason, failed.reason


def test_a_gpu_hold_counts_the_memory_it_gives_back_into_the_gates_trusted_time() -> None:
    from klineage.validator import runner
    from klineage.validator.checks import with_trusted_parts

    def gate() -> dict:
        with runner._hold_for("cuda:0", True)(False):  # no CUDA here: the release finds nothing to give back
            pass
        return {"status": "pass", "metrics": {}}

    assert set(with_trusted_parts(gate)["metrics"]) == {"trusted_release_s"}
