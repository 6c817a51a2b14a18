#!/usr/bin/env python3
"""Time source-level variants of the five expert kernels at their key shapes, in one GPU call.

A variant is the expert.py source with a few literal substitutions (the same kind of edit the
lineage walker makes). Each variant is checked against the reference at each key shape and timed
next to the vendor with the method of ``bench/workloads.py`` (L2 flushed, CUDA events, medians).
For autotuned kernels the per-config autotune timings are printed too. Results go to stdout (a
short table at the end) and, with ``--out DIR``, to ``DIR/explore.jsonl`` and ``DIR/explore.txt``.

Plans (records of calls made on 2026-12-03; ``--dry`` reports which substitutions are
stale against today's kernels):
- ``tune1``: the sweep of the first H200 call, run against the kernels of commit 212d2cf.
- ``w16``: layernorm's hoisted weight and bias kept in 16 bits (third session, issue 4).
- ``occ``: attention with register caps for two or three CTAs per SM (sixth session, issue 4).
- ``ln_fused``: layernorm with mean and variance from one reduction, and with a register cap.
- ``select``: the open questions of the second call, run against commit f9932d5; with ``--select`` the
  variant with the best geometric-mean speedup over the plan's cases (all of them correct, and at least
  1% ahead of the current expert) is written over ``workloads/<name>/expert.py`` before the final
  measurement, and a copy goes to ``--out``. It chose ``num_stages=1`` for layernorm and one program per
  row for cross_entropy, since folded into those kernels.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

import workloads as wl

GEMM_TABLE = """        (128, 256, 64, 3, 8, True),
        (128, 256, 64, 4, 8, True),
        (128, 128, 64, 4, 8, False),
        (128, 128, 64, 5, 4, False),
        (64, 128, 64, 5, 4, False),
"""
GEMM_BROAD = """        (128, 256, 64, 3, 8, True),
        (128, 256, 64, 4, 8, True),
        (128, 256, 64, 3, 8, False),
        (256, 128, 64, 3, 8, True),
        (128, 128, 64, 4, 8, False),
        (128, 128, 128, 3, 8, False),
        (128, 128, 64, 5, 4, False),
        (64, 128, 64, 5, 4, False),
        (64, 256, 64, 4, 4, True),
"""
ATTN_TABLE = """        (128, 64, 4, 3),
        (128, 128, 8, 3),
        (128, 64, 8, 3),
        (128, 128, 8, 2),
        (64, 64, 4, 4),
"""
ATTN_BROAD = """        (128, 64, 4, 3),
        (128, 64, 4, 4),
        (128, 128, 8, 3),
        (128, 128, 8, 2),
        (128, 64, 8, 3),
        (128, 64, 8, 4),
        (64, 128, 4, 3),
