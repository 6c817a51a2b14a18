"""The common interface of optimization operators (CATALOG.md).

An operator is one source-level rewrite of a Triton candidate module with three parts:
``detect`` (anchors: where the optimization is present, or where it could be added), ``simplify``
(remove it: used when walking an expert kernel backward) and ``apply`` (add it to code that lacks
it: used by the agent). Both rewrites are pure ``str -> str`` functions returning a ``Rewrite`` (the
new source plus a unified diff), or ``None`` when the pattern is absent or not recognised: an
operator never guesses.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from klineage.schema import pyast

Direction = Literal["simplify", "apply"]
AnchorKind = Literal["present", "applicable"]


@dataclass(frozen=True)
class Anchor:
    """A place in the source where an optimization is present or could be applied.

    ``start_line``/``end_line`` are 1-based and inclusive; ``kernel`` names the ``@triton.jit``
    function concerned (None for module-level anchors such as ``run``).
    """

    kind: AnchorKind
    start_line: int
    end_line: int
    description: str
    kernel: str | None = None


@dataclass(frozen=True)
class Rewrite:
    """The result of one operator direction on one source."""

    source: str
    diff: str
    operator: str
    params: Mapping[str, Any] = field(default_factory=dict)
    direction: Direction = "simplify"


def unified_diff(before: str, after: str, name: str = "kernel.py") -> str:
    """A unified diff (3 lines of context) between two sources."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}"
        )
    )


def make_rewrite(
    before: str, after: str, operator: str, params: Mapping[str, Any], direction: Direction
) -> Rewrite | None:
    """Build a ``Rewrite``; None when nothing changed or the result does not parse (never emit
    broken code)."""
    if after == before:
        return None
    try:
        pyast.parse(after)
    except SyntaxError:
        return None
    return Rewrite(after, unified_diff(before, after), operator, dict(params), direction)


class Operator(ABC):
    """Base class of every operator. Subclasses set the class attributes and the three methods."""

    id: ClassVar[str]
    name: ClassVar[str]
    intent: ClassVar[str]
    carrier: ClassVar[str]
    anchor_predicate: ClassVar[str]
    anchor_description: ClassVar[str]
    default_params: ClassVar[Mapping[str, Any]] = {}

    @abstractmethod
    def detect(self, source: str) -> list[Anchor]:
        """Anchors where the optimization is present (kind "present") or could be added ("applicable")."""

    @abstractmethod
    def simplify(self, source: str) -> Rewrite | None:
        """Remove the optimization; None when absent or not recognised."""

    @abstractmethod
    def apply(self, source: str, **params: Any) -> Rewrite | None:
        """Add the optimization to code that lacks it; None when not applicable."""

    def present(self, source: str) -> bool:
        """True when ``detect`` finds the optimization present."""
        return any(a.kind == "present" for a in self.detect(source))

    def applicable(self, source: str) -> bool:
        """True when ``detect`` finds a place to add the optimization."""
        return any(a.kind == "applicable" for a in self.detect(source))

    def _rewrite(
        self, before: str, after: str, params: Mapping[str, Any], direction: Direction
    ) -> Rewrite | None:
        return make_rewrite(before, after, self.id, params, direction)

    def __repr__(self) -> str:
        return f"<Operator {self.id}>"
