"""tensor-descriptors on the held-out matmuls through the validator's gates: on CPU (the interpreter)
on shapes past one tile and divisible by none, with 16-byte rows (what TMA needs); on a GPU (skipped
without one) on larger shapes, with the compiled copy checked for TMA copies, and a shape whose rows are
not 16-byte aligned run by the pointer kernel the operator started from (correct, no CUDA error)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from klineage.transforms.registry import get_operator

from .heldout import CPU_GATES, failed_gates, heldout_dirs, manifests, naive_sources, validate_all

OP = get_operator("tensor-descriptors")
SOURCES = naive_sources()
DIRS = {d.name: d for d in heldout_dirs()}
MATMULS = sorted(name for name, src in SOURCES.items() if OP.applicable(src))

# every dim a multiple of 8 (16-byte rows in 16-bit types), none a multiple of the 32-wide tiles
CPU_SHAPE = {"B": 2, "M": 72, "N": 88, "K": 104}
GPU_SHAPES = [{"B": 3, "M": 1000, "N": 1064, "K": 1000}, {"B": 2, "M": 4096, "N": 2048, "K": 4096}]


def _shape(name: str, shape: dict[str, int]) -> dict[str, int]:
    """``shape`` cut to the dims of the workload (B only for bmm)."""
    dims = set(manifests()[name].cpu_shapes[0])
    return {k: v for k, v in shape.items() if k in dims}


def test_every_heldout_matmul_is_applicable() -> None:
    assert set(MATMULS) >= {"bmm", "linear_bias_relu", "linear_gelu", "matmul_nt", "matmul_residual",
                            "matmul_tn", "small_k_gemm", "tall_skinny_gemm"}, MATMULS


@pytest.fixture(scope="module")
def cpu_results(cpu_validator: Any) -> dict[str, dict[str, Any]]:
    jobs = []
    for name in MATMULS:
        rw = OP.apply(SOURCES[name])
        assert rw is not None, name
        jobs.append((name, rw.source, DIRS[name], [_shape(name, CPU_SHAPE)]))
    return validate_all(jobs, cpu_validator(seeds=1))


@pytest.mark.parametrize("name", MATMULS)
def test_applied_heldout_matmul_passes_the_cpu_gates(name: str, cpu_results: dict[str, dict[str, Any]]) -> None:
    result = cpu_results[name]
    assert result["verdict"] == "pass", "\n".join(failed_gates(result))


torch = pytest.importorskip("torch")


def _load(source: str, name: str) -> Any:
    path = Path(tempfile.mkdtemp(prefix="klineage-tma-")) / f"tma_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"klineage_tma_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _ptx(fn: Any) -> str:
    """The PTX of every kernel the jit function compiled (Triton 3.6: ``device_caches``)."""
    texts = []
    for caches in getattr(fn, "device_caches", {}).values():
        for compiled in caches[0].values():
            texts.append(compiled.asm.get("ptx", ""))
    return "\n".join(texts)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", MATMULS)
def test_on_the_gpu(name: str) -> None:
    from klineage.validator.client import LocalValidator

    rw = OP.apply(SOURCES[name])
    assert rw is not None
    shapes = [_shape(name, s) for s in GPU_SHAPES]
    result = LocalValidator(seeds=1).validate(rw.source, DIRS[name], gates=CPU_GATES, shapes=shapes).to_dict()
    assert result["verdict"] == "pass", "\n".join(failed_gates(result))
    # in this process: the compiled copy moves tiles with TMA, and an output row of 1065 fp16 (2130 bytes)
    # takes the pointer kernel (correct, and the context stays usable)
    ref = _reference(name)
    mod = _load(rw.source, name)
    args = ref.make_inputs(_shape(name, GPU_SHAPES[0]), "fp16", 0, device="cuda")
    out = mod.run(*args)
    expected = ref.reference(*args)
    assert torch.allclose(out.float(), expected.float(), atol=1e-2, rtol=1e-2)
    copy = next(v for k, v in vars(mod).items() if k.endswith("_tma_kernel") and hasattr(v, "device_caches"))
    ptx = _ptx(copy)
    assert "cp.async.bulk.tensor" in ptx and "tensormap" in ptx, ptx[:2000]
    odd_args = ref.make_inputs({k: (v + 1 if k == "N" else v) for k, v in _shape(name, GPU_SHAPES[0]).items()},
                               "fp16", 0, device="cuda")
    assert torch.allclose(mod.run(*odd_args).float(), ref.reference(*odd_args).float(), atol=1e-2, rtol=1e-2)
    torch.cuda.synchronize()
    assert torch.allclose(mod.run(*args).float(), expected.float(), atol=1e-2, rtol=1e-2)


def _reference(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"klineage_tma_ref_{name}", DIRS[name] / "reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
