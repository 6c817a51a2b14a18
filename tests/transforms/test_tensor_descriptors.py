"""tensor-descriptors: a matmul's tile loads and output store through device-side tensor descriptors
(TMA), correct under the interpreter on held-out matmuls of shapes larger than a tile and not divisible
by it; round trips both ways; every refusal says why; what TMA cannot describe takes the kernel the
operator started from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from klineage.transforms.contracts import contract_of, unmet
from klineage.transforms.facts import operator_anchors
from klineage.transforms.features import kernel_features
from klineage.transforms.registry import get_operator
from klineage.validator.static import check_source
from tests.transforms.harness import Case, check, load, naive_cases

ROOT = Path(__file__).resolve().parents[2]
OP = get_operator("tensor-descriptors")

# held-out matmuls and a shape each: larger than the 32-wide tiles, divisible by none of them, every row
# 16-byte aligned in fp32 (what TMA needs; the others take the pointer kernel, see below)
HELDOUT = {
    "bmm": {"B": 2, "M": 45, "N": 52, "K": 76},
    "matmul_nt": {"M": 45, "N": 52, "K": 76},
    "matmul_tn": {"M": 44, "N": 52, "K": 75},
    "linear_gelu": {"M": 45, "N": 52, "K": 76},
    "linear_bias_relu": {"M": 33, "N": 36, "K": 68},
    "matmul_residual": {"M": 45, "N": 52, "K": 76},
    "small_k_gemm": {"M": 45, "N": 52, "K": 96},
    "tall_skinny_gemm": {"M": 100, "N": 24, "K": 48},
}


def _reference(name: str) -> Any:
    path = ROOT / "heldout" / name / "reference.py"
    spec = importlib.util.spec_from_file_location(f"klineage_tma_ref_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _case(name: str, shape: dict[str, int], dtype: str = "fp32") -> Case:
    ref = _reference(name)
    tol = 1e-3 if dtype == "fp32" else 1e-2
    return Case(f"{name}-{dtype}", (ROOT / "heldout" / name / "naive.py").read_text(),
                lambda: [tuple(ref.make_inputs(shape, dtype, 0))], ref.reference, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(HELDOUT))
def test_applied_heldout_matmuls_are_correct_and_round_trip(name: str) -> None:
    case = _case(name, HELDOUT[name])
    rw = OP.apply(case.source)
    assert rw is not None, OP.refusals(case.source)
    assert OP.present(rw.source) and not OP.applicable(rw.source) and OP.apply(rw.source) is None
    assert "make_tensor_descriptor" in rw.source and "triton.set_allocator(" in rw.source
    # the copy's loop tiles and output tile go through descriptors: no masked tile access is left there
    copy = rw.source.split("_tma_kernel(")[1].split("\ndef run(")[0]
    assert copy.count(".load([") == 2 and ".store([" in copy
    assert check_source(rw.source).ok, check_source(rw.source).reason
    assert check(case, rw.source) <= 1.0, rw.diff
    back = OP.simplify(rw.source)
    assert back is not None and not OP.present(back.source) and OP.applicable(back.source)
    assert back.source == case.source
    assert check(case, back.source) <= 1.0, back.diff
    assert OP.apply(back.source, **back.params).source == rw.source  # type: ignore[union-attr]
    again = OP.apply(back.source)
    assert again is not None and again.source == rw.source, again.diff if again else None


def test_transposed_operands_read_the_transposed_descriptor() -> None:
    """matmul_nt's B tile (K x N) is contiguous along its first axis: the descriptor describes B as
    stored, (N, K), and its tile is read back transposed; matmul_tn's A likewise."""
    nt = OP.apply((ROOT / "heldout" / "matmul_nt" / "naive.py").read_text())
    tn = OP.apply((ROOT / "heldout" / "matmul_tn" / "naive.py").read_text())
    assert nt is not None and tn is not None
    assert "shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K]" in nt.source
    assert "b = b_desc.load([pid_n * BLOCK_N, k0]).T" in nt.source
    assert "shape=[K, M], strides=[M, 1], block_shape=[BLOCK_K, BLOCK_M]" in tn.source
    assert "a = a_desc.load([k0, pid_m * BLOCK_M]).T" in tn.source


