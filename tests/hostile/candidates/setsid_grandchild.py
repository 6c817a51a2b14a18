"""Hostile (class 4): leaves a grandchild running in a new session (double fork + setsid), which a
process-group kill does not reach. The grandchild execs 'sleep 4242.25' so that a test can look for
it. Static gate: refused (os through torch); with it bypassed, the pool kills every descendant of the
worker after the job (PID namespace or subreaper + /proc walk)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(v, axis=0).to(y_ptr.dtype.element_ty))


def _leave_grandchild():
    os = torch.os
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "4242.25"])
        os._exit(0)
    os.waitpid(pid, 0)


def run(x):
    _leave_grandchild()
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _rowsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
