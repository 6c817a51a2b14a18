"""Run candidate modules under the Triton interpreter and compare them with a reference.

``TRITON_INTERPRET=1`` is set before triton is imported (conftest imports this module first). A
candidate is written to a file (``@triton.jit`` reads its source) and imported under a name derived
from its hash. Autotuned kernels run every config once (the interpreter has no timer; the first
config wins), so a config that is wrong fails the check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton.runtime.autotuner as _autotuner

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"
WORKLOADS = ROOT / "workloads"
EXPERTS = ("gemm", "softmax", "layernorm", "attention", "cross_entropy")
_TMP = Path(tempfile.mkdtemp(prefix="klineage-transforms-"))


def _bench_once(fn: Callable[[], Any], quantiles: Any = None) -> list[float]:
    fn()
    return [1.0, 1.0, 1.0]


# The interpreter has no benchmarker: run each config once and keep the first.
_autotuner.Autotuner.do_bench = property(lambda self: _bench_once)  # type: ignore[assignment]


def load(source: str) -> Any:
    """Import a candidate source as a fresh module."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = f"klineage_candidate_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    path = _TMP / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Case:
    """A kernel source with inputs and a reference: ``inputs()`` returns a list of input tuples."""

    name: str
    source: str
    inputs: Callable[[], list[tuple]]
    reference: Callable[..., Any]
    rtol: float = 1e-4
    atol: float = 1e-4


def max_error(out: Any, ref: Any) -> float:
    """Max abs error scaled by tolerance (<= 1 passes); inf on shape mismatch or NaN."""
    out = torch.as_tensor(out).float()
    ref = torch.as_tensor(ref).float()
    if out.shape != ref.shape or torch.isnan(out).any():
        return math.inf
    return float(((out - ref).abs() / (1e-4 + 1e-4 * ref.abs())).max()) if out.numel() else 0.0


def check(case: Case, source: str | None = None) -> float:
    """Run ``source`` (default the case's) on every input; return the worst scaled error."""
    mod = load(source or case.source)
    worst = 0.0
    for args in case.inputs():
        ref = case.reference(*args)
        out = mod.run(*args)
        err = (torch.as_tensor(out).float() - torch.as_tensor(ref).float()).abs()
        if (
            torch.as_tensor(out).shape != torch.as_tensor(ref).shape
            or torch.isnan(torch.as_tensor(out).float()).any()
        ):
            return math.inf
        scaled = err / (case.atol + case.rtol * torch.as_tensor(ref).float().abs())
        worst = max(worst, float(scaled.max()) if scaled.numel() else 0.0)
    return worst


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _naive_specs() -> dict[str, tuple[Callable[[], list[tuple]], Callable[..., Any]]]:
    def gemm() -> list[tuple]:
        g = _g(0)
        return [(torch.randn(40, 24, generator=g), torch.randn(24, 36, generator=g))]

    def softmax() -> list[tuple]:
        return [(torch.randn(7, 100, generator=_g(1)) * 3,)]

    def layernorm() -> list[tuple]:
        g = _g(2)
        return [
            (torch.randn(6, 200, generator=g), torch.randn(200, generator=g), torch.randn(200, generator=g))
        ]

    def rmsnorm() -> list[tuple]:
        g = _g(3)
        return [(torch.randn(9, 72, generator=g), torch.randn(72, generator=g))]

    def gelu() -> list[tuple]:
        return [(torch.randn(1000, generator=_g(4)) * 2,)]

    def cross_entropy() -> list[tuple]:
        g = _g(5)
        return [(torch.randn(5, 300, generator=g) * 2, torch.randint(0, 300, (5,), generator=g))]

    def attention() -> list[tuple]:
        g = _g(6)
        return [tuple(torch.randn((1, 2, 40, 16), generator=g) for _ in range(3))]

    def attn_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        n = q.shape[2]
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def rowsum() -> list[tuple]:
        return [(torch.randn(11, 50, generator=_g(7)),)]

    def linear() -> list[tuple]:
        g = _g(8)
        return [
            (torch.randn(20, 40, generator=g), torch.randn(24, 40, generator=g), torch.randn(24, generator=g))
        ]

    def logsumexp() -> list[tuple]:
        x = torch.randn(6, 150, generator=_g(9)) * 3
        x[1, :70] = -float("inf")  # a fully masked first chunk: the online form must not NaN
        return [(x,)]

    def cumsum() -> list[tuple]:
        return [(torch.randn(150, generator=_g(10)),)]

    def looped_softmax() -> list[tuple]:
        return [(torch.randn(5, 100, generator=_g(11)) * 3,)]

    def looped_rmsnorm() -> list[tuple]:
        g = _g(12)
        return [(torch.randn(4, 150, generator=g), torch.randn(150, generator=g))]

    def matmul_epilogue() -> list[tuple]:
        g = _g(13)
        return [
            (torch.randn(37, 40, generator=g), torch.randn(40, 21, generator=g), torch.randn(21, generator=g))
        ]

    return {
        "naive_matmul_epilogue": (matmul_epilogue, lambda x, w, b: torch.relu(x @ w + b)),
        "naive_looped_softmax": (looped_softmax, lambda x: torch.softmax(x, dim=-1)),
        "naive_looped_rmsnorm": (
            looped_rmsnorm,
            lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        ),
        "naive_logsumexp": (logsumexp, lambda x: torch.logsumexp(x, dim=-1)),
        "naive_cumsum": (cumsum, lambda x: torch.cumsum(x, dim=0)),
        "naive_linear": (linear, lambda x, w, b: x @ w.T + b),
        "naive_rowsum": (rowsum, lambda x: x.sum(-1)),
        "naive_gemm": (gemm, lambda a, b: a @ b),
        "naive_softmax": (softmax, lambda x: torch.softmax(x, dim=-1)),
        "naive_layernorm": (
            layernorm,
            lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        ),
        "naive_rmsnorm": (rmsnorm, lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
        "naive_gelu": (gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
        "naive_cross_entropy": (
            cross_entropy,
            lambda lg, t: torch.nn.functional.cross_entropy(lg, t, reduction="none"),
        ),
        "naive_attention": (attention, attn_ref),
    }


def naive_cases() -> dict[str, Case]:
    """The naive fixture kernels, each with inputs and a reference."""
    out = {}
    for name, (inputs, ref) in _naive_specs().items():
        out[name] = Case(name, (FIXTURES / f"{name}.py").read_text(), inputs, ref)
    return out


def expert_case(workload: str, max_shapes: int = 2) -> Case:
    """The expert kernel of a workload on its cpu_shapes (fp32)."""
    folder = WORKLOADS / workload
    expert = folder / "expert.py"
    manifest = folder / "manifest.toml"
    assert expert.read_text().strip(), f"{expert} is empty"
    meta = tomllib.loads(manifest.read_text())["workload"]
    spec = importlib.util.spec_from_file_location(
        f"klineage_ref_{workload}", folder / meta.get("reference", "reference.py")
    )
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    shapes = meta.get("cpu_shapes") or []
    # keep the interpreter run short: the smallest shapes
    shapes = sorted(shapes, key=lambda s: math.prod(v for v in s.values() if isinstance(v, int)))[:max_shapes]
    tol = float(meta.get("tolerance", {}).get("fp32", 1e-4))

    def inputs() -> list[tuple]:
        return [tuple(ref.make_inputs(shape, "fp32", 0)) for shape in shapes]

    return Case(
        f"expert_{workload}", expert.read_text(), inputs, ref.reference, rtol=max(tol, 1e-4), atol=1e-4
    )
