"""The held-out workloads: folder format, naive candidates, and every naive kernel passes the gates
under the Triton interpreter (static, compile, correctness on the cpu_shapes)."""

from __future__ import annotations

import ast
import importlib.util
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from klineage.kb.features import problem_features
from klineage.transforms.features import kernel_features

from .heldout import EXPERT_WORKLOADS, failed_gates, heldout_dirs, manifests, naive_sources, validate_all

NAMES = [d.name for d in heldout_dirs()]
ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "math"}


def _reference_module(name: str) -> Any:
    m = manifests()[name]
    spec = importlib.util.spec_from_file_location(f"heldout_reference_{name}", m.reference_path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: Op kinds the held-out set must keep covering, each with the workloads that stand for it. Families are
#: coarse, as for the lineage workloads (softmax, layernorm and cross-entropy are all "row-reduction"), so
#: norms, softmaxes and cross-entropy are checked by name here.
KINDS: dict[str, set[str]] = {
    "row reduction": {"row_absmax", "row_argmax", "row_mean_var"},
    "column reduction": {"column_sum"},
    "norm": {"rmsnorm", "add_rmsnorm", "group_norm"},
    "softmax": {"log_softmax", "masked_softmax", "scaled_softmax"},
    "cross-entropy": {"smoothed_cross_entropy"},
    "elementwise fusion": {"silu_mul", "swiglu", "gelu_mul", "rope"},
}

#: Outputs whose dtype is not the first input's (the contract is in the workload's reference.py).
OUTPUT_DTYPES = {"row_argmax": torch.int64, "row_mean_var": torch.float32, "smoothed_cross_entropy": torch.float32}


def test_the_heldout_set_mixes_families_and_avoids_the_lineage_workloads() -> None:
    found = manifests()
    assert len(found) >= 22, sorted(found)
    assert not set(found) & EXPERT_WORKLOADS
    families = Counter(m.family for m in found.values())
    assert families["gemm"] >= 4 and families["attention"] >= 3, families
    assert families["row-reduction"] >= 6 and families["elementwise"] >= 2 and families["reduction"] >= 1, families
    for kind, names in KINDS.items():
        assert names & set(found), f"no held-out workload covers {kind} (one of {sorted(names)})"
        assert all(found[n].family in ("row-reduction", "reduction", "elementwise") for n in names & set(found))
    readme = (heldout_dirs()[0].parent / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in found), "heldout/README.md must list every workload"


@pytest.mark.parametrize("name", NAMES)
def test_manifest_and_reference(name: str) -> None:
    m = manifests()[name]
    assert (m.name, m.role, m.kernel) == (name, "heldout", "naive.py")
    assert 6 <= len(m.shapes) <= 10 and 1 <= len(m.cpu_shapes) <= 3
    for s in m.cpu_shapes:  # tiny: the interpreter is slow
        dims = [v for v in s.values() if isinstance(v, int)]
        assert max(dims) <= 4096 and math.prod(dims) <= 200_000, s
    assert set(m.tolerance) == set(m.dtypes)
    for s in (*m.shapes, *m.cpu_shapes):  # shapes become search contexts (tests/recommend, bench/recommend_*)
        problem_features({**s, "dtype": m.dtypes[0], "arch": 90})  # FeatureError on a key outside the vocabulary
    ref = _reference_module(name)
    for fn in ("make_inputs", "reference", "vendor", "flops", "bytes_moved"):
        assert callable(getattr(ref, fn, None)), f"{name}/reference.py lacks {fn}"
    shape = dict(m.cpu_shapes[0])
    inputs = ref.make_inputs(shape, "fp32", 0)
    again = ref.make_inputs(shape, "fp32", 0)
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
               for a, b in zip(inputs, again, strict=True)), "make_inputs is not seeded"
    other = ref.make_inputs(shape, "fp32", 1)
    assert not all(torch.equal(a, b) for a, b in zip(inputs, other, strict=True) if isinstance(a, torch.Tensor))
    expected, fast = ref.reference(*inputs), ref.vendor(*inputs)
    assert expected.dtype == OUTPUT_DTYPES.get(name, inputs[0].dtype)
    torch.testing.assert_close(fast, expected, rtol=1e-4, atol=1e-5)
    native = ref.make_inputs(shape, m.dtypes[0], 0)  # the output contract holds at the first manifest dtype
    assert ref.reference(*native).dtype == OUTPUT_DTYPES.get(name, native[0].dtype)
    assert ref.flops(dict(m.shapes[0])) > 0 and ref.bytes_moved(dict(m.shapes[0]), m.dtypes[0]) > 0


@pytest.mark.parametrize("name", NAMES)
def test_naive_kernel_is_a_plain_candidate(name: str) -> None:
    source = naive_sources()[name]
    tree = ast.parse(source)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= ALLOWED_IMPORTS, imported
    assert any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body)
    f = kernel_features(source)
    # naive: none of the tuning an operator would add
    assert not f["uses_autotune"] and f["num_stages"] is None and f["num_warps"] is None, f
    assert not (f["contiguity_hints"] or f["eviction_hints"] or f["grouped_order"] or f["persistent"]), f
    assert not (f["mask_elision"] or f["uses_tma"] or f["int64_offsets"] or f["uses_exp2"]), f


@pytest.fixture(scope="module")
def naive_results(cpu_validator: Any) -> dict[str, dict[str, Any]]:
    """Gate results of every naive kernel, plus one deliberately wrong kernel (``broken``)."""
    dirs = {d.name: d for d in heldout_dirs()}
    jobs = [(name, source, dirs[name]) for name, source in naive_sources().items()]
    rms = naive_sources()["rmsnorm"]
    broken = rms.replace("y = x / tl.sqrt(ms + eps) * w", "y = x / tl.sqrt(ms + eps)")
    assert broken != rms
    jobs.append(("broken", broken, dirs["rmsnorm"]))
    return validate_all(jobs, cpu_validator(seeds=2))


@pytest.mark.parametrize("name", NAMES)
def test_naive_kernel_passes_the_gates_on_cpu(name: str, naive_results: dict[str, dict[str, Any]]) -> None:
    result = naive_results[name]
    assert result["verdict"] == "pass", failed_gates(result)
    status = {g["gate"]: g["status"] for g in result["gates"]}
    assert status["static"] == status["compile"] == status["correctness"] == "pass", status


def test_the_gates_catch_a_wrong_heldout_kernel(naive_results: dict[str, dict[str, Any]]) -> None:
    result = naive_results["broken"]
    assert result["verdict"] == "fail"
    assert any(line.startswith("correctness:") for line in failed_gates(result)), result["gates"]


def test_paths_are_inside_the_heldout_folder() -> None:
    for m in manifests().values():
        assert Path(m.kernel_path).parent == Path(m.reference_path).parent == m.directory
