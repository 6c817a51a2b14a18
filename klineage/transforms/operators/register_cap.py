"""The register-cap operator: a ``maxnreg`` that fits one more program of a tensor-core kernel per SM."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from klineage.transforms._module import Module
from klineage.transforms._source import add_keyword, int_const, remove_keyword
from klineage.transforms._triton import (
    Kernel,
    accumulator_tile,
    autotune_configs,
    dotted,
    kwarg,
    sets_register_cap,
    single_value,
    value_sites,
)
from klineage.transforms.operator import Anchor, Operator, Param, Rewrite, is_int
from klineage.transforms.operators._common import anchor, param_default, reaches_dot


@dataclass(frozen=True)
class CapSite:
    """A config or launch call of a kernel where ``apply`` adds ``maxnreg=cap``."""

    kernel: Kernel
    call: ast.Call
    cap: int


_REGISTERS_PER_SM = 65536
_MIN_REGISTER_CAP = 96
"""Below this a tensor-core kernel's accumulator and operand fragments spill: no cap is proposed."""


def register_cap(num_warps: int) -> int | None:
    """The ``maxnreg`` (a multiple of 8) that lets one more program of ``num_warps`` warps share an SM
    than the registers allow without a cap (8 warps: 128, two programs instead of one; 4 warps: 168,
    three instead of two); None when that cap is below ``_MIN_REGISTER_CAP``."""
    if num_warps < 1:
        raise ValueError(f"num_warps must be positive, got {num_warps}")
    threads = 32 * num_warps
    alone = min(256, _REGISTERS_PER_SM // threads)  # registers per thread a program may take uncapped
    programs = _REGISTERS_PER_SM // (alone * threads)
    cap = _REGISTERS_PER_SM // ((programs + 1) * threads) // 8 * 8
    return cap if cap >= _MIN_REGISTER_CAP else None


#: Registers per thread a tensor-core kernel needs besides its fp32 accumulator (operand fragments, addresses,
#: loop state). The attention expert's measured best caps 128 with a 64-register accumulator (BLOCK_M 128 x
#: HEAD_DIM 128 over 8 warps) and its scores tile beside it.
_BESIDE_ACCUMULATOR = 32


def accumulator_registers(tile: Mapping[str, int], names: list[str], num_warps: int) -> int | None:
    """fp32 registers per thread that the accumulator tile ``names`` (values in ``tile``) takes over
    ``num_warps`` warps; None when a dimension's value is not known."""
    if not names or any(n not in tile for n in names):
        return None
    elements = 1
    for n in names:
        elements *= tile[n]
    return -(-elements // (32 * num_warps))


def _tile_values(m: Module, k: Kernel, call: ast.Call, names: list[str]) -> dict[str, int]:
    """The int value each of ``names`` takes at ``call`` (a config or a launch of ``k``, as ``value_sites``
    finds it), else the kernel's default; names without a literal value are left out."""
    out: dict[str, int] = {}
    for name in names:
        at = [site.node for site in value_sites(m.src, k, name, m.al) if site.owner is call]
        value = int_const(at[0]) if at else int_const(param_default(k, name))
        if value is not None:
            out[name] = value
    return out


def _config_calls(m: Module) -> list[ast.Call]:
    """Every ``triton.Config(...)`` call of the module (wherever the config list is built)."""
    return [
        n
        for n in ast.walk(m.src.tree)
        if isinstance(n, ast.Call) and (dotted(n.func) or "").rpartition(".")[2] == "Config"
    ]


def _literal_warps(call: ast.Call, host: ast.FunctionDef | None) -> int | None:
    """The warps a config or launch asks for: a literal, a host local bound once to one (``host``: the
    function holding the launch), or Triton's default of 4 when unset; None when not known."""
    node = kwarg(call, "num_warps")
    if node is None:
        return 4
    warps = int_const(node)
    if warps is None and isinstance(node, ast.Name) and host is not None:
        warps = int_const(single_value(host, node.id))
    return warps


class RegisterCap(Operator):
    """A register cap (maxnreg) that fits one more program of a tensor-core kernel on each SM."""

    id = "register-cap"
    feature = "register_cap"
    name = "Cap registers for one more program per SM"
    intent = (
        "Cap the registers per thread (maxnreg) so a second program of a tensor-core kernel fits on each "
        "SM: one program's softmax or epilogue then runs while the other's MMAs do."
    )
    carrier = "maxnreg in the autotune configs or at the launch"
    anchor_predicate = "has_dot and not register_cap"
    anchor_description = "a launched tl.dot kernel whose warps per program are known and no maxnreg"
    default_params: ClassVar[Mapping[str, Any]] = {"maxnreg": None}
    params = (Param("maxnreg", lambda v: is_int(v) and 16 <= v <= 255, "an int in 16..255"),)
    record = "code"
    echo = ("maxnreg",)

    @staticmethod
    def _sites(m: Module) -> list[ast.Call]:
        """Configs and launches that set maxnreg."""
        launches = [la.call for k in m.kernels for la in m.launches_of(k)]
        return [c for c in (*_config_calls(m), *launches) if sets_register_cap(c)]

    @staticmethod
    def _additions(m: Module, maxnreg: int | None) -> list[CapSite]:
        """Each place ``apply`` adds a cap: the configs of an autotuned dot kernel, else its launches;
        warps from a literal (Triton's default 4 when unset). A config or launch whose fp32 accumulator
        tile needs more registers per thread than the cap leaves (``_BESIDE_ACCUMULATOR`` kept for the
        rest) gets none."""
        out: list[CapSite] = []
        for k in m.launched:
            if not reaches_dot(k, m):
                continue
            targets: list[tuple[ast.Call, ast.FunctionDef | None]]
            if k.autotune is not None:
                targets = [(c, None) for c in autotune_configs(k.autotune, m.al, m.src.tree)]
            else:
                targets = [(la.call, la.func) for la in m.launches_of(k) if la.helper is None]
            acc = accumulator_tile(k, m.al)
            for call, host in targets:
                warps = _literal_warps(call, host)
                cap = maxnreg or (register_cap(warps) if warps else None)
                if cap is None or kwarg(call, "maxnreg") is not None:
                    continue
                need = accumulator_registers(_tile_values(m, k, call, acc), acc, warps) if warps else None
                if need is not None and cap < need + _BESIDE_ACCUMULATOR:
                    continue  # the accumulator alone would not fit: ptxas fails (seen: 128 x 256 over 8 warps)
                out.append(CapSite(k, call, cap))
        return out

    def _detect(self, m: Module) -> list[Anchor]:
        """maxnreg set in a config or launch (present); dot kernels apply would cap (applicable)."""
        sites = self._sites(m)
        if sites:
            return [anchor("present", c, f"maxnreg={m.src.seg(cap)}") for c in sites
                    if (cap := kwarg(c, "maxnreg")) is not None]  # every site sets it (_sites)
        return [
            anchor("applicable", a.call, f"{a.kernel.name}: maxnreg={a.cap} fits one more program per SM", a.kernel)
            for a in self._additions(m, None)
        ]

    def _simplify(self, m: Module) -> Rewrite | None:
        """Remove every maxnreg from configs and launches (registers back to the compiler's choice)."""
        return self._removed(m, [e for c in self._sites(m) if (e := remove_keyword(m.src, c, "maxnreg")) is not None])

    def _apply(self, m: Module, maxnreg: int | None = None) -> Rewrite | None:
        """Add ``maxnreg`` (given, or ``register_cap`` of the warps) to each config of an autotuned dot
        kernel, or to its launches; with the ``code`` simplify recorded, put back the expert's caps."""
        if self._sites(m):
            return None
        edits = [add_keyword(m.src, a.call, f"maxnreg={a.cap}") for a in self._additions(m, maxnreg)]
        return self._edited(m, edits, {"maxnreg": maxnreg}, "apply")
