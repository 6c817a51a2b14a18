"""Triton's launch entry points in one place, and replacing them for a while.

``kernel[grid](...)`` ends in ``JITFunction.run`` (``InterpretedFunction.run`` under
``TRITON_INTERPRET=1``, where ``@triton.jit`` makes those instead), and an autotuned kernel's launch in
``Autotuner.run``, which calls its ``fn.run`` with each config. Three parts of the validator stand in
for these methods while a candidate's ``run`` executes: the worker's ``harness.LaunchWatch`` (counts
launches, pins autotune configs, then launches), the compile gate's ``CompileProbe`` (compiles each
variant, launches nothing) and the launch census (records each grid's size, launches nothing). They
share this module: which classes launch, and how their methods are replaced and restored.

Imported only where Triton may be imported (a worker, a census worker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

try:  # the interpreter module imports numpy; always present with triton 3.6
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - every Triton we support has it
    InterpretedFunction = None

#: A replacement's maker: given the method it replaces, the method to install.
Replacement = Callable[[Callable[..., Any]], Callable[..., Any]]


def jit_launchers(interpreted: bool = True) -> tuple[type, ...]:
    """The classes whose ``run`` launches one kernel: ``JITFunction``, and ``InterpretedFunction`` too
    (when Triton has it and ``interpreted``)."""
    return (JITFunction,) + ((InterpretedFunction,) if interpreted and InterpretedFunction is not None else ())


def is_jit_launcher(value: Any) -> bool:
    """Whether ``value`` is a ``@triton.jit`` kernel (compiled or interpreted), not a wrapper of one."""
    return isinstance(value, jit_launchers())


class LaunchPatch:
    """Replaced ``run`` methods of Triton's launch classes, restored by ``restore`` (in reverse order)."""

    def __init__(self) -> None:
        self._saved: list[tuple[type, Callable[..., Any]]] = []

    def replace(self, cls: type, make: Replacement) -> None:
        """Install ``make(original run)`` as ``cls.run``."""
        original = cls.run  # type: ignore[attr-defined]
        self._saved.append((cls, original))
        cls.run = make(original)  # type: ignore[attr-defined]

    def replace_launches(self, jit: Replacement, autotune: Replacement | None = None,
                         interpreted: bool = True) -> None:
        """``jit`` on every class of ``jit_launchers(interpreted)``, ``autotune`` on ``Autotuner``."""
        for cls in jit_launchers(interpreted):
            self.replace(cls, jit)
        if autotune is not None:
            self.replace(Autotuner, autotune)

    def restore(self) -> None:
        """Put every replaced method back."""
        for cls, original in reversed(self._saved):
            cls.run = original
        self._saved.clear()