"""

PLANS_TUNE1: dict[str, dict] = {
    "gemm": {
        "tuned": "_matmul_tma_persistent_kernel",
        "cases": [({"M": 8192, "N": 8192, "K": 8192}, "bf16"), ({"M": 4096, "N": 4096, "K": 4096}, "bf16"),
                  ({"M": 8192, "N": 8192, "K": 512}, "bf16"), ({"M": 1024, "N": 1024, "K": 1024}, "bf16"),
                  ({"M": 3000, "N": 5000, "K": 2000}, "bf16")],
        "variants": {
            "expert": [],
            "broad": [(GEMM_TABLE, GEMM_BROAD)],
            "noflatten": [("flatten=True)", "flatten=False)")],
            "group1": [('"GROUP_SIZE_M": 8', '"GROUP_SIZE_M": 1')],
            "nonpersistent": [("return (min(num_sms, tiles),)", "return (tiles,)"),
                              ("_launch(_matmul_tma_persistent_kernel, grid, device, a, b, c, M, N, K, "
                               "NUM_SMS=num_sms)",
                               "_launch(_matmul_tma_persistent_kernel, grid, device, a, b, c, M, N, K, "
                               "NUM_SMS=1 << 20)")],
        },
    },
    "softmax": {
        "cases": [({"rows": 16384, "cols": 8192}, "bf16"), ({"rows": 16384, "cols": 8192}, "fp32"),
                  ({"rows": 65536, "cols": 128}, "bf16"), ({"rows": 8192, "cols": 1000}, "bf16"),
                  ({"rows": 1024, "cols": 50257}, "bf16"), ({"rows": 256, "cols": 131072}, "bf16")],
        "variants": {
            "expert": [],
            "nopersist": [("programs = min(n_blocks, sms * max(1, 32 // num_warps))", "programs = n_blocks")],
            "persist64": [("programs = min(n_blocks, sms * max(1, 32 // num_warps))",
                           "programs = min(n_blocks, sms * max(1, 64 // num_warps))")],
            "warps16": [("if tile_elems >= 16384:", "if tile_elems >= 8192:")],
            "warps4": [("if tile_elems >= 4096:\n        return 8",
                        "if tile_elems >= 1 << 30:\n        return 8")],
            "noevict": [(', eviction_policy="evict_first"', "")],
            "stages1": [("num_stages=2", "num_stages=1")],
            "tile8k": [("TILE_ELEMS = 4096", "TILE_ELEMS = 8192")],
            "single64k": [("SINGLE_PASS_MAX = 32768", "SINGLE_PASS_MAX = 65536")],
            "online4k": [("ONLINE_BLOCK = 8192", "ONLINE_BLOCK = 4096")],
            "online_p4": [("programs = min(n_rows, sms * 2)", "programs = min(n_rows, sms * 4)")],
        },
    },
    "layernorm": {
        "cases": [({"rows": 16384, "cols": 8192}, "bf16"), ({"rows": 32768, "cols": 768}, "bf16"),
                  ({"rows": 65536, "cols": 128}, "bf16"), ({"rows": 1024, "cols": 65536}, "bf16")],
        "variants": {
            "expert": [],
            "nopersist": [("programs = min(n_blocks, sms * max(1, 32 // num_warps))", "programs = n_blocks")],
            "persist64": [("programs = min(n_blocks, sms * max(1, 32 // num_warps))",
                           "programs = min(n_blocks, sms * max(1, 64 // num_warps))")],
            "warps16": [("if tile_elems >= 16384:", "if tile_elems >= 8192:")],
            "noevict": [(', eviction_policy="evict_first"', "")],
            "stages1": [("num_stages=2", "num_stages=1")],
            "tile8k": [("TILE_ELEMS = 4096", "TILE_ELEMS = 8192")],
            "chunk_p4": [("programs = min(n_rows, sms * 2)", "programs = min(n_rows, sms * 4)")],
            "nohoist": [("HOIST_MAX = 8192", "HOIST_MAX = 0")],
            "single32k": [("SINGLE_PASS_MAX = 16384", "SINGLE_PASS_MAX = 32768")],
        },
    },
    "cross_entropy": {
        "cases": [({"rows": 8192, "vocab": 32768}, "bf16"), ({"rows": 4096, "vocab": 128256}, "bf16"),
                  ({"rows": 16384, "vocab": 4096}, "bf16")],
        "variants": {
            "expert": [],
            "block4k": [("min(8192, triton.next_power_of_2(n_cols))",
                         "min(4096, triton.next_power_of_2(n_cols))")],
            "block16k": [("min(8192, triton.next_power_of_2(n_cols))",
                          "min(16384, triton.next_power_of_2(n_cols))"),
                         ("16 if block_v >= 8192", "16 if block_v >= 16384")],
            "warps8": [("16 if block_v >= 8192", "16 if block_v >= 1 << 30")],
            "ctas32": [("64 // num_warps", "32 // num_warps")],
            "ctas128": [("64 // num_warps", "128 // num_warps")],
            "noevict": [(', eviction_policy="evict_first"', "")],
            "stages2": [("for start in tl.range(0, n_full, BLOCK_V):",
                         "for start in tl.range(0, n_full, BLOCK_V, num_stages=2):")],
        },
    },
    "attention": {
        "tuned": "_attn_fwd_kernel",
        "cases": [({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": False}, "bf16"),
                  ({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": True}, "bf16"),
                  ({"B": 8, "H": 16, "S": 4096, "D": 64, "causal": False}, "bf16"),
                  ({"B": 8, "H": 16, "S": 4096, "D": 64, "causal": True}, "bf16")],
        "variants": {
            "expert": [],
            "broad": [(ATTN_TABLE, ATTN_BROAD)],
            "nolpt": [("start_m = num_m - 1 - tl.program_id(0)", "start_m = tl.program_id(0)")],
        },
    },
}


LN_ROWS = "        rows = max(1, min(TILE_ELEMS // block_n, triton.next_power_of_2(n_rows)))"
LN_PROGRAMS = "        programs = min(n_blocks, sms * max(1, 32 // num_warps))"

PLANS_SELECT: dict[str, dict] = {
    "layernorm": {
        "cases": [({"rows": 16384, "cols": 8192}, "bf16"), ({"rows": 32768, "cols": 768}, "bf16"),
                  ({"rows": 65536, "cols": 128}, "bf16"), ({"rows": 2048, "cols": 12288}, "bf16"),
                  ({"rows": 8192, "cols": 5120}, "bf16")],
        "variants": {
            "expert": [],
            "stages1": [("num_stages=2", "num_stages=1")],
            "stages1_p64": [("num_stages=2", "num_stages=1"),
                            (LN_PROGRAMS, LN_PROGRAMS.replace("32 //", "64 //"))],
            "stages1_p16": [("num_stages=2", "num_stages=1"),
                            (LN_PROGRAMS, LN_PROGRAMS.replace("32 //", "16 //"))],
            "rows2_wide": [("num_stages=2", "num_stages=1"),
                           (LN_ROWS, LN_ROWS.replace("max(1,", "max(2 if block_n == 8192 else 1,"))],
        },
    },
    "softmax": {
        "cases": [({"rows": 16384, "cols": 8192}, "bf16"), ({"rows": 16384, "cols": 8192}, "fp32"),
                  ({"rows": 65536, "cols": 128}, "bf16"), ({"rows": 8192, "cols": 1000}, "bf16"),
                  ({"rows": 4096, "cols": 4096}, "bf16"), ({"rows": 1024, "cols": 50257}, "bf16"),
                  ({"rows": 256, "cols": 131072}, "bf16")],
        "variants": {
            "expert": [],
            "warps_by_elems": [("return max(4, min(16, tile_bytes // (64 * 32)))",
                                "return 16 if tile_bytes >= 65536 else (8 if tile_bytes >= 8192 else 4)")],
            "online4k": [("ONLINE_BLOCK = 8192", "ONLINE_BLOCK = 4096")],
        },
    },
    "cross_entropy": {
        "cases": [({"rows": 8192, "vocab": 32768}, "bf16"), ({"rows": 4096, "vocab": 128256}, "bf16"),
                  ({"rows": 16384, "vocab": 4096}, "bf16"), ({"rows": 8192, "vocab": 50257}, "bf16")],
        "variants": {
            "expert": [],
            "ctas128": [("64 // num_warps", "128 // num_warps")],
            "one_row_per_program": [("programs = min(n_rows, _num_sms(logits.device) * max(1, "
                                     "64 // num_warps))", "programs = n_rows")],
        },
    },
    "gemm": {
        "tuned": "_matmul_tma_persistent_kernel",
        "cases": [({"M": 1024, "N": 1024, "K": 1024}, "bf16"), ({"M": 777, "N": 1536, "K": 1000}, "fp16"),
                  ({"M": 2048, "N": 2048, "K": 2048}, "bf16"), ({"M": 4096, "N": 4096, "K": 4096}, "bf16")],
        "variants": {
            "expert": [],
            "noprune": [(',\n                 prune_configs_by={"early_config_prune": '
                         '_prune_small_grids})', ")")],
        },
    },
}
_LN_LOAD = 'tl.load({0}_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)'
LN_W_HOIST = ("        # weight and bias: read once per program, kept in registers for every row it normalises.\n"
              f"        w = {_LN_LOAD.format('w')}\n        b = {_LN_LOAD.format('b')}\n")
LN_W16 = [(LN_W_HOIST, LN_W_HOIST.replace(".to(tl.float32)", "")),
          ("y = xc * rstd[:, None] * w[None, :] + b[None, :]",
           "y = xc * rstd[:, None] * w[None, :].to(tl.float32) + b[None, :].to(tl.float32)")]

# Issue 4 (third session): the untried idea of layernorm's NOTES.md, hoisted weight/bias kept in
# 16 bits (half the registers they hold), alone and with more resident programs.
PLANS_W16: dict[str, dict] = {
    "layernorm": {
        "cases": [({"rows": 16384, "cols": 8192}, "bf16"), ({"rows": 32768, "cols": 768}, "bf16"),
                  ({"rows": 65536, "cols": 128}, "bf16"), ({"rows": 4096, "cols": 4096}, "bf16"),
                  ({"rows": 8192, "cols": 5120}, "bf16")],
        "variants": {
            "expert": [],
            "w16": LN_W16,
            "w16_p64": [*LN_W16, (LN_PROGRAMS, LN_PROGRAMS.replace("32 //", "64 //"))],
        },
    },
}
ATTN_TABLE_V2 = """    table = [
        (128, 128, 8, 3, (128, 256)),
        (128, 64, 8, 3, (64, 128, 256)),
        (128, 64, 4, 3, (16, 32, 64)),
        (128, 64, 8, 4, (16, 32, 64)),
        (64, 64, 4, 4, (16, 32, 64)),
    ]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s, _ in table
    ], [dims for *_, dims in table]
