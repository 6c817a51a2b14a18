"""A parsed candidate module: source, aliases, kernels and launches (what every operator reads)."""

from __future__ import annotations

from dataclasses import dataclass

from klineage.transforms._source import Src
from klineage.transforms._triton import (
    Aliases,
    Kernel,
    Launch,
    Site,
    aliases,
    kernels,
    launches,
    value_sites,
)


@dataclass
class Module:
    """A parsed candidate: source, aliases, kernels and launches."""

    src: Src
    al: Aliases
    kernels: list[Kernel]
    launches: list[Launch]

    @property
    def launched(self) -> list[Kernel]:
        """Kernels launched from host code."""
        names = {la.kernel for la in self.launches}
        return [k for k in self.kernels if k.name in names]

    def launches_of(self, kernel: Kernel) -> list[Launch]:
        """Launches of one kernel."""
        return [la for la in self.launches if la.kernel == kernel.name]

    def kernel(self, name: object) -> Kernel | None:
        """The kernel called ``name``, else None."""
        return next((k for k in self.kernels if k.name == name), None)

    def sites(self, kernel: Kernel, name: str) -> list[Site]:
        """Where the value of ``name`` is written for ``kernel`` (see ``value_sites``)."""
        return value_sites(self.src, kernel, name, self.al)

    @property
    def tl(self) -> str:
        """The local name of triton.language."""
        return sorted(self.al.tl)[0]

    @property
    def triton(self) -> str:
        """The local name of triton."""
        return sorted(self.al.triton)[0]


def parse(source: str) -> Module | None:
    """Parse a candidate; None when it does not parse."""
    try:
        src = Src(source)
    except SyntaxError:
        return None
    al = aliases(src.tree)
    ks = kernels(src.tree, al)
    return Module(src, al, ks, launches(src.tree, ks))