@pytest.mark.parametrize("name", ["bmm", "matmul_nt"])
def test_half_precision(name: str) -> None:
    shape = {k: (v + 7) // 8 * 8 if k != "B" else v for k, v in HELDOUT[name].items()}  # 16-byte rows in fp16
    case = _case(name, shape, "fp16")
    rw = OP.apply(case.source)
    assert rw is not None and check(case, rw.source) <= 1.0


def test_what_tma_cannot_describe_takes_the_pointer_kernel() -> None:
    """A row of 33 fp32 (132 bytes) is not 16-byte aligned: the launch runs the pointer kernel the
    operator started from (a TMA unit would read a wrong layout), so the module is correct on it too."""
    case = _case("matmul_nt", {"M": 40, "N": 40, "K": 33})
    rw = OP.apply(case.source)
    assert rw is not None
    assert check(case, rw.source) <= 1.0
    (args,) = case.inputs()
    launched: list[str] = []
    module = load(rw.source)
    for name in ("matmul_nt_kernel", "matmul_nt_tma_kernel"):
        kernel = getattr(module, name)
        setattr(module, name, _Recording(kernel, name, launched))
    module.run(*args)
    assert launched == ["matmul_nt_kernel"]
    aligned = _case("matmul_nt", {"M": 40, "N": 40, "K": 32})
    (args,) = aligned.inputs()
    launched.clear()
    module.run(*args)
    assert launched == ["matmul_nt_tma_kernel"]


class _Recording:
    """A kernel whose launches are recorded by name (``kernel[grid](...)``)."""

    def __init__(self, kernel: Any, name: str, launched: list[str]) -> None:
        self.kernel, self.name, self.launched = kernel, name, launched

    def __getitem__(self, grid: Any) -> Any:
        self.launched.append(self.name)
        return self.kernel[grid]


GEMM = naive_cases()["naive_gemm"]


def test_stride_arguments_are_checked_at_the_launch() -> None:
    """naive_gemm takes its strides as arguments: the descriptors assume the inner ones are 1, so the
    launch takes the copy only when they are; a column-major A takes the pointer kernel."""
    rw = OP.apply(GEMM.source)
    assert rw is not None
    assert "strides=[stride_am, 1]" in rw.source and "strides=[stride_bk, 1]" in rw.source
    assert "if a.stride(1) == 1 and b.stride(1) == 1 and c.stride(1) == 1 and not any(" in rw.source
    g = torch.Generator().manual_seed(5)
    grown = Case("gemm-grown", GEMM.source,
                 lambda: [(torch.randn(37, 52, generator=g), torch.randn(52, 44, generator=g))],
                 GEMM.reference, rtol=1e-3, atol=1e-3)
    assert check(grown, rw.source) <= 1.0
    a, b = torch.randn(52, 37).t(), torch.randn(52, 44)  # a column-major A
    assert torch.allclose(load(rw.source).run(a, b), a @ b, atol=1e-4)
    back = OP.simplify(rw.source)
    assert back is not None and back.source == GEMM.source
    again = OP.apply(back.source)
    assert again is not None and again.source == rw.source


# nn.Linear written the obvious way: the weight stays (N, K) and every stride is an argument; the host passes
# w.stride(0), w.stride(1) as the kernel's (stride_wn, stride_wk), so B[k, n]'s first axis is the contiguous one.
LINEAR_NT = '''import torch
import triton
import triton.language as tl


@triton.jit
def linear_kernel(a_ptr, w_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, w)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, w):
    M, K = a.shape
    N = w.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    linear_kernel[grid](a, w, c, M, N, K, a.stride(0), a.stride(1), w.stride(0), w.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


def test_a_weight_passed_by_its_own_strides_is_read_through_the_transposed_descriptor() -> None:
    """The host says which stride is the weight's last-dim one (w.stride(1) as stride_wk): the descriptor
    describes W as stored, (N, K), its tile is read back transposed, and the launch checks w.stride(1) == 1,
    true for every contiguous weight (guessing row-major would check w.stride(0) == 1 and leave the copy
    dead); a weight that is not contiguous that way still takes the pointer kernel."""
    rw = OP.apply(LINEAR_NT)
    assert rw is not None, OP.refusals(LINEAR_NT)
    assert "shape=[N, K], strides=[stride_wn, 1]" in rw.source and ").T" in rw.source
    assert "w.stride(1) == 1" in rw.source and "w.stride(0) == 1" not in rw.source
    g = torch.Generator().manual_seed(3)
    case = Case("linear-nt", LINEAR_NT, lambda: [(torch.randn(45, 76, generator=g), torch.randn(52, 76, generator=g))],
                lambda a, w: a @ w.t(), rtol=1e-3, atol=1e-3)
    assert check(case, rw.source) <= 1.0, rw.diff
    module = load(rw.source)
    launched: list[str] = []

    class Counted:  # stands for a kernel in run()'s globals: records each launch, then launches it
        def __init__(self, name: str, kernel: Any) -> None:
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid: Any) -> Any:
            launched.append(self.name)
            return self.kernel[grid]

    kernels = [n for n in ("linear_kernel", *(n for n in vars(module) if n.endswith("_tma_kernel")))]
    assert len(kernels) == 2, kernels
    for name in kernels:
        setattr(module, name, Counted(name, getattr(module, name)))
    a, w = torch.randn(45, 76), torch.randn(52, 76)
    assert torch.allclose(module.run(a, w), a @ w.t(), atol=1e-4)
    assert launched and all(n.endswith("_tma_kernel") for n in launched), launched  # the copy ran
    launched.clear()
    w_t = torch.randn(76, 52).t()  # (N, K) with unit stride on N: TMA cannot describe it this way
    assert torch.allclose(module.run(a, w_t), a @ w_t.t(), atol=1e-4)
    assert launched == ["linear_kernel"], launched
    back = OP.simplify(rw.source)
    assert back is not None and back.source == LINEAR_NT


# A kernel written with descriptors (what a TMA expert looks like), to walk back and forth.
DESCRIPTOR_KERNEL = '''"""C = A @ B through tensor descriptors."""

import torch
import triton
import triton.language as tl


@triton.jit
def tma_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([k, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def alloc(size, alignment, stream):
        return torch.empty(size, device=a.device, dtype=torch.int8)

    triton.set_allocator(alloc)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    tma_matmul_kernel[grid](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


def _descriptor_case() -> Case:
    g = torch.Generator().manual_seed(7)
    return Case("tma-matmul", DESCRIPTOR_KERNEL,
                lambda: [(torch.randn(45, 76, generator=g), torch.randn(76, 52, generator=g))],
                lambda a, b: a @ b, rtol=1e-3, atol=1e-3)


def test_simplify_then_apply_on_a_descriptor_kernel() -> None:
    case = _descriptor_case()
    assert check(case) <= 1.0
    assert OP.present(case.source) and not OP.applicable(case.source)
    assert kernel_features(case.source)["uses_tma"]
    back = OP.simplify(case.source)
    assert back is not None and back.direction == "simplify"
    assert "make_tensor_descriptor" not in back.source and "set_allocator" not in back.source
    assert back.source.count("mask=") == 3 and not kernel_features(back.source)["uses_tma"]
    assert check(case, back.source) <= 1.0, back.diff
    assert OP.applicable(back.source) and not OP.present(back.source)
    exact = OP.apply(back.source, **back.params)
    assert exact is not None and exact.source == case.source
    generic = OP.apply(back.source)
    assert generic is not None and OP.present(generic.source)
    assert check(case, generic.source) <= 1.0, generic.diff
    assert check_source(generic.source).ok


def test_simplify_leaves_descriptor_uses_it_does_not_recognise() -> None:
    # a descriptor handed to a helper (the attention expert) or made twice (the gemm expert's c_desc)
    for w in ("attention", "gemm"):
        src = (ROOT / "workloads" / w / "expert.py").read_text()
        assert OP.present(src) and OP.simplify(src) is None and OP.apply(src) is None
    padded = DESCRIPTOR_KERNEL.replace("block_shape=[BLOCK_M, BLOCK_K])", 'block_shape=[BLOCK_M, BLOCK_K], '
                                       'padding_option="nan")')
    assert padded != DESCRIPTOR_KERNEL and OP.simplify(padded) is None


MATMUL_NT = (ROOT / "heldout" / "matmul_nt" / "naive.py").read_text()
BMM = (ROOT / "heldout" / "bmm" / "naive.py").read_text()

# (source, old, new, the reason apply gives)
REFUSE = {
    "non-unit inner stride": (MATMUL_NT, "rm[:, None] * K + (k0 + rk)[None, :],",
                              "rm[:, None] * K + (k0 + rk)[None, :] * 2,", "no unit inner stride"),
    "3-D tile": (BMM, "a = tl.load(a_base + rm[:, None] * K + (k0 + rk)[None, :],",
                 "a = tl.load(a_base + rm[:, None, None] * K + (k0 + rk)[None, :, None],", "3-D"),
    "already present": (OP.apply(MATMUL_NT).source, "", "", "already uses tensor descriptors"),  # type: ignore[union-attr]
    "pointer increments": ((ROOT / "workloads" / "gemm" / "expert.py").read_text(), "", "",
                           "advanced by increments"),
    "padding other than zero": (MATMUL_NT, "mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)",
                                "mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=1.0)", "pads with 1.0"),
    "unmasked axis": (MATMUL_NT, "mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)",
                      "mask=(k0 + rk)[None, :] < K, other=0.0)", "does not bound both tile axes"),
    "mask of another index": (MATMUL_NT, "mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)",
                              "mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)", "bounds another index"),
    "eviction hint": (MATMUL_NT, "(k0 + rk)[None, :] < K), other=0.0)",
                      '(k0 + rk)[None, :] < K), other=0.0, eviction_policy="evict_last")', "eviction_policy"),
}


@pytest.mark.parametrize("case", sorted(REFUSE))
def test_refusals_say_why(case: str) -> None:
    source, old, new, why = REFUSE[case]
    assert old in source
    source = source.replace(old, new)
    assert OP.apply(source) is None and not OP.applicable(source)
    reasons = OP.refusals(source)
    assert any(why in r for r in reasons.values()), reasons


def test_contract_feature_and_anchor() -> None:
    contract = contract_of("tensor-descriptors")
    before = kernel_features(MATMUL_NT)
    assert unmet(contract, before) == [] and not before["uses_tma"]
    rw = OP.apply(MATMUL_NT)
    assert rw is not None
    after = kernel_features(rw.source)
    assert after["uses_tma"] and after["has_k_loop"]
    assert "conflicts with uses_tma" in unmet(contract, after)[0]
    assert operator_anchors(MATMUL_NT)["tensor-descriptors"]["state"] == "applicable"
    assert operator_anchors(rw.source)["tensor-descriptors"]["state"] == "present"


def test_the_static_gate_passes_the_rewrite_and_still_refuses_hostile_uses() -> None:
    """The rewrite needs only names the policy already allows (tl.make_tensor_descriptor, the
    descriptor's .load / .store, triton.set_allocator, torch.empty, .data_ptr / .element_size): no
    whitelist change. The same places used for something else are still refused."""
    rw = OP.apply(MATMUL_NT)
    assert rw is not None and check_source(rw.source).ok
    hostile = {
        "a private allocator": ("triton.set_allocator(tma_scratch)",
                                "triton.runtime._allocation._allocator.set(tma_scratch)"),
        "host-side descriptors": ("triton.set_allocator(tma_scratch)",
                                  "triton.tools.tensor_descriptor.TensorDescriptor(a, [1], [1], [1])"),
        "storage in the allocator": ("return torch.empty(size, device=a.device, dtype=torch.int8)",
                                     "return a.untyped_storage()"),
        "a dunder on a descriptor": ("a = a_desc.load([pid_m * BLOCK_M, k0])",
                                     "a = a_desc.__class__"),
        "an attribute descriptors do not whitelist": ("a = a_desc.load([pid_m * BLOCK_M, k0])",
                                         "a = a_desc.base"),
    }
    for what, (old, new) in hostile.items():
        assert old in rw.source, what
        report = check_source(rw.source.replace(old, new))
        assert not report.ok, what


def test_tile_size_and_autotune_still_apply_after_it() -> None:
    """The descriptor's shape / block_shape pair each tile with the extent it partitions (the masks that
    said so are gone), so tile-size and autotune keep their grids right on the rewritten kernel."""
    case = _case("bmm", HELDOUT["bmm"])
    rw = OP.apply(case.source)
    assert rw is not None
    for op_id in ("tile-size", "autotune"):
        after = get_operator(op_id).apply(rw.source)
        assert after is not None, op_id
        assert check(case, after.source) <= 1.0, after.diff
