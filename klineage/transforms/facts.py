"""What a kernel's source tells skill search: static features, a summary, and operator anchors.

The one analysis behind every kernel-aware search: the GraphQL resolver, ``klineage search --kernel``
and the agent build their search inputs here and pass them to the one service function,
``KnowledgeBase.search`` (``search_kwargs``). Pure functions of the source; nothing here imports ``kb``:
an anchor is a plain ``{"state": ..., "detail": ...}`` mapping that the search reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The anchor states ``kb.search`` understands.
APPLICABLE, PRESENT, ABSENT = "applicable", "present", "absent"


@dataclass(frozen=True)
class KernelFacts:
    """The search inputs derived from one kernel source (arguments of ``KnowledgeBase.search``)."""

    features: dict[str, Any]
    summary: str
    operator_anchors: dict[str, dict[str, str]]

    def search_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``KnowledgeBase.search``."""
        return {"kernel_features": self.features, "kernel_summary": self.summary,
                "operator_anchors": self.operator_anchors}

    def state(self, operator: str) -> str | None:
        """The anchor state of ``operator`` in this kernel (None when its analysis failed)."""
        anchor = self.operator_anchors.get(operator)
        return anchor["state"] if anchor else None


def _where(anchors: list[Any]) -> str:
    seen = dict.fromkeys(f"{a.description} (line {a.start_line})" for a in anchors)
    return "; ".join(seen)


def _absent_detail(op: Any, source: str) -> str:
    """Why ``op`` has no anchor in ``source``: its own reason (``Operator.absent_reason``) when it
    gives one, else what its anchor needs."""
    try:
        reason = op.absent_reason(source)
    except Exception:  # an operator bug must not break search: fall back to the description
        reason = None
    return reason or f"it needs {op.anchor_description}"


def operator_anchors(source: str, features: dict[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """For every registered operator, its anchor state in ``source`` (``{"state", "detail"}``):

    - "applicable" when its contract holds on the kernel (``contracts.unmet`` is empty), its
      ``detect`` finds a place to add it AND its ``apply`` (default parameters) actually rewrites the
      source: a skill is never recommended where applying it would change nothing; or, on an autotuned
      kernel, when it does all that with the configs taken out and put back (``under_autotune``);
    - else "present" when ``detect`` finds it already there;
    - else "absent", with the reason (the contract it breaks, what the operator needs, or that apply
      changes nothing).

    ``features``: the source's ``kernel_features`` when the caller has them. An operator whose
    ``detect`` or ``apply`` raises is left out: its anchor stays unknown to the search rather than
    guessed.
    """
    from klineage.transforms.contracts import contract_of, unmet
    from klineage.transforms.features import kernel_features
    from klineage.transforms.registry import all_operators
    from klineage.transforms.under_autotune import apply_under_autotune

    features = kernel_features(source) if features is None else features
    out: dict[str, dict[str, str]] = {}
    for op in all_operators():
        try:
            found = op.detect(source)
            applicable = [a for a in found if a.kind == "applicable"]
            contract_breaks = unmet(contract_of(op.id), features)
            broken = contract_breaks if applicable else []
            if broken:
                applicable = []
            changes = bool(applicable) and op.apply(source) is not None
            present = [a for a in found if a.kind == "present"]
            # a structural operator an autotuned kernel refuses, made with its configs out and back in
            under = (not changes and not present and not contract_breaks
                     and apply_under_autotune(op, source) is not None)
        except Exception:  # an operator bug must not break search: its anchor stays unknown, not guessed
            continue
        if changes:
            out[op.id] = {"state": APPLICABLE, "detail": _where(applicable)}
        elif under:
            out[op.id] = {"state": APPLICABLE, "detail": "the kernel with its autotune configs taken out, the "
                                                         "operator applied, the same configs put back"}
        elif present:
            out[op.id] = {"state": PRESENT, "detail": _where(present)}
        elif broken:
            out[op.id] = {"state": ABSENT, "detail": "its contract rules it out: " + "; ".join(broken)}
        elif applicable:
            out[op.id] = {"state": ABSENT, "detail": f"its detect finds {_where(applicable)}, "
                                                     "but its apply changes nothing there"}
        else:
            out[op.id] = {"state": ABSENT, "detail": _absent_detail(op, source)}
    return out


def kernel_facts(source: str) -> KernelFacts:
    """Features, summary and operator anchors of a candidate source; SyntaxError when it does not parse."""
    from klineage.transforms.features import kernel_features, kernel_summary

    features = kernel_features(source)
    return KernelFacts(features, kernel_summary(source), operator_anchors(source, features))
