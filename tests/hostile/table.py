"""The hostile suite: each candidate of ours, the gate it must fail at, and what the reason must say.

Every row is run against the validator's own ``rowsum`` test workload (tests/validator/workloads):
on CPU under the Triton interpreter (tests/hostile/test_hostile.py, through the HTTP service) and on
the H200 (tests/hostile/test_hostile_gpu.py and bench/validator.py --gpu-session, in-process client).
A reason is matched with ``re.search`` against the CPU or GPU pattern.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "candidates"
ROWSUM = HERE.parent / "validator" / "workloads" / "rowsum"
ESCAPE_FILES = (Path("/tmp/klineage_hostile_builtins_escape"), Path("/tmp/klineage_hostile_subclass_escape"),
                Path("/tmp/klineage_hostile_torch_save"), Path("/tmp/klineage_hostile_os_escape"),
                Path("/tmp/klineage_hostile_alias_module"), Path("/tmp/klineage_hostile_tl_core"),
                Path("/tmp/klineage_hostile_shared_mmap"))


@dataclass(frozen=True)
class Hostile:
    """One hostile candidate and the verdict it must get."""

    name: str
    gate: str  # a regex of the acceptable gates (usually one name)
    cpu: str
    gpu: str | None = None  # None: same pattern as on CPU
    what: str = ""
    gpu_gate: str | None = None  # None: the same gate as on CPU; else a regex of acceptable gates

    @property
    def path(self) -> Path:
        return CANDIDATES / f"{self.name}.py"

    def pattern(self, on_gpu: bool) -> str:
        return self.gpu if on_gpu and self.gpu is not None else self.cpu

    def gate_pattern(self, on_gpu: bool) -> str:
        return self.gpu_gate if on_gpu and self.gpu_gate is not None else self.gate


HOSTILE: tuple[Hostile, ...] = (
    Hostile("torch_op", "static", r"torch compute op 'torch\.sum'", what="torch op instead of a kernel"),
    Hostile("tensor_method", "static", r"tensor compute method '\.sum\(\)'",
            what="tensor method instead of a kernel"),
    Hostile("host_arithmetic", "integrity", r"torch compute ops ran in host code.*aten\.add",
            what="arithmetic hidden behind '+' in host code"),
    Hostile("try_except", "static", r"try/except is not allowed", what="try/except fallback"),
    Hostile("memoized", "correctness", r"seed 2 \(scaled\): relative error", what="memoized output"),
    Hostile("partial_write", "correctness", r"NaN/Inf where the reference is finite",
            what="partial write into an uninitialized output"),
    Hostile("input_mutation", "integrity", r"run modified its input 0", what="input mutation"),
    Hostile("nan_output", "correctness", r"NaN/Inf where the reference is finite.*first at index 0", what="NaN"),
    Hostile("wrong_dtype", "correctness", r"dtype torch\.float32 != expected torch\.float16", what="wrong dtype"),
    Hostile("shape_specialized", "correctness", r"'cols': 64.*relative error", gpu=r"relative error",
            what="shape-specialized code"),
    Hostile("unwritten_alias", "correctness", r"NaN/Inf where the reference is finite",
            what="returning unwritten memory hoping to alias the reference's buffer"),
    Hostile("atomics_uninit", "correctness", r"NaN/Inf where the reference is finite",
            what="atomics into uninitialized memory"),
    # When the allocator hands the next seed's input the same address (the GPU's caching allocator does),
    # the replay already fails correctness; otherwise integrity's in-place refill catches it.
    Hostile("memo_by_address", "correctness|integrity",
            r"memoized by tensor address|seed \d \(\w+\): (relative error|\d+ elements differ where the reference)",
            what="output memoized by input address, token kernel launched"),
    Hostile("nondeterministic", "integrity", r"two runs on the same inputs differ", what="non-deterministic output"),
    Hostile("forbidden_import", "static", r"forbidden import 'os'", what="forbidden import"),
    Hostile("timer_patch", "static", r"forbidden import 'time'", what="timer patching"),
    Hostile("stream_trick", "static", r"streams, events, graphs", what="side stream"),
    Hostile("monkeypatch_launch", "static", r"attribute assignment '\.run = \.\.\.'",
            what="patching Triton's launch to hide from the counter"),
    Hostile("escape_builtins", "static", r"dunder name '__builtins__'", what="escape through builtins to open()"),
    Hostile("escape_subclasses", "static", r"dunder attribute '\.__(class|base|subclasses)__'",
            what="escape through object.__subclasses__()"),
    Hostile("escape_torch_io", "static", r"'torch\.save' is not allowed", what="file I/O through torch.save"),
    # The compile gate is the first to run the candidate's host code (to find its launches), so the
    # hang is caught there.
    Hostile("infinite_loop", "compile", r"time limit of \d+ s exceeded; the job was killed during compile",
            what="infinite loop"),
    Hostile("syntax_error", "static", r"syntax error at line 8, column \d+: expected ':'", what="syntax error"),
    Hostile("out_of_resources", "compile", r"shared memory \d+ B exceeds the H200 limit of 232448 B",
            gpu=r"out of resource: shared memory", what="out-of-resources config"),
    # Issue 18, classes 1-5 (tests/hostile/test_trust_model.py runs the process-level ones with the
    # static gate bypassed too).
    Hostile("alias_module", "static", r"module aliasing: the module 'torch'", what="T = torch; T.os.system"),
    Hostile("tl_core_escape", "static", r"'triton\.language\.core\.builtins\.open' is not allowed",
            what="tl.core.builtins.open"),
    Hostile("forge_progress", "static", r"'torch\.os' is not allowed", what="forged evidence, then exit"),
    Hostile("setattr_reference", "static", r"'torch\.sys\.modules' is not allowed",
            what="builtins.setattr on the comparison and the reference"),
    Hostile("dispatch_hidden", "static", r"private torch attribute 'torch\._C\._DisableTorchDispatch'",
            what="host compute inside a dispatch-disabling context"),
    Hostile("setsid_grandchild", "static", r"'torch\.os' is not allowed", what="grandchild in a new session"),
    Hostile("from_file_read", "static", r"attribute '\.untyped_storage' is not allowed",
            what="file read through a file-backed storage"),
    Hostile("shared_mmap", "static", r"'torch\.from_file' is not allowed", what="shared mapping creates a file"),
    Hostile("out_of_bounds", "correctness", r"worker died \(SIG(SEGV|BUS)\) during correctness|run raised",
            gpu=r"illegal memory access|CUDA error|worker died", what="out-of-bounds access (illegal address)"),
)

HONEST: tuple[str, ...] = ("slow_but_correct",)
"""Candidates that must pass every gate (plus the workload's own kernel.py)."""
