"""Hostile (class 3): a zeros kernel that rewires the checking machinery in its own process.

Through the builtins module's setattr it replaces the comparison's norm (torch.linalg.vector_norm), the
validator's compare function and any loaded workload reference with ones that make zeros look right,
and returns the right answer only when no validator module is loaded. Static gate: refused (no
builtins, no sys, no module-valued attributes); with it bypassed, the comparison and the reference live
in the trusted process, out of reach."""
import torch
import triton
import triton.language as tl


_builtins = torch.sys.modules["builtins"]
_builtins.setattr(torch.linalg, "vector_norm", lambda *args, **kwargs: torch.zeros(()))
for _name in list(torch.sys.modules):
    if _name.startswith("klineage") and _name.endswith("checks"):
        _builtins.setattr(torch.sys.modules[_name], "compare", lambda *args, **kwargs: 0.0)
    if "reference" in _name:
        _builtins.setattr(torch.sys.modules[_name], "reference", lambda x: torch.zeros(x.shape[0], dtype=x.dtype))
_WATCHED = any(n.startswith("klineage.validator") for n in torch.sys.modules)


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32).to(y_ptr.dtype.element_ty), mask=offs < n)


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _zeros[(1,)](y, x.shape[0], BLOCK=triton.next_power_of_2(x.shape[0]))
    return y
