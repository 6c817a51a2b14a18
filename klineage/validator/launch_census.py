"""The launch census: how many programs a candidate's ``run`` launches on each shape of a grid, without
running a kernel or allocating an input.

Why: a kernel whose grid gives the GPU fewer programs than it has SMs leaves most of the chip idle (a
column sum of a 100000 x 1000 matrix, one program per 128 columns: 8 programs on 132 SMs), and no tile,
warp or cache hint repairs that; only a move that launches more programs does. The agent's planner reads
the census of the kernel and of each candidate move to know which is which (``klineage.agent.census``).

How: the workload's ``make_inputs`` and the candidate's ``run`` execute under torch's ``FakeTensorMode``
(tensors carry shape, dtype and strides, no storage, so a 1 GB input costs nothing), with Triton's launch
paths replaced by stand-ins that evaluate the launch grid (a tuple, or a callable given the launch's
arguments and constexprs, as Triton calls it) and record the product of its axes. An autotuned kernel is
evaluated under each of its configs and counts with the largest grid (the config set *offers* that
parallelism; which config wins is the timing gate's business). Per shape the census keeps the largest
launch of the call (a split reduction's partial pass, not its small final pass). Where the GPU's SM count
enters the host code (persistent kernels size their grid with ``multi_processor_count``), the census
answers with the SM count it is given, so a persistent grid reads as one program per SM, not as the CPU's
fallback.

The candidate is loaded as the validator loads it (``harness.load_candidate``: restricted builtins); this
module runs in a one-shot worker process (``python -m klineage.validator.worker --census REQUEST OUT``,
with the sandbox's environment and deadline: ``census_in_worker``), never in the caller's process.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: Seconds one census call may take (imports included) before its worker is killed.
CENSUS_TIMEOUT_S = 60.0


def _grid_size(grid: Any, bound: Mapping[str, Any]) -> int:
    """Programs of one launch: the product of the grid's axes (a callable grid gets the launch's arguments
    by name, as Triton gives them)."""
    value = grid(dict(bound)) if callable(grid) else grid
    if isinstance(value, int):
        value = (value,)
    return math.prod(int(axis) for axis in value)


@contextlib.contextmanager
def recording_launches(sm_count: int) -> Iterator[list[int]]:
    """Within the block, ``kernel[grid](...)`` launches nothing: it appends the launch's program count to
    the yielded list (an autotuned launch: its largest over the configs). Torch's device queries answer
    ``sm_count`` SMs when no GPU is visible. Everything is restored on exit."""
    import torch
    from triton.runtime.autotuner import Autotuner

    from klineage.validator.triton_launch import LaunchPatch

    counts: list[int] = []

    def jit_run(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> None:
        names = [p.name for p in self.params] if hasattr(self, "params") else list(getattr(self, "arg_names", ()))
        bound = {**dict(zip(names, args, strict=False)), **kwargs}
        counts.append(_grid_size(grid, bound))

    def autotune_run(self: Autotuner, *args: Any, **kwargs: Any) -> None:
        before = len(counts)
        for config in self.configs:
            self.fn.run(*args, **{**kwargs, **config.all_kwargs()})
        if len(counts) > before:
            counts[before:] = [max(counts[before:])]

    patch = LaunchPatch()
    patch.replace_launches(lambda original: jit_run, lambda original: autotune_run)
    saved: list[tuple[Any, str, Any]] = []
    if not torch.cuda.is_available():
        device = SimpleNamespace(multi_processor_count=sm_count, name="census")
        saved += [(torch.cuda, "is_available", torch.cuda.is_available),
                  (torch.cuda, "get_device_properties", torch.cuda.get_device_properties)]
        torch.cuda.is_available = lambda: True
        torch.cuda.get_device_properties = lambda *a, **k: device  # type: ignore[assignment]
    try:
        yield counts
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
        patch.restore()


def count_programs(run: Any, make_inputs: Any, shapes: Sequence[Mapping[str, Any]], dtype: str,
                   sm_count: int) -> list[int | None]:
    """For each shape: the largest number of programs one launch of ``run(*make_inputs(shape, dtype, 0))``
    starts (see the module docstring); None where the host code could not run on fake tensors (it read a
    value, called an op fake tensors lack) or launched nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out: list[int | None] = []
    for shape in shapes:
        with recording_launches(sm_count) as counts:
            try:
                with FakeTensorMode(allow_non_fake_inputs=True):
                    inputs = make_inputs(dict(shape), dtype, 0, device="cpu")
                    run(*inputs)
            except Exception:
                counts.clear()
        out.append(max(counts) if counts else None)
    return out


def census_request(reference: Path, shapes: Sequence[Mapping[str, Any]], dtype: str, sm_count: int,
                   sources: Sequence[str]) -> dict[str, Any]:
    """The JSON document a census worker reads."""
    return {"reference": str(Path(reference).resolve()), "shapes": [dict(s) for s in shapes], "dtype": dtype,
            "sm_count": int(sm_count), "sources": list(sources)}


def serve_census(request_path: Path, out_path: Path) -> int:
    """Worker side: read a ``census_request`` document, write ``{"programs": [[count or null per shape] per
    source]}`` (a source that does not load: all null). Returns the exit code."""
    from klineage.validator.harness import load_candidate, load_reference

    request = json.loads(request_path.read_text())
    reference = load_reference(Path(request["reference"]))
    programs: list[list[int | None]] = []
    for i, source in enumerate(request["sources"]):
        path = request_path.parent / f"census_candidate_{i}.py"
        path.write_text(source)
        try:
            module = load_candidate(path, f"klineage_census_{i}")
        except Exception:
            programs.append([None] * len(request["shapes"]))
            continue
        programs.append(count_programs(module.run, reference.make_inputs, request["shapes"], request["dtype"],
                                       request["sm_count"]))
    out_path.write_text(json.dumps({"programs": programs}))
    return 0


class CensusError(RuntimeError):
    """The census worker did not answer (crash, time-out, unreadable answer); says why."""


def census_in_worker(reference: Path, shapes: Sequence[Mapping[str, Any]], dtype: str, sm_count: int,
                     sources: Sequence[str], timeout_s: float = CENSUS_TIMEOUT_S) -> list[list[int | None]]:
    """Program counts per shape of each source (``count_programs``), computed in a one-shot worker process
    (sandbox environment, no GPU, killed past ``timeout_s``). CensusError when the worker gives no answer."""
    from klineage.validator.sandbox import clean_env, run_worker

    with tempfile.TemporaryDirectory(prefix="klineage-census-") as tmp:
        workdir = Path(tmp)
        request, answer = workdir / "request.json", workdir / "answer.json"
        request.write_text(json.dumps(census_request(reference, shapes, dtype, sm_count, sources)))
        env = clean_env(workdir, interpret=False, visible_devices="")
        ran = run_worker(["--census", str(request), str(answer)], workdir, env, timeout_s)
        if ran.timed_out:
            raise CensusError(f"the census worker ran past {timeout_s:.0f} s")
        try:
            document = json.loads(answer.read_text())
        except (OSError, ValueError) as exc:
            raise CensusError(f"the census worker gave no answer (exit {ran.returncode}): "
                              f"{ran.stderr_tail[-300:]}") from exc
    return [[None if v is None else int(v) for v in row] for row in document["programs"]]
