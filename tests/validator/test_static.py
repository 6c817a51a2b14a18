"""The static gate: accepts the expert style, refuses each forbidden construct with a clear reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klineage.validator.static import check_source

WORKLOADS = Path(__file__).resolve().parent / "workloads"

GOOD = '''
import math
import torch
import triton
import triton.language as tl

_SM = {}


@triton.jit
def _helper(x):
    return x * 2


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"])
@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, _helper(tl.exp(v)) + tl.sum(v, axis=0), mask=offs < n)


def _launch(kernel, grid, *args, **kwargs):
    kernel[grid](*args, **kwargs)


def run(x: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    x = x.contiguous().view(-1)
    y = torch.empty_like(x)
    if x.device.type == "cuda":
        _SM[0] = torch.cuda.get_device_properties(x.device).multi_processor_count
    scale = math.sqrt(n) * torch.finfo(torch.float32).eps
    _launch(_kernel, lambda meta: (triton.cdiv(n, meta["BLOCK"]),), x, y, n)
    return y.view(x.shape) if scale > 0 else y
'''


def test_expert_style_source_passes() -> None:
    report = check_source(GOOD)
    assert report.ok, report.reason
    assert report.kernels == ["_helper", "_kernel"]
    assert report.launches == 1 and not report.uses_dot


def test_workload_kernels_pass_and_dot_is_detected() -> None:
    rowsum = check_source((WORKLOADS / "rowsum" / "kernel.py").read_text())
    matmul = check_source((WORKLOADS / "matmul_small" / "kernel.py").read_text())
    assert rowsum.ok and not rowsum.uses_dot
    assert matmul.ok and matmul.uses_dot


def _variant(host: str = "", kernel: str = "", top: str = "") -> str:
    return f'''
import torch
import triton
import triton.language as tl
{top}

@triton.jit
def _k(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs)
    {kernel or "pass"}
    tl.store(y_ptr + offs, v)


def run(x):
    y = torch.empty_like(x)
    {host or "pass"}
    _k[(1,)](x, y, BLOCK=16)
    return y
'''


BAD = [  # (where the code goes, the code, what the reason must say; None = must pass)
    ("top", "import os", "forbidden import 'os'"),
    ("top", "import numpy as np", "forbidden import 'numpy'"),
    ("top", "from subprocess import run as go", "forbidden import 'from subprocess"),
    ("top", "from torch import softmax", "torch compute op 'torch.softmax'"),
    ("top", "class A:\n    pass", "class definitions are not allowed"),
    ("top", "from torch import empty_like as alloc", None),
    ("host", "y = torch.softmax(x, -1)", "torch compute op 'torch.softmax'"),
    ("host", "y = torch.nn.functional.gelu(x)", "torch compute op 'torch.nn.functional.gelu'"),
    ("host", "y = x @ x", "matrix-multiply operator '@'"),
    ("host", "y = x.exp()", "tensor compute method '.exp()'"),
    ("host", "y = x.float().mean(0)", "tensor compute method '.mean()'"),
    ("host", "f = torch.Tensor.sum", "torch compute op 'torch.Tensor.sum'"),
    ("host", "torch.cuda.synchronize()", "streams, events, graphs"),
    ("host", "e = torch.cuda.Event()", "streams, events, graphs"),
    ("host", "g = torch.cuda.CUDAGraph()", "streams, events, graphs"),
    ("host", "t = torch._C", "private torch attribute"),
    ("host", "k = triton.runtime.driver", "'triton.runtime.driver' is not allowed"),
    ("host", "triton.knobs.runtime.interpret = True", "attribute assignment"),
    ("host", "x.data = y", "attribute assignment"),
    ("host", "f = getattr(torch, 'sum')", "'getattr' is not allowed"),
    ("host", "eval('1')", "'eval' is not allowed"),
    ("host", "exec('1')", "'exec' is not allowed"),
    ("host", "open('/tmp/x', 'w')", "'open' is not allowed"),
    ("host", "g = globals()", "'globals' is not allowed"),
    ("host", "c = x.__class__", "dunder attribute '.__class__'"),
    ("host", "b = __builtins__", "dunder name '__builtins__'"),
    ("host", "m = __import__('os')", "dunder name '__import__'"),
    ("host", "torch = None", "rebinding the module name 'torch'"),
    ("host", "y = torch.Tensor(4)", "calling 'torch.Tensor(...)' is not allowed"),
    ("host", "y = torch.zeros_like(x) if x.dim() == 1 else torch.full(x.shape, 0.0, device=x.device)", None),
    ("host", "n = triton.next_power_of_2(x.shape[-1]) * x.element_size()", None),
    ("kernel", "v = tl.core._unwrap_if_constexpr(v)", "private attribute"),
    ("kernel", "v = tl.dot(v, v)", None),
    # the whitelist (issue 18, class 1 and 5): module aliasing, module-valued attributes, storage/file APIs
    ("host", "T = torch", "module aliasing: the module 'torch'"),
    ("host", "f = (torch, 1)", "module aliasing: the module 'torch'"),
    ("host", "tl.core.builtins.open('/tmp/x')", "'triton.language.core.builtins.open' is not allowed"),
    ("kernel", "v = tl.core.builtins.len(v)", "'triton.language.core.builtins.len' is not allowed"),
    ("host", "m = tl.extra.modules", "'triton.language.extra.modules' is not allowed"),
    ("host", "m = torch.os.system('true')", "'torch.os.system' is not allowed"),
    ("host", "m = torch.sys.modules", "'torch.sys.modules' is not allowed"),
    ("host", "s = x.untyped_storage()", "attribute '.untyped_storage' is not allowed"),
    ("host", "s = torch.UntypedStorage.from_file('/etc/hostname', False, 8)", "'torch.UntypedStorage.from_file'"),
    ("host", "s = torch.from_file('/tmp/f', shared=True, size=8)", "'torch.from_file' is not allowed"),
    ("host", "s = torch.float16.from_file", "'torch.float16.from_file' is not allowed"),
    ("host", "a = x.numpy()", "attribute '.numpy' is not allowed"),
    ("host", "a = '{0.dtype}'.format(x)", "attribute '.format' is not allowed"),
    ("host", "a = builtins.setattr", "name 'builtins' is not defined in the candidate"),
    ("host", "a = x._base", "private attribute '._base'"),
    ("kernel", "h = v.handle", "attribute '.handle' is not allowed in kernel code"),
    ("host", "a = triton.cdiv(x.shape[0], 2) + triton.next_power_of_2(x.shape[-1])", None),
    ("kernel", "v = tl.math.exp2(v) + tl.extra.libdevice.exp(v)", None),
    ("top", "from triton.language.extra import libdevice", None),
    ("top", "from triton.language import core", "'triton.language.core' is not allowed"),
    ("host", "n = torch.cuda.get_device_properties(x.device).multi_processor_count + x.stride(0) + x.numel()", None),
]


@pytest.mark.parametrize(("where", "code", "reason"), BAD)
def test_forbidden_constructs_are_refused(where: str, code: str, reason: str | None) -> None:
    source = _variant(**{where: code})
    report = check_source(source)
    if reason is None:
        assert report.ok, report.reason
    else:
        assert not report.ok
        assert reason in report.reason, report.reason
        assert "(line " in report.reason


def test_try_except_anywhere_is_refused() -> None:
    source = _variant(host="try:\n        pass\n    except Exception:\n        pass")
    assert "try/except is not allowed" in check_source(source).reason


def test_run_must_exist_and_launch_a_kernel() -> None:
    no_run = _variant().replace("def run(x):", "def main(x):")
    assert "must define run" in check_source(no_run).reason
    no_launch = _variant().replace("_k[(1,)](x, y, BLOCK=16)", "_k(x, y)")
    assert "never launches a Triton kernel" in check_source(no_launch).reason
    no_kernel = "import torch\n\ndef run(x):\n    return torch.empty_like(x)\n"
    assert "no @triton.jit kernel" in check_source(no_kernel).reason
    rebound = _variant() + "\nrun = torch.empty_like\n"
    assert "must define run" in check_source(rebound).reason


def test_syntax_error_is_readable() -> None:
    report = check_source("def run(x)\n    return x\n")
    assert not report.ok
    assert report.reason.startswith("syntax error at line 1")
    assert "expected ':'" in report.reason


def test_null_bytes_do_not_crash() -> None:
    assert not check_source("import torch\x00\n").ok


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_never_raises_on_arbitrary_text(text: str) -> None:
    report = check_source(text)
    assert isinstance(report.ok, bool)
    assert report.ok is False or report.kernels  # nothing random passes without a kernel


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["open", "eval", "exec", "getattr", "setattr", "globals", "vars", "compile", "__import__",
                        "breakpoint", "input", "type", "dir"]))
def test_reflection_builtins_refused_everywhere(name: str) -> None:
    host = _variant(host=f"z = {name}")
    kern = _variant(kernel=f"z = {name}")
    assert not check_source(host).ok
    assert not check_source(kern).ok


ROOT = Path(__file__).resolve().parents[2]


def _must_pass() -> dict[str, str]:
    """Every kernel the project relies on: experts, held-out naive kernels, fixtures, the validator's
    test workloads, every kernel of a committed lineage, and the hostile candidates caught after static."""
    import json

    from hostile.table import CANDIDATES, HONEST, HOSTILE

    files = [*ROOT.glob("workloads/*/expert.py"), *ROOT.glob("heldout/*/naive.py"),
             *ROOT.glob("tests/fixtures/kernels/*.py"), *WORKLOADS.glob("*/kernel.py"),
             *(CANDIDATES / f"{h.name}.py" for h in HOSTILE if h.gate != "static"),
             *(CANDIDATES / f"{name}.py" for name in HONEST)]
    sources = {str(f.relative_to(ROOT)): f.read_text(encoding="utf-8") for f in files}
    for doc in ROOT.glob("lineages/*.lineage.json"):
        for kernel in json.loads(doc.read_text(encoding="utf-8"))["kernels"]:
            sources[f"{doc.name}:{kernel['sha'][:12]}"] = kernel["source"]
    return sources


def test_the_whitelist_admits_every_kernel_the_project_relies_on() -> None:
    sources = _must_pass()
    assert len(sources) > 60
    refused = {name: check_source(src).reason for name, src in sources.items() if not check_source(src).ok}
    assert not refused, refused
