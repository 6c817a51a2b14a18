"""The common interface of optimization operators (CATALOG.md).

An operator is one source-level rewrite of a Triton candidate module with three parts:
``detect`` (anchors: where the optimization is present, or where it could be added), ``simplify``
(remove it: used when walking an expert kernel backward) and ``apply`` (add it to code that lacks
it: used by the agent). Both rewrites are pure ``str -> str`` functions returning a ``Rewrite`` (the
new source plus a unified diff), or ``None`` when the pattern is absent or not recognised: an
operator never guesses.

``Operator`` is a template: it parses the source once, checks ``apply``'s parameters against the
operator's declared ``params`` and puts back what ``simplify`` removed (its one ``record``
parameter); an operator writes only ``_detect``, ``_simplify`` and ``_apply`` on the parsed module.
"""

from __future__ import annotations

import difflib
from abc import ABC
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from klineage.schema import pyast
from klineage.transforms._hunks import hunks, undo_hunks
from klineage.transforms._module import Module, parse
from klineage.transforms._source import Edit, apply_edits

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


@dataclass(frozen=True)
class Param:
    """One parameter ``apply`` takes: its name and, when not every value is valid, what a valid
    value is (``valid``) and how to say it (``must``, completing "<name> must be ...")."""

    name: str
    valid: Callable[[Any], bool] | None = None
    must: str = ""


def is_int(value: Any) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_records(value: Any) -> bool:
    """True for a list of dicts (a restore record as ``simplify`` wrote it)."""
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