"""
# Register caps chosen from sm_90 cross-compiles (0 spills): 122 registers and 98 KB for 128x64x2
# stages at D=128, so two CTAs (16 warps) share an SM; at D=64 168 registers let three 4-warp CTAs in.
ATTN_TABLE_OCC = """    table = [
        (128, 128, 8, 3, None, (128, 256)),
        (128, 64, 8, 3, None, (64, 128, 256)),
        (128, 64, 8, 2, 128, (64, 128)),
        (128, 32, 8, 3, 128, (128,)),
        (64, 64, 4, 2, None, (128,)),
        (64, 64, 4, 3, None, (64, 128)),
        (128, 128, 8, 2, 128, (64,)),
        (128, 64, 4, 2, 168, (64,)),
        (128, 64, 4, 3, None, (16, 32, 64)),
        (128, 64, 8, 4, None, (16, 32, 64)),
        (64, 64, 4, 4, None, (16, 32, 64)),
    ]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s, maxnreg=r)
        for bm, bn, w, s, r, _ in table
    ], [dims for *_, dims in table]
"""
ATTN_ALL_BF16 = [({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": False}, "bf16"),
                 ({"B": 8, "H": 16, "S": 4096, "D": 128, "causal": True}, "bf16"),
                 ({"B": 8, "H": 16, "S": 4096, "D": 64, "causal": False}, "bf16"),
                 ({"B": 8, "H": 16, "S": 4096, "D": 64, "causal": True}, "bf16"),
                 ({"B": 16, "H": 16, "S": 1024, "D": 128, "causal": False}, "bf16"),
                 ({"B": 2, "H": 16, "S": 8192, "D": 128, "causal": True}, "bf16"),
                 ({"B": 4, "H": 8, "S": 1000, "D": 64, "causal": False}, "bf16"),
                 ({"B": 1, "H": 16, "S": 3000, "D": 128, "causal": True}, "bf16")]

# Issue 4 (sixth session): attention at 0.79x SDPA with one CTA of 8 warps per SM; sm_90 PTX of the
# expert shows every QK^T wgmma waited (wait_group 0) before its softmax, also when the next block's
# QK^T is issued first, so Triton 3.6 overlaps nothing inside a CTA. Two CTAs per SM (a register cap)
# let one CTA's softmax run while the other's wgmma does.
PLANS_OCC: dict[str, dict] = {
    "attention": {
        "tuned": "_attn_fwd_kernel",
        "cases": ATTN_ALL_BF16,
        "variants": {
            "expert": [],
            "occupancy": [(ATTN_TABLE_V2, ATTN_TABLE_OCC)],
            "occ_acc_add": [(ATTN_TABLE_V2, ATTN_TABLE_OCC),
                            ("acc = tl.dot(p.to(dtype), v, acc)", "acc += tl.dot(p.to(dtype), v)")],
        },
    },
}
LN_TWO_SUMS = ("""        mean = tl.sum(x, axis=1) / n_cols
        xc = x - mean[:, None]
        if not EVEN_N:
            xc = tl.where(col_ok[None, :], xc, 0.0)
        var = tl.sum(xc * xc, axis=1) / n_cols
