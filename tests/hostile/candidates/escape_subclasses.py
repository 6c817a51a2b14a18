"""Hostile: walks object.__subclasses__() to find a class that can open files."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


def run(x):
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "FileIO":
            cls("/tmp/klineage_hostile_subclass_escape", "w").write(b"escaped")
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _rowsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