class Operator(ABC):
    """Base class of every operator: the class attributes describe it (CATALOG.md); subclasses write
    ``_detect``, ``_simplify`` and ``_apply`` on the parsed module, declare the parameters ``apply``
    takes (``params``) and, when ``simplify`` records what it removed, the name of that record
    (``record``): ``apply`` given it puts back exactly that (hunks by default; an operator whose
    record lists value sites writes ``_restore_edits``)."""

    id: ClassVar[str]
    name: ClassVar[str]
    intent: ClassVar[str]
    carrier: ClassVar[str]
    anchor_predicate: ClassVar[str]
    anchor_description: ClassVar[str]
    default_params: ClassVar[Mapping[str, Any]] = {}
    params: ClassVar[tuple[Param, ...]] = ()
    """The parameters ``apply`` takes besides ``record``; any other name is a TypeError."""
    record: ClassVar[str | None] = None
    """The parameter in which ``simplify`` records what it removed (a list of dicts)."""
    echo: ClassVar[tuple[str, ...]] = ()
    """Parameters the restoring ``apply`` reports in its ``Rewrite.params`` before the record."""
    feature: ClassVar[str | None] = None
    """The boolean kernel feature (``schema.kernel_features``) that names this optimization:
    ``kernel_features`` sets it from this operator's ``detect`` (true exactly when an anchor is
    "present"), so the features and the operators recognise each optimization one way. None for an
    operator whose effect is a value (a tile, warps, stages) rather than a pattern."""

    # ------------------------------------------------------------------------------------ template

    def detect(self, source: str) -> list[Anchor]:
        """Anchors where the optimization is present (kind "present") or could be added ("applicable");
        none for a source that does not parse."""
        m = parse(source)
        return [] if m is None else self._detect(m)

    def absent_reason(self, source: str) -> str | None:
        """Why ``detect`` finds no place to add the optimization, when the kernel has what the anchor
        description asks for and the operator can say more (e.g. the value it would set is the
        default already); None otherwise (the anchor description is the reason)."""
        m = parse(source)
        return None if m is None else self._absent_reason(m)

    def present_in(self, m: Module) -> bool:
        """Whether ``detect`` finds the optimization present in the parsed module ``m``."""
        return any(a.kind == "present" for a in self._detect(m))

    def simplify(self, source: str, **options: Any) -> Rewrite | None:
        """Remove the optimization; None when absent, not recognised or the source does not parse."""
        m = parse(source)
        return None if m is None else self._simplify(m, **options)

    def apply(self, source: str, **params: Any) -> Rewrite | None:
        """Add the optimization to code that lacks it; None when not applicable. With the record
        ``simplify`` wrote (``record``), put back exactly what it removed (None: its anchors are not
        found). TypeError for a parameter the operator does not take, ValueError for an invalid value."""
        self.check_params(params)
        recorded = params.get(self.record) if self.record is not None else None
        if recorded is not None:
            return self._restore(source, recorded, params)
        m = parse(source)
        if m is None:
            return None
        return self._apply(m, **{k: v for k, v in params.items() if k != self.record})

    def check_params(self, params: Mapping[str, Any]) -> None:
        """TypeError naming the parameters ``apply`` does not take (never ignored); ValueError for a
        given (not None) value that its ``Param`` or the record's shape rejects."""
        known = {p.name: p for p in self.params}
        allowed = set(known) | ({self.record} if self.record is not None else set())
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise TypeError(
                f"{self.id}.apply got unexpected parameter(s) {', '.join(map(repr, unknown))}; "
                f"it takes: {', '.join(sorted(allowed)) or 'none'}"
            )
        for name, value in params.items():
            p = known.get(name)
            if value is not None and p is not None and p.valid is not None and not p.valid(value):
                raise ValueError(f"{self.id}.apply: {name} must be {p.must}, got {value!r}")
        if self.record is not None and params.get(self.record) is not None and not is_records(params[self.record]):
            raise ValueError(
                f"{self.id}.apply: {self.record} must be a list of records (dicts) as simplify recorded them"
            )

    # ------------------------------------------------------------------------------- what differs

    def _detect(self, m: Module) -> list[Anchor]:
        raise NotImplementedError(f"{type(self).__name__} does not detect")

    def _absent_reason(self, m: Module) -> str | None:
        return None

    # ``*args: Any, **params: Any``: each operator's override names the options and parameters it takes
    def _simplify(self, m: Module, *args: Any, **options: Any) -> Rewrite | None:
        raise NotImplementedError(f"{type(self).__name__} does not simplify")

    def _apply(self, m: Module, *args: Any, **params: Any) -> Rewrite | None:
        raise NotImplementedError(f"{type(self).__name__} does not apply")

    def _restore_edits(
        self, m: Module, recorded: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> list[Edit] | None:
        """Edits putting back a record of value sites; None when a site is not found. Operators
        recording hunks (the default) do not override it."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------- helpers

    def present(self, source: str) -> bool:
        """True when ``detect`` finds the optimization present."""
        return any(a.kind == "present" for a in self.detect(source))

    def applicable(self, source: str) -> bool:
        """True when ``detect`` finds a place to add the optimization."""
        return any(a.kind == "applicable" for a in self.detect(source))

    def _restore(self, source: str, recorded: list[dict[str, Any]], params: Mapping[str, Any]) -> Rewrite | None:
        """``apply`` given the record: the hunks put back, or the ``_restore_edits`` of a site record."""
        echo = {n: params.get(n) for n in (*self.echo, self.record) if n is not None}
        if type(self)._restore_edits is Operator._restore_edits:
            after = undo_hunks(source, recorded)
            return None if after is None else self._rewrite(source, after, echo, "apply")
        m = parse(source)
        edits = self._restore_edits(m, recorded, params) if m is not None else None
        return None if edits is None else self._edited(m, edits, echo, "apply")  # type: ignore[arg-type]

    def _edited(
        self, m: Module, edits: Collection[Edit], params: Mapping[str, Any], direction: Direction
    ) -> Rewrite | None:
        """The Rewrite applying ``edits`` to the parsed source; None when there are none."""
        if not edits:
            return None
        return self._rewrite(m.src.text, apply_edits(m.src.text, edits), params, direction)

    def _removed(self, m: Module, edits: Sequence[Edit], **params: Any) -> Rewrite | None:
        """``simplify``'s Rewrite applying ``edits`` and recording what they replace (hunks) under
        ``record``, after ``params``."""
        if not edits or self.record is None:
            return None
        return self._edited(m, edits, {**params, self.record: hunks(m.src.text, edits)}, "simplify")

    def _rewrite(
        self, before: str, after: str, params: Mapping[str, Any], direction: Direction
    ) -> Rewrite | None:
        return make_rewrite(before, after, self.id, params, direction)

    def __repr__(self) -> str:
        return f"<Operator {self.id}>"