""", """        s1, s2 = tl.reduce((x, x * x), 1, _add_pair)
        mean = s1 / n_cols
        var = tl.maximum(s2 / n_cols - mean * mean, 0.0)
        xc = x - mean[:, None]
""")
LN_ADD_PAIR = ("@triton.jit\ndef _layernorm_rows_kernel(", """@triton.jit
def _add_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _layernorm_rows_kernel(""")
LN_CASES = [({"rows": 16384, "cols": 8192}, "bf16"), ({"rows": 32768, "cols": 768}, "bf16"),
            ({"rows": 65536, "cols": 128}, "bf16"), ({"rows": 4096, "cols": 4096}, "bf16"),
            ({"rows": 2048, "cols": 12288}, "bf16")]

# Issue 4 (sixth session): layernorm at 3.25-3.31 TB/s against 3.3. Mean and variance in one fused
# reduction (one cross-warp exchange instead of two), and a register cap for a third CTA per SM.
PLANS_LN_FUSED: dict[str, dict] = {
    "layernorm": {
        "cases": LN_CASES,
        "variants": {
            "expert": [],
            "one_reduction": [LN_ADD_PAIR, LN_TWO_SUMS],
            "cap80": [("            num_warps=num_warps,\n        )",
                       "            num_warps=num_warps, maxnreg=80,\n        )")],
        },
    },
}
PLANS = {"tune1": PLANS_TUNE1, "select": PLANS_SELECT, "w16": PLANS_W16, "occ": PLANS_OCC,
         "ln_fused": PLANS_LN_FUSED}


def load_variant(name: str, variant: str, subs: list[tuple[str, str]], tmp: Path):
    """expert.py of ``name`` with ``subs`` applied, imported from a temp file."""
    src = (wl.WORKLOADS / name / "expert.py").read_text()
    for old, new in subs:
        if old not in src:
            raise ValueError(f"substitution target not found: {old[:60]!r}")
        src = src.replace(old, new)
    path = tmp / f"{name}_{variant}.py"
    path.write_text(src)
    return wl.load_module(path, f"var_{name}_{variant}")


def geomean(values: list[float]) -> float:
    """Geometric mean; 0 when any value is 0 (a failed case)."""
    if not values or min(values) <= 0:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def select_variant(name: str, plan: dict, speedups: dict[str, list[float]], modules: dict, tmp: Path,
                   out: Path | None, emit) -> None:
    """Write the best variant (geomean speedup, all cases correct, >= 1% over expert) over expert.py."""
    n_cases = len(plan["cases"])
    scores = {v: geomean(s) if len(s) == n_cases else 0.0 for v, s in speedups.items()}
    base = scores.get("expert", 0.0)
    best = max(scores, key=scores.get)
    emit(f"{name:<13} SCORES " + " ".join(f"{v}={g:.4f}" for v, g in scores.items()))
    if best == "expert" or base <= 0 or scores[best] < 1.01 * base:
        emit(f"{name:<13} SELECTED expert (best other: {best} {scores[best]:.4f} vs {base:.4f})")
        return
    src = (tmp / f"{name}_{best}.py").read_text()
    (wl.WORKLOADS / name / "expert.py").write_text(src)
    if out:
        (out / f"selected_{name}.py").write_text(src)
    emit(f"{name:<13} SELECTED {best} ({scores[best]:.4f} vs expert {base:.4f}); expert.py replaced")


def main() -> int:
    """Run every plan (or those named), print the table, write results under --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*",
                        help="workloads of the plan to run, e.g. layernorm softmax (default: all of the plan's)")
    parser.add_argument("--out", type=Path, default=None,
                        help="existing folder for explore.jsonl, explore.txt and the selected variants' copies "
                             "(default: stdout only)")
    parser.add_argument("--dry", action="store_true", help="only apply the substitutions (no GPU)")
    parser.add_argument("--plan", choices=sorted(PLANS), default="select",
                        help="which recorded set of cases and variants to time (described in this script's "
                             "docstring; default: select)")
    parser.add_argument("--select", action="store_true",
                        help="write the winning variant over workloads/<name>/expert.py")
    args = parser.parse_args()
    plans = PLANS[args.plan]
    names = args.workloads or list(plans)
    if args.dry:
        tmp = Path(tempfile.mkdtemp(prefix="variants_"))
        for name in names:
            for variant, subs in plans[name]["variants"].items():
                try:
                    load_variant(name, variant, subs, tmp)
                    print(f"{name} {variant}: ok")
                except ValueError as exc:
                    print(f"{name} {variant}: stale ({exc})")
        return 0
    out_rows: list[dict] = []
    lines: list[str] = []
    ceilings = wl.measure_ceilings()
    print(f"# {torch.cuda.get_device_name(0)} ceilings {ceilings}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="variants_"))

    def emit(line: str) -> None:
        lines.append(line)
        print(line, flush=True)
        if args.out:
            (args.out / "explore.txt").write_text("\n".join(lines) + "\n")

    for name in names:
        plan = plans[name]
        tol = wl.load_manifest(name)["tolerance"]
        speedups: dict[str, list[float]] = {v: [] for v in plan["variants"]}
        refmod = wl.load_module(wl.WORKLOADS / name / "reference.py", f"ref_{name}")
        modules = {}
        for variant, subs in plan["variants"].items():
            try:
                modules[variant] = load_variant(name, variant, subs, tmp)
            except Exception as exc:  # a variant that does not load is a result, not a crash
                emit(f"{name:<13} {variant:<13} LOAD-FAIL {exc!r}"[:200])
        for shape, dtype in plan["cases"]:
            inputs = refmod.make_inputs(dict(shape), dtype, 0, device="cuda")
            ref = refmod.reference(*inputs)
            v = wl.time_cuda(lambda inputs=inputs, fn=refmod.vendor: fn(*inputs))
            fl, by = refmod.flops(shape), refmod.bytes_moved(shape, dtype)
            label = wl.shape_label(shape)
            emit(f"{name:<13} {'VENDOR':<13} {label:<34} {dtype:<5} {v['ms_median']:9.4f} ms  "
                 f"{fl / v['ms_median'] / 1e9:7.1f} TFLOP/s {by / v['ms_median'] / 1e9:6.3f} TB/s")
            for variant, mod in modules.items():
                t0 = time.time()
                try:
                    out = mod.run(*inputs)
                    torch.cuda.synchronize()
                    err = wl.rel_error(out, ref)
                    del out
                    k = wl.time_cuda(lambda mod=mod, inputs=inputs: mod.run(*inputs))
                except Exception as exc:
                    emit(f"{name:<13} {variant:<13} {label:<34} {dtype:<5} FAIL {exc!r}"[:300])
                    continue
                ms = k["ms_median"]
                row = {"workload": name, "variant": variant, "shape": shape, "dtype": dtype, "ms": ms,
                       "ms_p10": k["ms_p10"], "ms_p90": k["ms_p90"], "vendor_ms": v["ms_median"],
                       "speedup": v["ms_median"] / ms, "tflops": fl / ms / 1e9, "tbps": by / ms / 1e9,
                       "rel_err": err}
                tuned = plan.get("tuned")
                if tuned and hasattr(getattr(mod, tuned), "configs_timings"):
                    kern = getattr(mod, tuned)
                    row["best_config"] = str(kern.best_config)
                    row["config_ms"] = {str(c): t[0] if isinstance(t, list) else t
                                        for c, t in (kern.configs_timings or {}).items()}
                out_rows.append(row)
                speedups[variant].append(row["speedup"] if err <= tol[dtype] else 0.0)
                extra = f" best={row['best_config']}" if "best_config" in row else ""
                emit(f"{name:<13} {variant:<13} {label:<34} {dtype:<5} {ms:9.4f} ms  {row['tflops']:7.1f} "
                     f"TFLOP/s {row['tbps']:6.3f} TB/s x{row['speedup']:.3f} err={err:.1e} "
                     f"({time.time() - t0:.0f}s){extra}")
                if args.out:
                    with open(args.out / "explore.jsonl", "w") as fh:
                        for r in out_rows:
                            fh.write(json.dumps(r) + "\n")
            del inputs, ref
            torch.cuda.empty_cache()
        if args.select:
            select_variant(name, plan, speedups, modules, tmp, args.out, emit)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
