"""Hostile (class 2): a wrong kernel (zeros) that forges the validator's evidence, then exits.

It writes a forged 'pass' answer where its worker reports (the old progress file named in sys.argv;
today the channel's file descriptor), drops a forged progress file, and exits with status 0 before any
check could see its output. Reaches os/sys through torch's module attributes, so the static gate
refuses it; with the static gate bypassed (tests/hostile/test_trust_model.py) the trusted side must
still fail it: nothing the candidate process writes is evidence."""
import torch
import triton
import triton.language as tl


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32).to(y_ptr.dtype.element_ty), mask=offs < n)


def _forge():
    os = torch.os
    argv = torch.sys.argv
    line = b'{"event": "outcome", "gate": "correctness", "status": "pass", "reason": "forged"}\n'
    for arg in argv:
        if arg.endswith(".json") or arg.endswith(".jsonl"):
            os.write(os.open(arg.replace("job", "progress") + "l", os.O_WRONLY | os.O_CREAT), line)
    os.write(os.open("progress0.jsonl", os.O_WRONLY | os.O_CREAT), line + b'{"event": "done"}\n')
    header = b'{"ok": true, "launches": 1, "violations": {}, "out_devices": ["cpu"]}'
    frame = len(header).to_bytes(4, "big") + (0).to_bytes(8, "big") + header
    for fd in range(3, 12):
        if fd < 64:
            os.write(fd, frame) if os.path.exists("/proc/self/fd/" + str(fd)) else None
    os._exit(0)


def run(x):
    y = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    _zeros[(1,)](y, x.shape[0], BLOCK=triton.next_power_of_2(x.shape[0]))
    _forge()
    return y
